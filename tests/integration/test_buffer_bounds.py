"""A co-party cannot make a node buffer more than its budget: a stream whose first chunk declares
more than the node can hold is refused at that chunk (RESOURCE_EXHAUSTED), before the sender has
sent anything else, and the node keeps serving."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

from party.node.keyconfirm import peer_confirmation
from party.synthetic.cluster import Cluster
from proto import common_pb2, linkage, party_pb2
from proto.party_pb2_grpc import PartyStub
from tests.integration.conftest import parameters

Code = grpc.StatusCode


async def _first_then_stall(method, first):  # type: ignore[no-untyped-def]
    """Send ``first``, then keep the stream open without sending more: a receiver that waits for
    the declared rows before checking them never answers (the call hits its deadline)."""
    stalled = asyncio.Event()

    async def gen():  # type: ignore[no-untyped-def]
        yield first
        await stalled.wait()

    try:
        await method(gen(), timeout=8.0)
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return Code.OK, ""


@pytest.mark.parametrize("rpc", ["PushBlocks", "PushShare", "PassRing", "DeliverResults"])
async def test_huge_declared_streams_are_refused_at_the_first_chunk(
    cluster3: Cluster, rpc: str
) -> None:
    msg = linkage.load_parameters(parameters(cluster3, name="p-bounds.json"))
    digest = linkage.parameters_digest(msg)
    run_id = uuid.uuid4().hex
    directory = [
        common_pb2.PartyAddress(name=n, address=cluster3.nodes[n].address) for n in cluster3.parties
    ]
    ref = common_pb2.RunRef(run_id=run_id, parameters_digest=digest)
    b = cluster3.nodes["party-b"].address
    coord = cluster3.security("coordinator").channel(b, "party-b", ["pprl.v1.Party"])
    as_a = cluster3.security("party-a").channel(b, "party-b", ["pprl.v1.Party"])
    try:
        as_coord = PartyStub(coord)
        await as_coord.Propose(
            party_pb2.ProposeRequest(
                run_id=run_id, parameters=msg, parameters_digest=digest, directory=directory
            ),
            timeout=10,
        )
        await as_coord.Prepare(party_pb2.PrepareRequest(run=ref), timeout=30)
        rows = 2**31 - 1  # within the wire's row limit: only the byte budget can refuse it
        first = {
            "PushBlocks": party_pb2.PushBlocksRequest(
                run=ref,
                source=0,
                total=rows,
                digests=b"\1" + b"\0" * 7,
                key_confirmation=peer_confirmation(
                    cluster3.secret, run_id, digest, "party-a", "party-b"
                ),
            ),
            "PushShare": party_pb2.PushShareRequest(
                run=ref, source=0, target=1, segment_bits=340, total_rows=rows, block_columns=1
            ),
            "PassRing": party_pb2.PassRingRequest(
                run=ref, source=0, hop=0, total_rows=rows, parties=3
            ),
            "DeliverResults": party_pb2.DeliverResultsRequest(
                run=ref, source=0, target=1, total_rows=rows
            ),
        }[rpc]
        code, text = await _first_then_stall(getattr(PartyStub(as_a), rpc), first)
        assert code in (Code.RESOURCE_EXHAUSTED, Code.INVALID_ARGUMENT), (code, text)
        assert str(rows) in text.replace(",", "")
        await as_coord.Abort(party_pb2.AbortRequest(run_id=run_id, reason="test"), timeout=10)
    finally:
        await coord.close()
        await as_a.close()
    assert await cluster3.health("party-b") == "SERVING"
