"""A co-party cannot make a node buffer more than its budget or the run can contain: a stream
whose first chunk declares more is refused at that chunk, before the sender has sent anything
else, and the node keeps serving. Segments and digests are buffered whole, so their declared
bytes must fit the node's buffer budget (RESOURCE_EXHAUSTED); the ring and results stream through
the engine, so their declared rows must not exceed the candidate sets the run enumerated
(INVALID_ARGUMENT), which the receiver knows once it has compared."""

from __future__ import annotations

import asyncio
import pathlib
import uuid

import grpc
import pytest

from party.node.hooks import Hooks
from party.node.keyconfirm import peer_confirmation
from party.synthetic.cluster import Cluster, write_parameters
from proto import common_pb2, linkage, party_pb2
from proto.party_pb2_grpc import PartyStub
from tests.integration.conftest import build_cluster, parameters
from tests.integration.inprocess import InProcessParties

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
async def test_huge_declared_streams_are_refused_at_the_first_chunk_before_executing(
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
        if rpc in ("PushBlocks", "PushShare"):
            # buffered whole: the declared bytes must fit the node's buffer budget
            assert code == Code.RESOURCE_EXHAUSTED, (code, text)
            assert f"{rows} declared rows" in text
        else:
            # no party can send a ring or results before this one executes
            assert code == Code.FAILED_PRECONDITION and "not accepting" in text, (code, text)
        await as_coord.Abort(party_pb2.AbortRequest(run_id=run_id, reason="test"), timeout=10)
    finally:
        await coord.close()
        await as_a.close()
    assert await cluster3.health("party-b") == "SERVING"


@pytest.mark.slow
async def test_ring_and_results_beyond_the_candidate_sets_are_refused_at_once(
    tmp_path: pathlib.Path,
) -> None:
    cluster = build_cluster(tmp_path, 3, 120)
    params = write_parameters(tmp_path / "params.json", cluster.parties, cluster.schema)
    pause = tmp_path / "b-paused"
    hooks = {"party-b": Hooks({"PPRL_TEST_PAUSE_AT": "ring", "PPRL_TEST_PAUSE_FILE": str(pause)})}
    parties = InProcessParties(cluster, hooks)
    await parties.start()
    try:
        ref = await parties.propose_and_prepare(params)
        execution = asyncio.create_task(parties.execute(ref))
        for _ in range(600):  # party-b has compared and holds the ring (test hook)
            if pause.exists():
                break
            await asyncio.sleep(0.05)
        assert pause.exists()
        rows = 2**31 - 1
        as_a = cluster.security("party-a").channel(
            parties.addresses["party-b"], "party-b", ["pprl.v1.Party"]
        )
        as_b = cluster.security("party-b").channel(
            parties.addresses["party-c"], "party-c", ["pprl.v1.Party"]
        )
        try:
            results = party_pb2.DeliverResultsRequest(run=ref, source=0, target=1, total_rows=rows)
            code, text = await _first_then_stall(PartyStub(as_a).DeliverResults, results)
            assert code == Code.INVALID_ARGUMENT and "exceeds what this run can contain" in text
            ring = party_pb2.PassRingRequest(run=ref, source=1, hop=1, total_rows=rows, parties=3)
            code, text = await _first_then_stall(PartyStub(as_b).PassRing, ring)
            assert code == Code.INVALID_ARGUMENT and "exceeds what this run can contain" in text
        finally:
            await as_a.close()
            await as_b.close()
        for name in cluster.parties:
            await parties.stub(name).Abort(
                party_pb2.AbortRequest(run_id=ref.run_id, reason="test"), timeout=10
            )
        summaries = await execution
        assert all(s.reason for s in summaries.values())
        for node in parties.nodes.values():
            assert node.budget.held_total() == 0
    finally:
        await parties.stop()
