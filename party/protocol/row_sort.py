"""Sorted distinct rows on the kernel threads: rows cut into key ranges, each range sorted alone.

``sort_unique_rows(rows, k, workers)`` returns what ``spill``'s serial sort returns: the rows
sorted lexicographically by their first k columns, one row per key, the first of the input's rows
with that key. Splitters (keys at evenly spaced quantiles of an evenly spaced sample of the rows)
cut the key space into ``workers`` ranges; the rows are counted and copied into their ranges on the
threads (each thread a contiguous slice of the input; within a range the input order is kept),
each range is sorted stably and its first row per key kept on a thread of its own, and the ranges
are written one after the other. Equal keys fall in one range, and the stable sort puts them in
input order, so the result does not depend on ``workers`` (tests/unit/protocol/test_row_sort.py).
"""

from __future__ import annotations

import numpy as np

from party.protocol._numba_blocks import (
    first_keys_in_order,
    gather_rows,
    key_range_counts,
    key_range_fill,
)
from party.protocol.ring import sort_rows
from party.protocol.threads import run_ranges, run_split, thread_ranges

#: Below this many rows a sort stays on the calling thread.
PARALLEL_MIN_ROWS = 1 << 15

#: Sample rows per key range from which the splitters are chosen.
SAMPLE_PER_RANGE = 1024


def splitters_of(rows: np.ndarray, key_columns: int, ranges: int) -> np.ndarray:
    """(ranges - 1, key_columns) uint64 keys at evenly spaced quantiles of a sample of the rows
    (evenly spaced too), sorted."""
    m = rows.shape[0]
    picks = np.unique(np.linspace(0, m - 1, min(m, SAMPLE_PER_RANGE * ranges)).astype(np.int64))
    sample = np.ascontiguousarray(rows[picks, :key_columns])
    sample = sample[sort_rows(sample, key_columns)]
    at = [sample.shape[0] * q // ranges for q in range(1, ranges)]
    return np.ascontiguousarray(sample[at])


def sort_unique_rows(rows: np.ndarray, key_columns: int, workers: int) -> np.ndarray:
    """(module docstring) ``rows``: (m, w) uint64, C-contiguous; ``workers`` threads (ranges)."""
    m, width = rows.shape
    ranges = max(1, workers)
    splitters = splitters_of(rows, key_columns, ranges)
    slices = thread_ranges(workers, m)
    counts = np.zeros((len(slices), ranges), dtype=np.int64)

    def count(s: int, lo: int, hi: int) -> None:
        key_range_counts(rows, splitters, key_columns, lo, hi, counts[s])

    run_ranges(workers, slices, count)
    per_range = counts.sum(axis=0)
    starts = np.concatenate([[0], np.cumsum(per_range)])
    # slice s's rows of range r go after those of slices 0..s-1
    at = starts[:-1] + np.cumsum(counts, axis=0) - counts
    parted = np.empty_like(rows)

    def fill(s: int, lo: int, hi: int) -> None:
        key_range_fill(rows, splitters, key_columns, lo, hi, at[s], parted)

    run_ranges(workers, slices, fill)
    orders: list[np.ndarray] = [np.zeros(0, np.int64)] * ranges
    firsts: list[np.ndarray] = [np.zeros(0, np.int64)] * ranges

    def sort(lo: int, hi: int) -> None:
        for r in range(lo, hi):
            part = parted[starts[r] : starts[r + 1]]
            orders[r] = sort_rows(part, key_columns)
            firsts[r] = first_keys_in_order(part, orders[r], key_columns)

    run_split(workers, ranges, sort, words=m)
    kept = np.concatenate([[0], np.cumsum([f.size for f in firsts])])
    out = np.empty((int(kept[-1]), width), dtype=np.uint64)

    def gather(lo: int, hi: int) -> None:
        for r in range(lo, hi):
            part = parted[starts[r] : starts[r + 1]]
            gather_rows(part, orders[r], firsts[r], out[kept[r] : kept[r + 1]])

    run_split(workers, ranges, gather, words=m)
    return out
