"""sort_rows (a sort by column 0, then compiled tie runs) is np.lexsort of the key columns."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.ring import sort_rows


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
