"""Party nodes served inside the test's event loop (real grpc.aio servers, mutual TLS, loopback
ports), driven by the test as the coordinator (Propose, Prepare, Execute, Abort with the
coordinator's certificate), so a test can read a node's state such as its buffer budget."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc

from party.config import load_party_config
from party.node.hooks import Hooks
from party.node.node import PartyNode
from party.synthetic.cluster import Cluster
from proto import common_pb2, linkage, party_pb2, party_pb2_grpc
from proto.party_pb2_grpc import PartyStub
from proto.transport import SERVER_OPTIONS, Security, bind


class InProcessParties:
    """The cluster's party nodes served in this event loop, driven as the coordinator."""

    def __init__(
        self,
        cluster: Cluster,
        hooks: dict[str, Hooks] | None = None,
        budget_mib: int | None = None,
    ) -> None:
        self.cluster = cluster
        self.hooks = hooks or {}
        self.budget_mib = budget_mib  # below the config's minimum: tests force spilling
        self.nodes: dict[str, PartyNode] = {}
        self.addresses: dict[str, str] = {}
        self.servers: list[grpc.aio.Server] = []
        self.channels: dict[str, grpc.aio.Channel] = {}

    async def start(self) -> None:
        for name in self.cluster.parties:
            cfg = load_party_config(
                self.cluster.nodes[name].config, env={"PPRL_COORDINATOR": "127.0.0.1:1"}
            )
            if self.budget_mib is not None:
                cfg = dataclasses.replace(cfg, memory_budget_mib=self.budget_mib)
            security = Security.for_node(name, False, cfg.tls.read)
            node = PartyNode(cfg, security, self.hooks.get(name, Hooks({})))
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
        """Execute at every party; return each party's final ExecuteResponse (with summary)."""

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
