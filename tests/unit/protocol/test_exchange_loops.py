"""The exchange's compiled loops against plain definitions: the blocks at two or more of three
parties, the intersection of two, and the segments of the shares (``slice_bits`` of each row)."""

from __future__ import annotations

import numpy as np
import pytest

from party.encoding.bits import slice_bits
from party.protocol import threads as threads_module
from party.protocol._numba_blocks import in_two_of_three, in_two_or_more, intersect_sorted
from party.protocol._numba_segments import cut_segments
from party.protocol.engine import PartyEngine
from party.protocol.params import ProtocolParameters
from tests.unit.protocol.helpers import plain_two_or_more, random_table

_TOP = 2**64 - 1


@pytest.mark.parametrize("through_first", [0, 1, 2])
@pytest.mark.parametrize("seed", range(3))
def test_two_of_three_equals_a_plain_count(through_first: int, seed: int) -> None:
    """Each array in turn runs out first (its values end lowest), the other two then meet in
    their common tail; values in all three, in two, in one; 0 and 2^64 - 1 among them."""
    rng = np.random.default_rng(seed)
    arrays = [np.unique(rng.integers(0, 3000, size=1500, dtype=np.uint64)) for _ in range(3)]
    for j in range(3):
        if j != through_first:
            tail = np.array([5000, 5001 + j, 6000, _TOP], dtype=np.uint64)
            arrays[j] = np.unique(np.concatenate([arrays[j], tail]))
    arrays[seed % 3] = np.unique(np.concatenate([arrays[seed % 3], np.zeros(1, np.uint64)]))
    want = plain_two_or_more(arrays)
    got = in_two_of_three(*arrays)
    assert got.dtype == np.uint64 and got.tolist() == want
    assert in_two_or_more(arrays).tolist() == want  # P = 3 takes this loop


def test_two_of_three_with_empty_and_equal_arrays() -> None:
    empty = np.zeros(0, dtype=np.uint64)
    a = np.array([1, 5, _TOP], dtype=np.uint64)
    b = np.array([5, 7], dtype=np.uint64)
    assert in_two_of_three(empty, empty, empty).tolist() == []
    assert in_two_of_three(a, empty, empty).tolist() == []
    assert in_two_of_three(a, empty, b).tolist() == [5]
    assert in_two_of_three(empty, a, a).tolist() == a.tolist()
    assert in_two_of_three(a, a, a).tolist() == a.tolist()
    assert in_two_of_three(a[:1], b, a).tolist() == [1, 5]  # 2^64 - 1 only in the third


@pytest.mark.parametrize("seed", range(4))
def test_intersect_sorted_equals_a_plain_intersection(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = np.unique(rng.integers(0, 400, size=int(rng.integers(0, 300)), dtype=np.uint64))
    b = np.unique(rng.integers(0, 400, size=int(rng.integers(0, 300)), dtype=np.uint64))
    if seed == 1:
        a, b = np.append(a, np.uint64(_TOP)), np.append(b, np.uint64(_TOP))
    want = sorted(set(a.tolist()) & set(b.tolist()))
    assert intersect_sorted(a, b).tolist() == want
    assert intersect_sorted(b, a).tolist() == want
    assert intersect_sorted(a, a).tolist() == a.tolist()


@pytest.mark.parametrize(
    ("filter_bits", "segment_bits"), [(1026, 342), (192, 64), (100, 50), (7, 7)]
)
def test_cut_segments_equals_slice_bits(filter_bits: int, segment_bits: int) -> None:
    """Segments starting on and off a word boundary, the last one ending past the filter's bits
    (its words beyond read as 0), rows in any order and repeated; each equals ``slice_bits``."""
    rng = np.random.default_rng(filter_bits)
    words = -(-filter_bits // 64)
    filters = rng.integers(0, 2**64 - 1, size=(40, words), dtype=np.uint64, endpoint=True)
    rows = rng.integers(0, 40, size=60).astype(np.int64)
    starts = np.arange(0, filter_bits, segment_bits, dtype=np.int64)[::-1].copy()
    out = np.empty((starts.size, rows.size, -(-segment_bits // 64)), dtype=np.uint64)
    cut_segments(filters, rows, starts, segment_bits, out, 0, 25)
    cut_segments(filters, rows, starts, segment_bits, out, 25, rows.size)
    for t, a in enumerate(starts.tolist()):
        assert np.array_equal(out[t], slice_bits(filters[rows], a, a + segment_bits))
    none = np.empty((starts.size, 0, out.shape[2]), dtype=np.uint64)
    cut_segments(filters, rows[:0], starts, segment_bits, none, 0, 0)


@pytest.mark.parametrize("workers", [1, 2])
def test_outgoing_shares_carry_slice_bits_of_the_shared_rows(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every share's segments are ``slice_bits`` of the shared rows' filters, on one and on two
    threads (small ranges split across the threads)."""
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORDS", 1)
    params = ProtocolParameters(
        parties=("a", "b", "c"),
        filter_bits=150,
        match_threshold=0.8,
        segment_threshold=0.7,
        target="all",
    )
    tables = [random_table(np.random.default_rng(j), 300, 150, blocks=5) for j in range(3)]
    engines = [PartyEngine(i, params, t, workers=workers) for i, t in enumerate(tables)]
    common = engines[0].common_of([e.block_digests() for e in engines])
    for e in engines:
        e.use_common_blocks(common)
    for e, table in zip(engines, tables, strict=True):
        rows = table.filters[e._shared_rows]
        shares = e.outgoing_shares()
        assert [s.target for s in shares] == [j for j in range(3) if j != e.index]
        for s in shares:
            a = s.target * 50
            assert s.segments.flags.c_contiguous
            assert np.array_equal(s.segments, slice_bits(rows, a, a + 50))
        e.close()


@pytest.mark.parametrize("case", ["random", "all zero", "no zero", "empty", "one row"])
def test_distinct_digests_equal_a_plain_set(case: str) -> None:
    """Zeros (never a block), repeats within and across rows, 2^64 - 1; empty and one-row tables."""
    from party.protocol.blocks import distinct_digests

    rng = np.random.default_rng(3)
    digests = rng.integers(0, 50, size=(200, 4), dtype=np.uint64)
    digests[7, 2] = _TOP
    if case == "all zero":
        digests[:] = 0
    elif case == "no zero":
        digests += np.uint64(1)
    elif case == "empty":
        digests = digests[:0]
    elif case == "one row":
        digests = np.array([[5, 0, 5, 3]], dtype=np.uint64)
    want = sorted({int(d) for d in digests.ravel().tolist() if d})
    got = distinct_digests(digests)
    assert got.dtype == np.uint64 and got.ndim == 1 and got.tolist() == want
    got[:] = 0  # a new array: the table's digests are not touched
    assert case in ("all zero", "empty") or digests.any()
