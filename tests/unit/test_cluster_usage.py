"""``party.cluster.worker_usage``: a worker's CPU in total and in its task threads (by name), its peak RSS."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from party.cluster import TASK_THREAD_NAMES, WorkerUsage, serving_thread, worker_usage


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
@pytest.mark.parametrize("kind", TASK_THREAD_NAMES)  # tasks, and calls of actors
def test_task_threads_are_counted_apart_from_the_rest_of_the_process(kind: str) -> None:
    before = worker_usage()
    _burn(0.2)  # the main thread: process CPU, not task CPU
    done = threading.Event()

    def run_task() -> None:  # burns, then stays alive until the reading below
        _burn(0.2)
        done.set()
        time.sleep(0.5)

    task = threading.Thread(target=run_task, name=f"0-{kind}-1-0")
    task.start()
    done.wait()
    during = worker_usage() - before  # read while the task thread is still alive
    task.join()
    assert 0.15 <= during.tasks <= 0.35
    assert during.process >= during.tasks + 0.15
    # the CPU in between, the later peak, and the process's CPU before (from its start)
    assert WorkerUsage(2.0, 1.0, 9) - WorkerUsage(0.5, 0.25, 5) == WorkerUsage(1.5, 0.75, 9, 0.5)
    assert during.peak_rss > 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_a_serving_threads_cpu_counts_after_it_has_ended() -> None:
    """A thread that notes its CPU after each step (a round channel's, ``serving_thread``):
    counted with the tasks though ``/proc/self/task`` no longer lists it; an unnamed thread
    that does not note is not."""
    before = worker_usage()

    def serve() -> None:
        served = serving_thread()
        for _ in range(2):
            _burn(0.1)
            served()

    for target in (serve, lambda: _burn(0.2)):
        thread = threading.Thread(target=target, name="not-a-dask-task-thread")
        thread.start()
        thread.join()
    after = worker_usage() - before
    assert 0.15 <= after.tasks <= 0.3
    assert after.process >= after.tasks + 0.15
