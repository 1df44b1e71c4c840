"""``party.cluster.GatedLane``: lanes sharing a gate run at most its number of tasks at once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, ThreadPoolExecutor

import pytest

from party.cluster import GatedLane


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
