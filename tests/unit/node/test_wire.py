"""party/node/wire.py: chunked encoding round-trips and rejects malformed chunks."""

from __future__ import annotations

import numpy as np
import pytest

from party.node import wire
from party.node.errors import Malformed
from party.protocol.ring import RingMessage
from party.protocol.segments import SegmentShare
from proto import common_pb2, party_pb2

REF = common_pb2.RunRef(run_id="ab" * 16, parameters_digest="cd" * 32)


async def _aiter(items):  # type: ignore[no-untyped-def]
    for item in items:
        yield item


async def _decode(fn, chunks):  # type: ignore[no-untyped-def]
    it = _aiter(chunks[1:])
    return await fn(chunks[0], it)


def _rng() -> np.random.Generator:
    return np.random.default_rng(3)


@pytest.mark.parametrize("n", [0, 1, 5000, 20000])
async def test_share_round_trip_in_bounded_chunks(n: int) -> None:
    rng = _rng()
    seg_bits = 341
    share = SegmentShare(
        source=1,
        target=2,
        segment_bits=seg_bits,
        pseudonyms=rng.integers(1, 2**63, n, dtype=np.uint64),
        block_positions=rng.integers(-1, 2**31 - 1, (n, 2), dtype=np.int32),
        segments=rng.integers(0, 2**63, (n, 6), dtype=np.uint64),
    )
    chunks = list(wire.share_to_chunks(REF, share))
    assert all(c.ByteSize() < 1.1 * 2**20 for c in chunks)
    # a row: pseudonym and 6 segment words (8 bytes each), 2 positions (4 bytes each)
    assert len(chunks) == max(1, -(-n // (2**20 // (8 * 7 + 4 * 2))))
    if n:  # little-endian int32 on the wire, -1 included
        assert chunks[0].block_positions[:8] == share.block_positions[0].astype("<i4").tobytes()
    back = await _decode(wire.share_from_chunks, chunks)
    assert (back.source, back.target, back.segment_bits) == (1, 2, seg_bits)
    np.testing.assert_array_equal(back.pseudonyms, share.pseudonyms)
    assert back.block_positions.dtype == np.int32
    np.testing.assert_array_equal(back.block_positions, share.block_positions)
    np.testing.assert_array_equal(back.segments, share.segments)


async def test_ring_blocks_and_results_round_trip() -> None:
    rng = _rng()
    m = 70000
    msg = RingMessage(
        hop=1,
        candidates=rng.integers(0, 2**64 - 1, (m, 3), dtype=np.uint64),
        c_masked=rng.integers(0, 2**64 - 1, m, dtype=np.uint64),
        x_masked=rng.integers(0, 2**64 - 1, m, dtype=np.uint64),
    )
    back = await _decode(wire.ring_from_chunks, list(wire.ring_to_chunks(REF, 1, msg)))
    assert back.hop == 1
    for f in ("candidates", "c_masked", "x_masked"):
        np.testing.assert_array_equal(getattr(back, f), getattr(msg, f))
    digests = np.unique(rng.integers(1, 2**64 - 1, 300000, dtype=np.uint64))
    got = await _decode(wire.blocks_from_chunks, list(wire.blocks_to_chunks(REF, 0, digests)))
    np.testing.assert_array_equal(got, digests)
    lids = np.arange(10, dtype=np.uint64)
    sims = rng.random(10)
    ps = rng.integers(1, 2**63, 10, dtype=np.uint64)
    chunks = list(wire.results_to_chunks(REF, 0, 2, lids, sims, ps))
    l2, s2, p2 = await _decode(wire.results_from_chunks, chunks)
    np.testing.assert_array_equal(l2, lids)
    np.testing.assert_array_equal(s2, sims)  # float64 bit-exact
    np.testing.assert_array_equal(p2, ps)


async def test_malformed_chunks_are_rejected_with_the_field_name() -> None:
    share = party_pb2.PushShareRequest(
        run=REF,
        source=0,
        target=1,
        segment_bits=64,
        total_rows=1,
        block_columns=1,
        rows=1,
        pseudonyms=b"\0" * 8,
        block_positions=b"\0" * 4,
        segments=b"\0" * 9,
    )
    with pytest.raises(Malformed, match="segments has 9 bytes, expected 8"):
        await _decode(wire.share_from_chunks, [share])
    wide = party_pb2.PushShareRequest()
    wide.CopyFrom(share)
    wide.segments = b"\0" * 8
    wide.block_positions = b"\0" * 8  # 8-byte digests: the field holds 4-byte positions
    with pytest.raises(Malformed, match="block_positions has 8 bytes, expected 4"):
        await _decode(wire.share_from_chunks, [wide])
    fewer = party_pb2.PushShareRequest()
    fewer.CopyFrom(share)
    fewer.segments = b"\0" * 8
    fewer.total_rows = 2
    with pytest.raises(Malformed, match="got 1 rows, declared 2"):
        await _decode(wire.share_from_chunks, [fewer])
    other = party_pb2.PushShareRequest()
    other.CopyFrom(fewer)
    other.source = 2
    with pytest.raises(Malformed, match="header differs"):
        await _decode(wire.share_from_chunks, [fewer, other])
    more = party_pb2.PushShareRequest()
    more.CopyFrom(share)
    more.segments = b"\0" * 8
    with pytest.raises(Malformed, match="more rows than"):
        await _decode(wire.share_from_chunks, [more, more])
    ring = party_pb2.PassRingRequest(run=REF, source=0, hop=0, total_rows=0, parties=1)
    with pytest.raises(Malformed, match="parties must be between"):
        await _decode(wire.ring_from_chunks, [ring])
    huge = party_pb2.PushBlocksRequest(run=REF, source=0, total=2**40)
    with pytest.raises(Malformed, match="exceeds"):
        await _decode(wire.blocks_from_chunks, [huge])


async def test_decoded_arrays_own_their_memory() -> None:
    chunks = list(wire.blocks_to_chunks(REF, 0, np.array([5, 9], dtype=np.uint64)))
    got = await _decode(wire.blocks_from_chunks, chunks)
    got[0] = 1  # writable (not a view of the immutable message bytes)
    assert got.dtype == np.uint64


async def _collect(agen):  # type: ignore[no-untyped-def]
    return [item async for item in agen]


def _ring_msg(rng: np.random.Generator, m: int, hop: int = 1) -> RingMessage:
    return RingMessage(
        hop=hop,
        candidates=np.sort(rng.integers(0, 2**64 - 1, (m, 3), dtype=np.uint64), axis=0),
        c_masked=rng.integers(0, 2**64 - 1, m, dtype=np.uint64),
        x_masked=rng.integers(0, 2**64 - 1, m, dtype=np.uint64),
    )


@pytest.mark.parametrize("sizes", [[], [0], [3], [70000, 0, 5, 40000]])
async def test_a_ring_passed_on_as_it_comes_round_trips_below_its_bound(sizes: list[int]) -> None:
    rng = _rng()
    parts = [_ring_msg(rng, n) for n in sizes]
    bound = sum(sizes) + 7  # the incoming total: at least the rows passed on
    chunks = await _collect(wire.ring_piped_chunks(REF, 1, 1, bound, 3, _aiter(parts)))
    assert all(c.bounded and c.total_rows == bound for c in chunks)
    assert [c.last for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[-1].rows == 0 and all(c.rows > 0 for c in chunks[:-1])
    assert all(c.ByteSize() < 1.1 * 2**20 for c in chunks)
    back = await _decode(wire.ring_from_chunks, chunks)
    assert back.hop == 1 and len(back) == sum(sizes)
    for f in ("candidates", "c_masked", "x_masked"):
        want = [getattr(m, f) for m in parts]
        empty = np.zeros((0, 3) if f == "candidates" else 0, dtype=np.uint64)
        np.testing.assert_array_equal(getattr(back, f), np.concatenate([empty, *want]))
    got = await _collect(wire.ring_chunks(chunks[0], _aiter(chunks[1:]), max_rows=bound))
    assert len(got[-1]) == 0 and sum(len(g) for g in got) == sum(sizes)


async def test_a_bounded_ring_must_close_once_and_stay_within_its_bound() -> None:
    rng = _rng()
    parts = [_ring_msg(rng, 4), _ring_msg(rng, 3)]
    chunks = await _collect(wire.ring_piped_chunks(REF, 1, 1, 7, 3, _aiter(parts)))
    with pytest.raises(Malformed, match="ended before its closing chunk"):
        await _decode(wire.ring_from_chunks, chunks[:-1])
    with pytest.raises(Malformed, match="after the closing chunk"):
        await _decode(wire.ring_from_chunks, [*chunks, chunks[0]])
    with pytest.raises(Malformed, match="after the closing chunk"):
        await _decode(wire.ring_from_chunks, [*chunks, chunks[-1]])
    low = await _collect(wire.ring_piped_chunks(REF, 1, 1, 6, 3, _aiter(parts)))
    with pytest.raises(Malformed, match="more rows than the declared 6"):
        await _decode(wire.ring_from_chunks, low)
    with pytest.raises(Malformed, match="exceeds"):
        await wire.ring_from_chunks(chunks[0], _aiter(chunks[1:]), max_rows=6)
    unbounded = party_pb2.PassRingRequest()
    unbounded.CopyFrom(chunks[-1])
    unbounded.bounded = False
    with pytest.raises(Malformed, match="last set outside a bounded closing chunk"):
        await _decode(wire.ring_from_chunks, [unbounded])
    with_rows = party_pb2.PassRingRequest()
    with_rows.CopyFrom(chunks[0])
    with_rows.last = True
    with pytest.raises(Malformed, match="last set outside a bounded closing chunk"):
        await _decode(wire.ring_from_chunks, [with_rows])
    mixed = party_pb2.PassRingRequest()
    mixed.CopyFrom(chunks[1])
    mixed.bounded = False
    with pytest.raises(Malformed, match="header differs"):
        await _decode(wire.ring_from_chunks, [chunks[0], mixed, chunks[-1]])
    exact = list(wire.ring_to_chunks(REF, 1, parts[0]))
    exact[0].total_rows = 5  # an exact message still needs every declared row
    with pytest.raises(Malformed, match="got 4 rows, declared 5"):
        await _decode(wire.ring_from_chunks, exact)
