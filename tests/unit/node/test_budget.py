"""party/node/budget.py and the wire decoders' use of it: declared sizes are reserved before any
row is buffered, refused streams hold nothing, closed runs refuse and hold nothing."""

from __future__ import annotations

import numpy as np
import pytest

from party.node import wire
from party.node.budget import BufferBudget, BufferLimitExceeded, RunClosed
from party.node.errors import Malformed
from party.protocol.ring import RingMessage
from proto import common_pb2, party_pb2

REF = common_pb2.RunRef(run_id="ab" * 16, parameters_digest="cd" * 32)
RUN = REF.run_id


async def _aiter(items):  # type: ignore[no-untyped-def]
    for item in items:
        yield item


async def _never_more():  # type: ignore[no-untyped-def]
    raise AssertionError("the decoder read past a first chunk it should have refused")
    yield  # pragma: no cover


def test_budget_reserves_releases_and_closes() -> None:
    budget = BufferBudget(1000)
    acct = budget.account(RUN)
    acct.reserve(600, "x")
    assert budget.held(RUN) == 600 and budget.held_total() == 600
    with pytest.raises(BufferLimitExceeded, match="needs 500 bytes") as err:
        acct.reserve(500, "segment share")
    assert err.value.code.name == "RESOURCE_EXHAUSTED"
    assert not acct.try_reserve(401) and acct.try_reserve(400)
    acct.release(300)
    assert acct.held == 700
    budget.account("other").reserve(300, "y")
    assert budget.close_run(RUN) == 700
    assert budget.held(RUN) == 0 and budget.held_total() == 300
    with pytest.raises(RunClosed):
        acct.reserve(1, "late stream")
    acct.release(50)  # a late release of a closed run changes nothing
    assert budget.held_total() == 300


async def test_a_huge_declared_block_stream_is_refused_at_its_first_chunk() -> None:
    budget = BufferBudget(2**20)
    huge = party_pb2.PushBlocksRequest(run=REF, source=0, total=2**31, digests=b"\1" * 8)
    with pytest.raises(BufferLimitExceeded, match="block digests"):
        await wire.blocks_from_chunks(huge, _never_more(), account=budget.account(RUN))
    assert budget.held_total() == 0


async def test_declared_rows_beyond_what_the_run_can_contain_are_malformed() -> None:
    ring = party_pb2.PassRingRequest(run=REF, source=0, hop=0, total_rows=11, parties=3, rows=0)
    with pytest.raises(Malformed, match="exceeds what this run can contain"):
        await wire.ring_from_chunks(ring, _never_more(), max_rows=10)
    res = party_pb2.DeliverResultsRequest(run=REF, source=0, target=1, total_rows=11)
    with pytest.raises(Malformed, match="exceeds what this run can contain"):
        async for _ in wire.results_chunks(res, _never_more(), max_rows=10):
            pass


async def test_decoders_count_what_they_buffer_and_release_refused_streams() -> None:
    budget = BufferBudget(2**22)
    acct = budget.account(RUN)
    digests = np.arange(1, 1001, dtype=np.uint64)
    chunks = list(wire.blocks_to_chunks(REF, 0, digests))
    got = await wire.blocks_from_chunks(chunks[0], _aiter(chunks[1:]), account=acct)
    np.testing.assert_array_equal(got, digests)
    assert budget.held(RUN) == 8000
    torn = party_pb2.PushBlocksRequest(run=REF, source=0, total=2, digests=b"\1" * 8)
    with pytest.raises(Malformed, match="got 1 rows, declared 2"):
        await wire.blocks_from_chunks(torn, _aiter([]), account=acct)
    assert budget.held(RUN) == 8000  # the refused stream's reservation was given back
    m = 100_000
    msg = RingMessage(
        hop=0,
        candidates=np.arange(3 * m, dtype=np.uint64).reshape(m, 3),
        c_masked=np.zeros(m, dtype=np.uint64),
        x_masked=np.zeros(m, dtype=np.uint64),
    )
    chunks2 = list(wire.ring_to_chunks(REF, 0, msg))
    assert len(chunks2) > 2
    peak = 0
    async for part in wire.ring_chunks(chunks2[0], _aiter(chunks2[1:]), account=acct):
        peak = max(peak, budget.held(RUN) - 8000)
        assert budget.held(RUN) - 8000 == part.candidates.nbytes + 16 * len(part)
    assert 0 < peak <= 2**20 + 40 and budget.held(RUN) == 8000  # one chunk at a time
    whole = await wire.ring_from_chunks(chunks2[0], _aiter(chunks2[1:]), account=acct)
    assert budget.held(RUN) == 8000 + m * 8 * 5
    np.testing.assert_array_equal(whole.candidates, msg.candidates)
