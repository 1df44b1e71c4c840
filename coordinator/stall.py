"""Stalls of the coordinator's own event loop (SIGSTOP, swapping, a blocked thread), so that a
silence the coordinator caused itself is not blamed on a party.

A monitor task wakes every TICK seconds and records when it last ran and when it last woke up
late by more than STALL seconds. ``stalled_since(t)`` is true when the loop was stalled at any
time after monotonic time ``t``, including a stall it has not yet recorded (the monitor itself has
not run for more than STALL seconds). Timers that expire during a stall all fire at once when the
process resumes, before the messages that arrived meanwhile are read, so a liveness timeout that
fires right after a stall says nothing about the party.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

TICK = 0.25
STALL = 1.5


class LoopStallMonitor:
    def __init__(self) -> None:
        self.last_tick: float | None = None
        self.last_stall_end = float("-inf")
        self.longest = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start ticking in the running loop (idempotent)."""
        if self._task is None:
            self.last_tick = time.monotonic()
            self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            now = time.monotonic()
            assert self.last_tick is not None
            gap = now - self.last_tick
            if gap > STALL:
                self.last_stall_end = now
                self.longest = max(self.longest, gap)
            self.last_tick = now

    def stalled_since(self, t: float) -> bool:
        """True when the loop stalled (for more than STALL seconds) after monotonic time ``t``."""
        if self.last_tick is None:
            return False
        return self.last_stall_end >= t or time.monotonic() - self.last_tick > STALL
