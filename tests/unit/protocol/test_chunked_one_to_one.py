"""The chunked, compiled greedy one-to-one keeps exactly what the plain loop keeps on all rows."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.classify import ChunkedOneToOne, greedy_keep


@pytest.mark.parametrize("parties", [2, 3, 5])
@pytest.mark.parametrize("seed", range(5))
def test_chunks_keep_what_the_plain_loop_keeps(parties: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    # few records per party (many conflicts), extreme pseudonyms, the same value in several columns
    pool = np.array([1, 2, 3, 2**63, 2**64 - 1, 12345, 99], dtype=np.uint64)
    m = int(rng.integers(1, 300))
    rows = pool[rng.integers(0, pool.size, size=(m, parties))]
    used: list[set[int]] = [set() for _ in range(parties)]
    expected = greedy_keep(rows.tolist(), used)
    known = [np.unique(rows[:, j]) for j in range(parties)]
    greedy = ChunkedOneToOne(known)
    cuts = np.sort(rng.integers(0, m + 1, size=int(rng.integers(0, 5))))
    got: list[int] = []
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), m], strict=True):
        got += (greedy.keep(rows[lo:hi]) + lo).tolist()
    assert got == expected


def test_unknown_pseudonym_is_refused() -> None:
    greedy = ChunkedOneToOne([np.array([5, 9], dtype=np.uint64), np.array([7], dtype=np.uint64)])
    with pytest.raises(ValueError, match="party 1"):
        greedy.keep(np.array([[5, 8]], dtype=np.uint64))
    assert greedy.keep(np.zeros((0, 2), dtype=np.uint64)).size == 0
    assert greedy.keep(np.array([[9, 7], [5, 7]], dtype=np.uint64)).tolist() == [0]
