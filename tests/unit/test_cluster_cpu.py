"""``party.cluster.worker_cpu``: a worker's CPU in total and in its task threads (by name)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from party.cluster import TASK_THREAD_NAME, WorkerCpu, worker_cpu


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_task_threads_are_counted_apart_from_the_rest_of_the_process() -> None:
    before = worker_cpu()
    _burn(0.3)  # the main thread: process CPU, not task CPU
    done = threading.Event()

    def run_task() -> None:  # burns, then stays alive until the reading below
        _burn(0.3)
        done.set()
        time.sleep(0.5)

    task = threading.Thread(target=run_task, name=f"0-{TASK_THREAD_NAME}-1-0")
    task.start()
    done.wait()
    during = worker_cpu() - before  # read while the task thread is still alive
    task.join()
    assert 0.2 <= during.tasks <= 0.45
    assert during.process >= during.tasks + 0.2
    assert WorkerCpu(2.0, 1.0) - WorkerCpu(0.5, 0.25) == WorkerCpu(1.5, 0.75)
