"""A node frees a run's bulk data when the run ends (done, aborted, failed): many runs in one node
leave no buffered bytes behind in the node's buffer budget and no ring, results or block buffers,
only the runs' summaries.

The party nodes are real grpc.aio servers with mutual TLS on loopback ports, started inside the
test's event loop so the test can read their buffer budget; the test itself plays the coordinator
(Propose, Prepare, Execute, Abort with the coordinator's certificate).
"""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from party.config import load_party_config
from party.node.node import PartyNode, Phase
from party.synthetic.cluster import Cluster, write_parameters
from proto import common_pb2, linkage, party_pb2, party_pb2_grpc
from proto.party_pb2_grpc import PartyStub
from proto.transport import SERVER_OPTIONS, Security, bind
from tests.integration.conftest import build_cluster


class InProcessParties:
    """The cluster's party nodes served in this event loop, driven as the coordinator."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.nodes: dict[str, PartyNode] = {}
        self.addresses: dict[str, str] = {}
        self.servers: list[grpc.aio.Server] = []
        self.channels: dict[str, grpc.aio.Channel] = {}

    async def start(self) -> None:
        for name in self.cluster.parties:
            cfg = load_party_config(
                self.cluster.nodes[name].config, env={"PPRL_COORDINATOR": "127.0.0.1:1"}
            )
            security = Security.for_node(name, False, cfg.tls.read)
            node = PartyNode(cfg, security)
            server = grpc.aio.server(options=SERVER_OPTIONS)
            party_pb2_grpc.add_PartyServicer_to_server(node, server)
            port = bind(server, "127.0.0.1:0", security)
            await server.start()
            self.nodes[name] = node
            self.servers.append(server)
            self.addresses[name] = f"127.0.0.1:{port}"
        coord = self.cluster.security("coordinator")
        for name, address in self.addresses.items():
            self.channels[name] = coord.channel(address, name, ["pprl.v1.Party"])

    async def stop(self) -> None:
        for ch in self.channels.values():
            await ch.close()
        for node in self.nodes.values():
            await node.shutdown()
        for server in self.servers:
            await server.stop(0)

    def stub(self, name: str) -> PartyStub:
        return PartyStub(self.channels[name])

    async def propose_and_prepare(self, params: pathlib.Path) -> common_pb2.RunRef:
        msg = linkage.load_parameters(params)
        digest = linkage.parameters_digest(msg)
        run_id = uuid.uuid4().hex
        directory = [common_pb2.PartyAddress(name=n, address=a) for n, a in self.addresses.items()]
        for name in self.nodes:
            await self.stub(name).Propose(
                party_pb2.ProposeRequest(
                    run_id=run_id, parameters=msg, parameters_digest=digest, directory=directory
                ),
                timeout=10,
            )
        ref = common_pb2.RunRef(run_id=run_id, parameters_digest=digest)
        for name in self.nodes:
            await self.stub(name).Prepare(party_pb2.PrepareRequest(run=ref), timeout=60)
        return ref

    async def execute(self, ref: common_pb2.RunRef) -> dict[str, Any]:
        import asyncio

        async def follow(name: str) -> Any:
            stream: AsyncIterator[party_pb2.ExecuteResponse] = self.stub(name).Execute(
                party_pb2.ExecuteRequest(run=ref), timeout=120
            )
            async for item in stream:
                if item.HasField("summary"):
                    return item
            raise AssertionError(f"{name} sent no summary")

        done = await asyncio.gather(*(follow(n) for n in self.nodes))
        return dict(zip(self.nodes, done, strict=True))


def _assert_freed(node: PartyNode, run_id: str) -> None:
    run = node.runs[run_id]
    assert run.phase in (Phase.DONE, Phase.FAILED)
    assert node.budget.held(run_id) == 0, "a finished run still holds buffered bytes"
    assert run.engine is None and run.ring_in is None and run.results_in is None
    assert not run.blocks_in


@pytest.mark.slow
async def test_finished_runs_hold_no_buffered_bytes(tmp_path: pathlib.Path) -> None:
    cluster = build_cluster(tmp_path, 2, 300)
    params = write_parameters(
        tmp_path / "params.json", cluster.parties, cluster.schema, segment_threshold=0.0
    )
    parties = InProcessParties(cluster)
    await parties.start()
    try:
        finished: list[str] = []
        for _ in range(6):
            ref = await parties.propose_and_prepare(params)
            summaries = await parties.execute(ref)
            assert all(s.reason == "" for s in summaries.values())
            assert all(s.summary.matches > 0 for s in summaries.values())
            finished.append(ref.run_id)
            for node in parties.nodes.values():
                for run_id in finished:
                    _assert_freed(node, run_id)
                assert node.runs[ref.run_id].comparison is not None  # the summary stays
        # A run aborted after Prepare, and one whose Execute the coordinator abandons, end too.
        ref = await parties.propose_and_prepare(params)
        for name in parties.nodes:
            await parties.stub(name).Abort(
                party_pb2.AbortRequest(run_id=ref.run_id, reason="test"), timeout=10
            )
        finished.append(ref.run_id)
        for node in parties.nodes.values():
            for run_id in finished:
                _assert_freed(node, run_id)
            assert node.budget.held_total() == 0
    finally:
        await parties.stop()
