"""Trust boundaries and operations of live nodes (issue 15): messages attributed to the stream's
certificate identity, registration that a second process cannot hijack, start-up checks."""

from __future__ import annotations

import asyncio

import grpc

from party.synthetic.cluster import Cluster
from proto import common_pb2, coordinator_pb2, coordinator_pb2_grpc
from tests.integration.conftest import parameters, run_and_wait

S = common_pb2.Stage


def test_execute_messages_are_filed_under_the_streams_identity(cluster3: Cluster) -> None:
    """party-c claims to be party-a in its progress and summary: the run fails naming party-c and
    nothing is filed under party-a's name on party-c's word."""
    cluster3.restart_party("party-c", {"PPRL_TEST_FORGE_PARTY": "party-a"})
    try:
        status = run_and_wait(cluster3, parameters(cluster3, name="p-forge.json"))
        assert status.stage == S.STAGE_FAILED
        assert "party-c sent a message attributed to another party" in status.reason
        assert all(s.matches != 424242 for s in status.summaries)
        assert all(p.party in cluster3.parties for p in status.parties)
    finally:
        cluster3.restart_party("party-c")
    again = run_and_wait(cluster3, parameters(cluster3, name="p-after-forge.json"))
    assert again.stage == S.STAGE_DONE, again.reason


async def _register(cluster: Cluster, name: str, address: str) -> tuple[grpc.StatusCode, str]:
    sec = cluster.security(name)
    async with sec.channel(
        cluster.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as ch:
        try:
            await coordinator_pb2_grpc.CoordinatorStub(ch).RegisterParty(
                coordinator_pb2.RegisterPartyRequest(name=name, address=address), timeout=10
            )
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


def test_a_second_process_cannot_take_a_live_partys_registration(cluster3: Cluster) -> None:
    """Another holder of party-a's certificate registers elsewhere while party-a serves: refused
    (the coordinator probed the live address), and runs keep working."""
    real = cluster3.nodes["party-a"].address
    code, details = asyncio.run(_register(cluster3, "party-a", "127.0.0.1:1"))
    assert code == grpc.StatusCode.ALREADY_EXISTS, (code, details)
    assert asyncio.run(cluster3._list_parties())["party-a"] == real
    assert run_and_wait(cluster3, parameters(cluster3, name="p-hijack.json")).stage == S.STAGE_DONE


def test_parties_re_register_after_the_registry_lost_them(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """The coordinator restarts on an empty state store: the parties re-register on their
    registration heartbeat (timeouts.register = 2 s in test clusters) without being restarted."""
    cluster = make_cluster(2, 30)
    port = cluster.coordinator.port
    cluster.stop("coordinator")
    for leftover in (cluster.root / "state").glob("coordinator.sqlite*"):
        leftover.unlink()
    cluster.start_coordinator({"PPRL_LISTEN": f"127.0.0.1:{port}"})
    assert asyncio.run(cluster._list_parties()) == {}
    cluster.wait_registered(cluster.parties, timeout=20.0)
    status = run_and_wait(cluster, parameters(cluster, name="p-reregistered.json"))
    assert status.stage == S.STAGE_DONE, status.reason
