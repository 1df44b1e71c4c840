"""Helpers shared by the live checks: stubs for the deployment, runs through the coordinator, and
probe runs in which the suite acts as the coordinator and as a second party towards one real node."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from proto import common_pb2, coordinator_pb2, coordinator_pb2_grpc, party_pb2, party_pb2_grpc
from tests.conformance import client
from tests.conformance.client import CALL_TIMEOUT, Identity
from tests.conformance.conftest import Deployment

S = common_pb2.Stage
OK = grpc.StatusCode.OK


@contextlib.asynccontextmanager
async def coordinator(
    dep: Deployment, ident: Identity | None = None
) -> AsyncIterator[coordinator_pb2_grpc.CoordinatorStub]:
    async with client.channel(
        dep.coordinator, dep.coordinator_name, dep.ca, ident or dep.operator
    ) as ch:
        yield coordinator_pb2_grpc.CoordinatorStub(ch)


@contextlib.asynccontextmanager
async def party(
    dep: Deployment, name: str, address: str, ident: Identity | None = None
) -> AsyncIterator[party_pb2_grpc.PartyStub]:
    async with client.channel(address, name, dep.ca, ident or dep.operator) as ch:
        yield party_pb2_grpc.PartyStub(ch)


async def registered(dep: Deployment) -> dict[str, str]:
    """Registered parties (name -> address) as the coordinator lists them."""
    async with coordinator(dep) as stub:
        resp = await stub.ListParties(coordinator_pb2.ListPartiesRequest(), timeout=CALL_TIMEOUT)
    return {p.name: p.address for p in resp.parties}


async def run_parties(dep: Deployment) -> dict[str, str]:
    """The parties of the known-answer parameters with their registered addresses."""
    reg = await registered(dep)
    names = list(dep.parameters["parties"])
    missing = [n for n in names if n not in reg]
    if missing:
        pytest.fail(f"parties of the conformance parameters are not registered: {missing}")
    return {n: reg[n] for n in names}


async def linkage(dep: Deployment, timeout: float = 90.0) -> tuple[str, str, list[Any]]:
    """Start the known-answer run; follow WatchRun to the end. (run id, digest, statuses)."""
    msg = client.parameters_message(dep.parameters)
    async with coordinator(dep) as stub:
        resp = await stub.StartRun(
            coordinator_pb2.StartRunRequest(parameters=msg, timeout_seconds=timeout),
            timeout=CALL_TIMEOUT + timeout,
        )
        statuses = [
            u.status
            async for u in stub.WatchRun(
                coordinator_pb2.WatchRunRequest(run_id=resp.run_id), timeout=timeout + 30
            )
        ]
    return resp.run_id, resp.parameters_digest, statuses


def probe_parameters(dep: Deployment, target: str) -> dict[str, Any]:
    """Two-party parameters [probe, target] with the deployment's schema (l made even), s_m = 0."""
    assert dep.probe is not None
    schema = json.loads(json.dumps(dep.parameters["schema"]))
    schema["l"] = int(schema["l"]) + int(schema["l"]) % 2
    return {
        "version": 1,
        "parties": [dep.probe.name, target],
        "schema": schema,
        "match_threshold": 0.8,
        "segment_threshold": 0.0,
        "one_to_one": False,
        "max_block_size": None,
        "target": "all",  # the probe speaks the ring of target all
    }


@dataclass
class Probe:
    """A run proposed by the suite (as coordinator) to one real party ``target``."""

    dep: Deployment
    target: str
    address: str
    run_id: str
    params: common_pb2.LinkageParameters
    digest: str
    probe_address: str

    @property
    def ref(self) -> common_pb2.RunRef:
        return common_pb2.RunRef(run_id=self.run_id, parameters_digest=self.digest)

    @property
    def filter_bits(self) -> int:
        return int(json.loads(self.params.schema_json)["l"])

    @property
    def block_columns(self) -> int:
        return len(json.loads(self.params.schema_json).get("blocking", []))

    def stub(self, ident: Identity | None = None) -> Any:
        return party(self.dep, self.target, self.address, ident)

    def propose_request(self) -> party_pb2.ProposeRequest:
        assert self.dep.probe is not None
        return party_pb2.ProposeRequest(
            run_id=self.run_id,
            parameters=self.params,
            parameters_digest=self.digest,
            directory=[
                common_pb2.PartyAddress(name=self.dep.probe.name, address=self.probe_address),
                common_pb2.PartyAddress(name=self.target, address=self.address),
            ],
            run_timeout_seconds=60.0,
        )

    async def propose(self) -> party_pb2.ProposeResponse:
        async with self.stub() as stub:
            resp: party_pb2.ProposeResponse = await stub.Propose(
                self.propose_request(), timeout=CALL_TIMEOUT
            )
        return resp

    async def prepare(self) -> party_pb2.PrepareResponse:
        async with self.stub() as stub:
            resp: party_pb2.PrepareResponse = await stub.Prepare(
                party_pb2.PrepareRequest(run=self.ref), timeout=60.0
            )
        return resp

    async def abort(self) -> None:
        async with self.stub() as stub:
            with contextlib.suppress(grpc.aio.AioRpcError):
                await stub.Abort(
                    party_pb2.AbortRequest(run_id=self.run_id, reason="conformance probe done"),
                    timeout=CALL_TIMEOUT,
                )

    async def push(self, method: str, chunks: list[Any], ident: Identity | None = None) -> Any:
        """Stream ``chunks`` to the target's ``method`` as the probe party (or ``ident``)."""
        async with self.stub(ident or self.dep.probe) as stub:
            return await getattr(stub, method)(client.stream_of(chunks), timeout=CALL_TIMEOUT)

    async def push_status(
        self, method: str, chunks: list[Any], ident: Identity | None = None
    ) -> grpc.StatusCode:
        return await client.status_of(self.push(method, chunks, ident))

    def blocks(
        self, digests: Any, total: int | None = None, source: int = 0, confirm: bool = True
    ) -> Any:
        """A PushBlocks chunk from the probe; with ``confirm`` it carries the probe's key
        confirmation for the target (needs the linkage secret, known only to a local deployment
        or given with --secret)."""
        data = client.u64(digests)
        confirmation = b""
        if confirm:
            if self.dep.secret is None:
                pytest.skip("needs the linkage secret (--secret) to confirm the key to a party")
            assert self.dep.probe is not None
            confirmation = client.peer_confirmation(
                self.dep.secret, self.run_id, self.digest, self.dep.probe.name, self.target
            )
        return party_pb2.PushBlocksRequest(
            run=self.ref,
            source=source,
            total=len(data) // 8 if total is None else total,
            digests=data,
            key_confirmation=confirmation,
        )


def require_probe(dep: Deployment) -> None:
    if dep.probe is None:
        pytest.skip("needs a probe party identity (--probe-cert/--probe-key)")
    require_coordinator_identity(dep)


def require_coordinator_identity(dep: Deployment) -> None:
    if not dep.acts_as_coordinator:
        pytest.skip(
            f"needs the coordinator's identity {dep.coordinator_name!r} as --cert to drive a party"
        )


async def new_probe(dep: Deployment, probe_address: str = "127.0.0.1:9") -> Probe:
    """Choose the first party of the parameters as target and build (not yet propose) a probe run."""
    require_probe(dep)
    parties = await run_parties(dep)
    target = next(iter(parties))
    obj = probe_parameters(dep, target)
    msg = client.parameters_message(obj)
    return Probe(
        dep=dep,
        target=target,
        address=parties[target],
        run_id=client.new_run_id(),
        params=msg,
        digest=client.parameters_digest(msg),
        probe_address=probe_address,
    )
