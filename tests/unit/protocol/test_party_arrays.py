"""The loops over one array per party: one compiled variant serves every party count, with results
equal to plain definitions (``party.protocol._numba_party_arrays``)."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.kernel import HAVE_NUMBA, StageCounts, compare_block_batch, plan_blocks
from tests.unit.protocol.helpers import plain_two_or_more

pytestmark = pytest.mark.skipif(not HAVE_NUMBA, reason="the compiled loops need numba")

_TOP = np.uint64(2**64 - 1)


@pytest.mark.parametrize("parties", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("seed", range(4))
def test_in_two_or_more_equals_a_plain_count(parties: int, seed: int) -> None:
    """Empty arrays, values at every array (ties), 0 and the largest uint64 among them."""
    from party.protocol._numba_blocks import in_two_or_more

    rng = np.random.default_rng(seed * 10 + parties)
    arrays = []
    for j in range(parties):
        a = rng.integers(0, 40, size=int(rng.integers(0, 30)), dtype=np.uint64)
        if seed == 1:
            a = np.append(a, [np.uint64(0), _TOP, np.uint64(7)])  # in every array
        if seed == 2 and j % 2:
            a = a[:0]  # every other party without values
        arrays.append(np.unique(a))
    got = in_two_or_more(arrays)
    assert got.dtype == np.uint64 and got.tolist() == plain_two_or_more(arrays)


def test_in_two_or_more_of_nothing_and_of_one_array() -> None:
    from party.protocol._numba_blocks import in_two_or_more

    empty = np.zeros(0, dtype=np.uint64)
    assert in_two_or_more([empty, empty, empty]).tolist() == []
    assert in_two_or_more([np.arange(5, dtype=np.uint64)]).tolist() == []


def test_party_arrays_views_are_the_arrays_and_bad_shapes_are_refused() -> None:
    from party.protocol._numba_party_arrays import (
        PartyArrays,
        i64_values,
        u64_item,
        u64_rows,
        u64_values,
    )

    rows = [np.arange(12, dtype=np.uint64).reshape(4, 3), np.ones((0, 3), dtype=np.uint64)]
    wide = np.arange(20, dtype=np.uint64).reshape(5, 4)
    rows.append(wide[:, :3])  # not contiguous: copied
    held = PartyArrays(rows, np.uint64, width=3)
    assert held.rows.tolist() == [4, 0, 5]
    for j, a in enumerate(rows):
        assert np.array_equal(u64_rows(held.at, held.rows, j, 3), a)
    values = PartyArrays([np.arange(3) * 5, np.array([2**64 - 1], dtype=np.uint64)], np.uint64)
    assert u64_values(values.at, values.rows, 0).tolist() == [0, 5, 10]
    assert u64_item(values.at, 1, 0) == 2**64 - 1
    ints = PartyArrays([np.array([-3, 4])], np.int64)
    assert i64_values(ints.at, ints.rows, 0).tolist() == [-3, 4]
    with pytest.raises(ValueError, match="party 1's array must be 2-D with 3 columns"):
        PartyArrays([rows[0], wide], np.uint64, width=3)
    with pytest.raises(ValueError, match="party 0's array must be 1-D"):
        PartyArrays([wide], np.uint64)


def _segs(rng: np.random.Generator, n: list[int], words: int) -> list[np.ndarray]:
    return [rng.integers(0, 2**63, size=(k, words), dtype=np.uint64) for k in n]


@pytest.mark.parametrize("parties", [2, 3, 5, 6])
@pytest.mark.parametrize("workers", [1, 2])
def test_block_batches_of_any_party_count_equal_the_numpy_kernel(
    parties: int, workers: int
) -> None:
    """The compiled many-blocks loop and its block plan against the numpy kernel, P = 2 to 6:
    the same sets, c, order and stage counts; one compiled variant of each loop for all P."""
    from party.protocol import _numba_blocks, _numba_kernel

    rng = np.random.default_rng(parties * 3 + workers)
    n = [int(rng.integers(20, 40)) for _ in range(parties)]
    segs = _segs(rng, n, 2)
    pops = [np.bitwise_count(s).sum(axis=1).astype(np.int64) for s in segs]
    nb = 60
    sizes = rng.integers(0, 4, size=(parties, nb)).astype(np.int64)
    rows_of = [
        np.concatenate([rng.choice(n[j], size=int(k), replace=False) for k in sizes[j]]).astype(
            np.int64
        )
        for j in range(parties)
    ]
    starts = np.zeros((parties, nb + 1), dtype=np.int64)
    starts[:, 1:] = np.cumsum(sizes, axis=1)
    plan = plan_blocks(list(starts), None, 10**9, workers)
    assert np.array_equal(plan.sizes, sizes) and np.array_equal(plan.first, starts[:, :-1])
    assert np.array_equal(plan.fast_sizes > 0, np.broadcast_to(sizes.min(axis=0) > 0, sizes.shape))
    for threshold in (0.0, 0.5):
        got_counts, want_counts = StageCounts.zeros(parties), StageCounts.zeros(parties)
        args = (segs, pops, rows_of, plan.first, plan.fast_sizes, 128, threshold)
        got = compare_block_batch(*args, counts=got_counts, workers=workers, distinct=True)
        want = compare_block_batch(*args, counts=want_counts, kernel="numpy", distinct=True)
        assert got[0].shape[0] > 0 or threshold > 0
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        assert got_counts == want_counts
    for loop in (_numba_kernel.batch_blocks, _numba_kernel.plan_blocks):
        assert len(loop.signatures) == 1, loop
    assert len(_numba_blocks.values_in_two_or_more.signatures) <= 1
