"""The process-wide pool of kernel threads and work cut into one contiguous range per thread.

Used by the comparison kernels, block indexing and the mpc3 gate kernels: every compiled loop they
hand to the pool releases the GIL and takes a [lo, hi) range of the index it is split on (blocks,
rows, candidate sets, lanes or words); ranges that cover [0, total) without overlap write disjoint
output elements, so results do not depend on the number of threads.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

T = TypeVar("T")


@functools.lru_cache(maxsize=8)
def thread_pool(workers: int) -> ThreadPoolExecutor:
    """A process-wide pool of ``workers`` threads for the kernels (created on first use)."""
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pprl-kernel")


#: Below this many uint64 words of work a layer stays in the calling thread (a hand-off to the
#: pool costs about as much as this many words of gate evaluation).
PARALLEL_MIN_WORDS = 1 << 15


def split_range(total: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """Contiguous non-empty [lo, hi) ranges covering [0, total) in order, at most ``parts``; every
    cut except the end is a multiple of ``align``."""
    if total <= 0:
        return []
    units = -(-total // align)
    parts = max(1, min(parts, units))
    cuts = [min(total, (units * k // parts) * align) for k in range(parts + 1)]
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


def split_running_sum(cum: np.ndarray, lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """Contiguous non-empty ranges covering [lo, hi) in order, at most ``parts``, of about equal
    sums of the weights whose running sum is ``cum`` (cum[i] = weights[0] + ... + weights[i])."""
    base = int(cum[lo - 1]) if lo else 0
    total = int(cum[hi - 1]) - base
    cuts = [lo]
    for k in range(1, parts):
        c = int(np.searchsorted(cum[lo:hi], base + total * k // parts, side="left")) + lo + 1
        if cuts[-1] < c < hi:
            cuts.append(c)
    cuts.append(hi)
    return list(zip(cuts[:-1], cuts[1:], strict=False))


def thread_ranges(workers: int, total: int, words: int | None = None) -> list[tuple[int, int]]:
    """The [lo, hi) ranges of [0, total) that ``run_split`` hands out: one per thread, or one
    range (the calling thread) when the ``words`` of work (default ``total``) are too few."""
    work = total if words is None else words
    if workers <= 1 or work < PARALLEL_MIN_WORDS:
        return [(0, total)] if total > 0 else []
    return split_range(total, workers)


def task_ranges(
    workers: int, total: int, per_thread: int, words: int | None = None
) -> list[tuple[int, int]]:
    """As ``thread_ranges``, with ``per_thread`` ranges per thread (for ``run_tasks``, which
    evens uneven ranges out): [(0, total)] when one thread or too few ``words`` (default
    ``total``); [] when ``total`` is 0."""
    ranges = thread_ranges(workers, total, words)
    if len(ranges) <= 1:
        return ranges
    return split_range(total, workers * max(1, per_thread))


def run_ranges(
    workers: int, ranges: list[tuple[int, int]], fn: Callable[[int, int, int], None]
) -> None:
    """Call ``fn(k, lo, hi)`` for the k-th of ``ranges``, each on a thread of its own (the first
    in the calling thread): for work that writes per-range results (counts, then offsets)."""
    if len(ranges) <= 1:
        for k, (lo, hi) in enumerate(ranges):
            fn(k, lo, hi)
        return
    pool = thread_pool(workers)
    futures = [pool.submit(fn, k, lo, hi) for k, (lo, hi) in enumerate(ranges) if k]
    try:
        fn(0, *ranges[0])
    finally:
        for fut in futures:
            fut.result()


def run_tasks(workers: int, count: int, fn: Callable[[int], T]) -> list[T]:
    """``[fn(0), ..., fn(count - 1)]``, the calls taken in order by ``workers`` threads (the
    calling thread one of them) as each becomes free: uneven tasks even out, and the pool gets
    one hand-off per thread, not one per task."""
    if workers <= 1 or count <= 1:
        return [fn(i) for i in range(count)]
    out: list[T | None] = [None] * count
    order = itertools.count()
    lock = threading.Lock()
    failed = threading.Event()  # a task raised: the others take no more

    def take() -> None:
        while not failed.is_set():
            with lock:
                i = next(order)
            if i >= count:
                return
            try:
                out[i] = fn(i)
            except BaseException:
                failed.set()
                raise

    pool = thread_pool(workers)
    futures = [pool.submit(take) for _ in range(min(workers, count) - 1)]
    try:
        take()
    finally:
        for fut in futures:
            fut.result()
    return out  # type: ignore[return-value]


def run_split(
    workers: int,
    total: int,
    fn: Callable[[int, int], None],
    *,
    words: int | None = None,
    align: int = 1,
) -> None:
    """Call ``fn(lo, hi)`` on ranges of [0, total), one per thread (in this thread when
    ``workers`` <= 1 or the ``words`` of work, default ``total``, are too few to be worth it)."""
    work = total if words is None else words
    if workers <= 1 or work < PARALLEL_MIN_WORDS:
        if total > 0:
            fn(0, total)
        return
    pieces = split_range(total, workers, align)
    if len(pieces) <= 1:
        for lo, hi in pieces:
            fn(lo, hi)
        return
    pool = thread_pool(workers)
    futures = [pool.submit(fn, lo, hi) for lo, hi in pieces[1:]]
    try:
        fn(*pieces[0])  # the calling thread takes the first piece
    finally:
        for fut in futures:
            fut.result()
