"""The compiled greedy one-to-one keeps exactly the rows the plain loop (greedy_keep) keeps."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.classify import greedy_keep, greedy_one_to_one


def plain(candidates: np.ndarray, similarity: np.ndarray) -> np.ndarray:
    order = np.lexsort((*candidates.T[::-1], -similarity))
    used: list[set[int]] = [set() for _ in range(candidates.shape[1])]
    kept = greedy_keep(candidates[order].tolist(), used)
    return np.sort(order[np.array(kept, dtype=np.int64)])


@pytest.mark.parametrize("parties", [2, 3, 5])
@pytest.mark.parametrize("seed", range(6))
def test_equals_plain_loop_with_ties_and_shared_records(parties, seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(1, 400))
    # few distinct records per column (many conflicts), the same value in several columns,
    # extreme pseudonyms, and few distinct similarities (many ties)
    pool = np.array([0, 1, 2, 3, 2**63, 2**64 - 1, 12345], dtype=np.uint64)
    cand = pool[rng.integers(0, pool.size, size=(m, parties))]
    sims = rng.choice(np.array([0.8, 0.9, 1.0]), size=m)
    got = greedy_one_to_one(cand, sims)
    assert np.array_equal(got, plain(cand, sims))


def test_one_row_and_no_rows():
    one = np.array([[5, 7]], dtype=np.uint64)
    assert greedy_one_to_one(one, np.array([0.9])).tolist() == [0]
    assert greedy_one_to_one(np.zeros((0, 3), dtype=np.uint64), np.zeros(0)).size == 0
