"""sort_rows (a sort by column 0, then compiled tie runs) is np.lexsort of the key columns;
argsort_stable is numpy's stable argsort."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.ring import LONG_RUN_RECURSE, argsort_stable, sort_rows


@pytest.mark.parametrize("width", [1, 2, 3, 5])
@pytest.mark.parametrize("seed", range(6))
def test_equals_lexsort_with_ties_long_runs_and_extremes(width: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 3000))
    # few values (long runs of equal column 0, full duplicates), 0 and 2^64 - 1 among them
    pool = np.array([0, 1, 2, 7, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)
    rows = pool[rng.integers(0, pool.size if seed % 2 else 3, size=(m, width))]
    for k in range(1, width + 1):
        expected = np.lexsort(rows[:, :k].T[::-1]) if m else np.zeros(0, dtype=np.int64)
        assert sort_rows(rows, k).tolist() == expected.tolist()  # the same stable permutation


def test_short_runs_of_random_rows() -> None:
    rng = np.random.default_rng(9)
    rows = rng.integers(0, 2**64, size=(5000, 3), dtype=np.uint64)
    rows[::7, 0] = rows[0, 0]  # one long run, the rest mostly distinct
    assert sort_rows(rows).tolist() == np.lexsort(rows.T[::-1]).tolist()


@pytest.mark.parametrize("seed", range(4))
def test_argsort_stable_equals_numpys_stable_argsort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cases = [
        rng.integers(0, 2**64, size=20000, dtype=np.uint64),  # random: high bits rarely tie
        rng.integers(0, 50, size=20000).astype(np.uint64),  # small values: one span
        np.array([0, 2**64 - 1, 5, 0, 2**64 - 1, 2**63], dtype=np.uint64),  # extremes
        np.full(3000, 7, dtype=np.uint64),  # all equal
        np.zeros(1, dtype=np.uint64),
    ]
    skewed = rng.integers(0, 2**64, size=20000, dtype=np.uint64)
    skewed[:15000] = rng.integers(0, 1000, size=15000).astype(np.uint64)  # long high-bit runs
    cases.append(skewed[rng.permutation(skewed.size)])
    for values in cases:
        assert argsort_stable(values).tolist() == np.argsort(values, kind="stable").tolist()


def test_a_long_run_of_equal_first_columns_sorts_as_rows_of_its_own() -> None:
    rng = np.random.default_rng(3)
    rows = rng.integers(0, 2**64, size=(2 * LONG_RUN_RECURSE + 500, 3), dtype=np.uint64)
    rows[::2, 0] = 0  # like target any's rows of parties (1, 2): 0 in column 0
    rows[::6, 1] = rows[3, 1]  # ties in column 1 within that run too
    assert sort_rows(rows).tolist() == np.lexsort(rows.T[::-1]).tolist()
