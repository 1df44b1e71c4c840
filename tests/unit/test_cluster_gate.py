"""Gates of the embedded cluster: lanes sharing a ``party.cluster.GatedLane`` gate, and worker
processes sharing ``party.cluster_tasks.core_slot``'s slot files, run at most their number of
tasks at once."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor
from typing import Any

import pytest

from party.cluster import GatedLane
from party.cluster_tasks import CoreSlots, core_slot, gated


class _Running:
    """Counts the tasks running at once (the most seen)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def task(self, value: int, seconds: float = 0.02) -> int:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(seconds)
        with self.lock:
            self.now -= 1
        return value * value


@pytest.mark.parametrize("at_once", [1, 2, 3])
def test_lanes_sharing_a_gate_run_at_most_its_number_of_tasks(at_once: int) -> None:
    running = _Running()
    pools = [ThreadPoolExecutor(max_workers=2) for _ in range(4)]  # 8 threads could run 8 tasks
    gate = threading.BoundedSemaphore(at_once)
    lanes = [GatedLane(pool, gate) for pool in pools]
    try:
        futures = [lanes[i % 4].submit(running.task, i) for i in range(16)]
        assert [f.result() for f in futures] == [i * i for i in range(16)]
    finally:
        for lane in lanes:
            lane.shutdown()
    assert running.most == at_once
    for _ in range(at_once):  # every slot was given back
        assert gate.acquire(blocking=False)
    assert not gate.acquire(blocking=False)


def _fails() -> None:
    raise ValueError("boom")


def test_a_failed_or_cancelled_task_gives_its_slot_back() -> None:
    gate = threading.BoundedSemaphore(1)
    started = threading.Event()
    release = threading.Event()

    def hold() -> None:
        started.set()
        release.wait(5)

    with ThreadPoolExecutor(max_workers=1) as pool:
        lane = GatedLane(pool, gate)
        with pytest.raises(ValueError, match="boom"):
            lane.submit(_fails).result()
        first = lane.submit(hold)
        started.wait(5)
        # the gate is full: a second submit waits until the first task ends
        waiter = threading.Thread(target=lambda: lane.submit(time.sleep, 0).result())
        waiter.start()
        time.sleep(0.05)
        assert waiter.is_alive()
        release.set()
        first.result()
        waiter.join(5)
        assert not waiter.is_alive()
    with ThreadPoolExecutor(max_workers=1) as pool:  # a task cancelled before it started
        lane = GatedLane(pool, threading.BoundedSemaphore(2))
        release.clear()
        busy = lane.submit(release.wait, 5)
        queued = lane.submit(time.sleep, 0)
        assert queued.cancel()
        with pytest.raises(CancelledError):
            queued.result()
        release.set()
        busy.result()
        assert lane.gate.acquire(blocking=False) and lane.gate.acquire(blocking=False)


def _in_a_slot(folder: str, slots: int, start: Any, running: Any, most: Any, held: Any) -> None:
    """A worker process: wait for the others, then hold a slot for 0.3 s, counting the
    processes inside at once and the slots they hold."""
    start.wait(10)

    def inside() -> None:
        with running.get_lock():
            running.value += 1
            most.value = max(most.value, running.value)
        time.sleep(0.3)
        with running.get_lock():
            running.value -= 1

    with core_slot(folder, slots) as slot:
        held[slot] += 1
        inside()


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_worker_processes_sharing_slot_files_run_at_most_that_many_tasks(
    slots: int, tmp_path
) -> None:
    """Five processes (as the embedded cluster's workers) started together: at most ``slots``
    are inside at once, each slot is taken, and every process gets its turn."""
    ctx = multiprocessing.get_context("fork")
    start = ctx.Barrier(5)
    running, most = ctx.Value("i", 0), ctx.Value("i", 0)
    held = ctx.Array("i", slots)
    procs = [
        ctx.Process(target=_in_a_slot, args=(str(tmp_path), slots, start, running, most, held))
        for _ in range(5)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(20)
    assert [p.exitcode for p in procs] == [0] * 5
    assert most.value == slots
    taken = list(held[:])
    assert sum(taken) == 5 and min(taken) >= 1


def _hold_and_die(folder: str) -> None:
    with core_slot(folder, 1):
        os._exit(0)  # no clean-up: the lock goes with the process


def test_a_dead_holders_slot_is_free_and_a_gated_task_returns_its_result(tmp_path) -> None:
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=_hold_and_die, args=(str(tmp_path),))
    p.start()
    p.join(10)
    assert p.exitcode == 0
    with ThreadPoolExecutor(max_workers=1) as pool:
        assert pool.submit(gated, str(tmp_path), 1, divmod, 17, 5).result(timeout=5) == (3, 2)
    with ThreadPoolExecutor(max_workers=1) as pool:
        with core_slot(str(tmp_path), 1):
            waiting = pool.submit(gated, str(tmp_path), 1, divmod, 9, 4)  # the slot is held
            time.sleep(0.1)
            assert not waiting.done()
        assert waiting.result(timeout=5) == (2, 1)  # given back when the block ended


def test_a_task_waiting_for_a_slot_gives_up_when_the_comparison_ends(tmp_path) -> None:
    """The slot files removed (``ClusterTasks.close``) while a task waits: it raises instead of
    running its work for a comparison that is over."""
    ran: list[int] = []
    with ThreadPoolExecutor(max_workers=1) as pool, core_slot(str(tmp_path), 1):
        waiting = pool.submit(gated, str(tmp_path), 1, ran.append, 1)
        time.sleep(0.05)
        assert not waiting.done()
        for path in tmp_path.iterdir():
            path.unlink()
        with pytest.raises(FileNotFoundError, match="slot files are gone"):
            waiting.result(timeout=5)
    assert ran == []


def _slot_of(slots: CoreSlots) -> int:
    with slots.hold() as slot:
        return slot


def test_core_slots_kept_open_lock_and_unlock_across_holds(tmp_path) -> None:
    """An actor's ``CoreSlots``: its files stay open across holds (no descriptor per call),
    a held slot keeps another holder of the same files waiting, its release lets it in, and
    ``close`` closes the files."""
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    actor = CoreSlots(str(tmp_path), 1)
    opened = fds()
    for _ in range(50):
        with actor.hold() as slot:
            assert slot == 0
    assert fds() == opened
    with ThreadPoolExecutor(max_workers=1) as pool:
        with actor.hold():
            waiting = pool.submit(gated, str(tmp_path), 1, divmod, 9, 4)
            time.sleep(0.1)
            assert not waiting.done()
        assert waiting.result(timeout=5) == (2, 1)
        with core_slot(str(tmp_path), 1):  # the actor's own release left the slot free
            busy = pool.submit(_slot_of, actor)
            time.sleep(0.1)
            assert not busy.done()
        assert busy.result(timeout=5) == 0
    actor.close()
    assert fds() == opened - 1
    with core_slot(str(tmp_path), 1) as slot:
        assert slot == 0
