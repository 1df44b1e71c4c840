"""sort_unique_rows on 1-3 kernel threads equals a plain-Python sort keeping each key's first row,
and a sorted store on threads equals the one-thread store."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from party.protocol.row_sort import PARALLEL_MIN_ROWS, sort_unique_rows
from party.protocol.spill import LocalGauge, RowStore, SpillFolder


def _first_row_per_key_sorted(rows: np.ndarray, k: int) -> list[list[int]]:
    first: dict[tuple[int, ...], list[int]] = {}
    for r in rows.tolist():
        first.setdefault(tuple(r[:k]), r)
    return [first[key] for key in sorted(first)]


def _rows(kind: str, m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "pairs":  # target any's ring rows: two pseudonyms, zeros elsewhere, c last
        rows = np.zeros((m, 4), dtype=np.uint64)
        which = rng.integers(0, 3, size=m)
        for q, (a, b) in enumerate([(0, 1), (0, 2), (1, 2)]):
            at = which == q
            rows[at, a] = rng.integers(1, 500, size=int(at.sum()), dtype=np.uint64)
            rows[at, b] = rng.integers(1, 2**64 - 1, size=int(at.sum()), dtype=np.uint64)
        rows[:, 3] = rng.integers(0, 1000, size=m, dtype=np.uint64)  # payload: not in the key
        return rows
    if kind == "few values":  # long ties, repeated keys with different payloads, extremes
        pool = np.array([0, 1, 7, 2**63, 2**64 - 1], dtype=np.uint64)
        rows = pool[rng.integers(0, pool.size, size=(m, 3))]
        rows[:, 2] = np.arange(m, dtype=np.uint64)  # the first row of a key is the one kept
        return rows
    if kind == "one key":  # every row in one key range
        rows = np.full((m, 3), 5, dtype=np.uint64)
        rows[:, 2] = np.arange(m, dtype=np.uint64)
        return rows
    return rng.integers(0, 2**64 - 1, size=(m, 3), dtype=np.uint64)  # "random": distinct keys


@pytest.mark.parametrize("kind", ["pairs", "few values", "one key", "random"])
def test_equals_a_plain_sort_keeping_the_first_row_of_each_key(kind: str) -> None:
    k = 3 if kind == "pairs" else 2
    rows = _rows(kind, PARALLEL_MIN_ROWS + 1234, seed=len(kind))
    expected = _first_row_per_key_sorted(rows, k)
    for workers in (1, 2, 3):
        got = sort_unique_rows(rows, k, workers)
        assert got.dtype == np.uint64 and got.flags.c_contiguous
        assert got.tolist() == expected, workers


@pytest.mark.parametrize("rows_count", [0, 1, 5, PARALLEL_MIN_ROWS - 1, PARALLEL_MIN_ROWS])
def test_a_sorted_store_on_threads_equals_one_thread(
    tmp_path: pathlib.Path, rows_count: int
) -> None:
    rows = _rows("pairs", rows_count, seed=rows_count)
    rows = np.concatenate([rows, rows[: rows_count // 3]])  # repeated keys across appends
    got = {}
    for workers in (1, 2):
        folder = SpillFolder(tmp_path / str(workers))
        store = RowStore(4, gauge=LocalGauge(10**9), folder=folder, key_columns=3, workers=workers)
        for a in range(0, rows.shape[0], 4099):
            store.append(rows[a : a + 4099])
        parts = list(store.finish().chunks(1000))
        got[workers] = np.concatenate(parts) if parts else np.zeros((0, 4), np.uint64)
        folder.close()
    assert got[1].tolist() == got[2].tolist() == _first_row_per_key_sorted(rows, 3)
