"""Live checks of mode mpc3 (docs/protocol.md, "Mode mpc3"): the known-answer linkage in mpc3, and
the status codes of the compute-party RPCs: unknown run, a caller that is not the sending compute
party, a key of the wrong length or replayed, an out-of-order round, a malformed round chunk, an
input share of the wrong width. Afterwards every node still serves.

Probe runs: the suite acts as the coordinator towards real parties (Propose, Prepare; never
Execute) and as a party itself (the probe identity), so it can call the compute-party RPCs as the
one compute party entitled to (or as one that is not). Run A has parties [probe, T1, T2] with the
default compute parties, so the probe is data party 0 and compute party 0, T1 is compute party 1
(it receives keys and rounds only from T2) and T2 is compute party 2 (it receives them from the
probe). Run B has parties [T1, T2, T3, probe]: the probe is a data party but no compute party.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest

from proto import common_pb2, party_pb2
from tests.conformance import client, live
from tests.conformance.client import CALL_TIMEOUT
from tests.conformance.conftest import Deployment
from tests.conformance.test_1_service import check_known_answer
from tests.conformance.test_2_negative import assert_serving

C = grpc.StatusCode
KEY_BYTES = 16  # AES-128 PRF key of a compute party (party/mpc/keys.py)


def mpc3_parameters(dep: Deployment) -> dict[str, Any]:
    """The known-answer parameters in mode mpc3 (s_m must be 0 there)."""
    return {**dep.parameters, "mode": "mpc3", "segment_threshold": 0.0}


async def test_known_answer_linkage_in_mpc3(deployment: Deployment) -> None:
    params = mpc3_parameters(deployment)
    if len(params["parties"]) < 3 and not params.get("compute_parties"):
        pytest.skip("the known-answer parameters have fewer than 3 parties and no compute parties")
    dep = dataclasses.replace(deployment, parameters=params)
    run_id, digest, statuses = await live.linkage(dep)
    check_known_answer(dep, run_id, digest, statuses)
    final = statuses[-1]
    compute = params.get("compute_parties") or params["parties"][:3]
    for s in final.summaries:
        if s.party in compute:
            assert s.mpc_rounds > 0 and s.mpc_round_bytes > 0, s.party
        assert s.reduction_ratio == 0.0 and s.survivors == 0  # no segment filter in mpc3


@dataclasses.dataclass
class ProbeRun:
    """An mpc3 run the suite proposed (as coordinator) to real parties, the probe among them."""

    dep: Deployment
    parties: list[str]
    addresses: dict[str, str]
    run_id: str
    params: common_pb2.LinkageParameters
    digest: str

    @property
    def ref(self) -> common_pb2.RunRef:
        return common_pb2.RunRef(run_id=self.run_id, parameters_digest=self.digest)

    async def call(
        self, target: str, method: str, request: Any, streamed: bool = True
    ) -> grpc.StatusCode:
        """Status of ``method`` on ``target`` called by the probe identity."""
        async with live.party(self.dep, target, self.addresses[target], self.dep.probe) as stub:
            arg = client.stream_of(request) if streamed else request
            return await client.status_of(getattr(stub, method)(arg, timeout=CALL_TIMEOUT))


@contextlib.asynccontextmanager
async def probe_run(dep: Deployment, parties: list[str]) -> AsyncIterator[ProbeRun]:
    """Propose and prepare an mpc3 run with ``parties`` (the probe and real parties); abort it."""
    live.require_probe(dep)
    assert dep.probe is not None
    registered = await live.run_parties(dep)
    real = [p for p in parties if p != dep.probe.name]
    schema = json.loads(json.dumps(dep.parameters["schema"]))
    obj = {
        "version": 1,
        "parties": parties,
        "schema": schema,
        "match_threshold": 0.8,
        "segment_threshold": 0.0,
        "mode": "mpc3",
    }
    msg = client.parameters_message(obj)
    run = ProbeRun(dep, parties, registered, client.new_run_id(), msg, "")
    run.digest = client.parameters_digest(msg)
    directory = [
        common_pb2.PartyAddress(name=p, address=registered.get(p, "127.0.0.1:9")) for p in parties
    ]
    request = party_pb2.ProposeRequest(
        run_id=run.run_id,
        parameters=msg,
        parameters_digest=run.digest,
        directory=directory,
        run_timeout_seconds=60.0,
    )
    try:
        for name in real:
            async with live.party(dep, name, registered[name]) as stub:
                await stub.Propose(request, timeout=CALL_TIMEOUT)
        for name in real:
            async with live.party(dep, name, registered[name]) as stub:
                prep = await stub.Prepare(party_pb2.PrepareRequest(run=run.ref), timeout=60.0)
            if not prep.allowed:
                pytest.skip(f"{name} declined the mpc3 probe run: {list(prep.reasons)}")
        yield run
    finally:
        for name in real:
            async with live.party(dep, name, registered[name]) as stub:
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await stub.Abort(
                        party_pb2.AbortRequest(run_id=run.run_id, reason="conformance probe done"),
                        timeout=CALL_TIMEOUT,
                    )


def round_chunk(run: ProbeRun, *, sequence: int = 0, offset: int = 0, **kw: Any) -> Any:
    fields = {"batch": 0, "number": 0, "total_bytes": 8, "payload": bytes(8), **kw}
    return party_pb2.ExchangeRoundsRequest(
        run=run.ref, source=0, sequence=sequence, offset=offset, **fields
    )


def input_share(run: ProbeRun, target: int, filter_bits: int) -> Any:
    """A well-formed-looking input share of one row from the probe (data party 0)."""
    words = client.words_for(filter_bits)
    blocking = len(json.loads(run.params.schema_json).get("blocking", [])) or 1
    rng = np.random.default_rng(5)
    row = rng.integers(0, 2**63, words, dtype=np.uint64)
    if filter_bits % 64:
        row[-1] &= np.uint64((1 << (filter_bits % 64)) - 1)
    return party_pb2.PushInputShareRequest(
        run=run.ref,
        source=0,
        target=target,
        filter_bits=filter_bits,
        total_rows=1,
        block_columns=blocking,
        rows=1,
        pseudonyms=client.u64([12345]),
        block_digests=client.u64([7] * blocking),
        filters_first=client.u64(row),
        filters_second=client.u64(row),
        counts_first=client.u64([1]),
        counts_second=client.u64([2]),
    )


async def _two_targets(dep: Deployment) -> tuple[str, str]:
    parties = list(await live.run_parties(dep))
    if len(parties) < 2:
        pytest.skip("needs two real parties")
    return parties[0], parties[1]


async def test_compute_party_rpcs_status_codes(deployment: Deployment) -> None:
    t1, t2 = await _two_targets(deployment)
    assert deployment.probe is not None
    probe = deployment.probe.name
    async with probe_run(deployment, [probe, t1, t2]) as run:
        l_bits = int(json.loads(run.params.schema_json)["l"])
        key = os.urandom(KEY_BYTES)
        # Keys: only CP (i+1) mod 3 sends to CP i, with its own index, KEY_BYTES long, once.
        short = party_pb2.PushComputeKeyRequest(run=run.ref, source=0, key=key[:5])
        assert await run.call(t2, "PushComputeKey", short, streamed=False) == C.INVALID_ARGUMENT
        good = party_pb2.PushComputeKeyRequest(run=run.ref, source=0, key=key)
        claim = party_pb2.PushComputeKeyRequest(run=run.ref, source=1, key=key)
        assert await run.call(t2, "PushComputeKey", claim, streamed=False) == C.PERMISSION_DENIED
        assert await run.call(t1, "PushComputeKey", good, streamed=False) == C.PERMISSION_DENIED
        assert await run.call(t2, "PushComputeKey", good, streamed=False) == C.OK
        assert await run.call(t2, "PushComputeKey", good, streamed=False) == C.ALREADY_EXISTS
        # Rounds: T1 receives from T2 only; an unknown run is NOT_FOUND for a known caller.
        assert await run.call(t1, "ExchangeRounds", [round_chunk(run)]) == C.PERMISSION_DENIED
        other = dataclasses.replace(run, run_id=client.new_run_id())
        assert await run.call(t2, "ExchangeRounds", [round_chunk(other)]) == C.NOT_FOUND
        # A round out of order (sequence 1 first): OUT_OF_RANGE.
        late = round_chunk(run, sequence=1)
        assert await run.call(t2, "ExchangeRounds", [late]) == C.OUT_OF_RANGE
        # Input shares: the receiver must be the compute party named, widths must fit.
        wrong_width = input_share(run, 1, l_bits - 1)
        assert await run.call(t1, "PushInputShare", [wrong_width]) == C.INVALID_ARGUMENT
        wrong_target = input_share(run, 2, l_bits)
        assert await run.call(t1, "PushInputShare", [wrong_target]) == C.INVALID_ARGUMENT
        bad_len = input_share(run, 1, l_bits)
        bad_len.filters_second = bad_len.filters_second[:-8]
        assert await run.call(t1, "PushInputShare", [bad_len]) == C.INVALID_ARGUMENT
    # A failed round stream ends the run's exchange, so each of these needs a fresh run.
    async with probe_run(deployment, [probe, t1, t2]) as run:
        # A malformed round chunk (first chunk of a round not at offset 0): INVALID_ARGUMENT.
        bad = round_chunk(run, offset=3)
        assert await run.call(t2, "ExchangeRounds", [bad]) == C.INVALID_ARGUMENT
        # The run's one round stream is spent: a second stream is ALREADY_EXISTS.
        assert await run.call(t2, "ExchangeRounds", [round_chunk(run)]) == C.ALREADY_EXISTS
    async with probe_run(deployment, [probe, t1, t2]) as run:
        # A round larger than the node's bound: RESOURCE_EXHAUSTED.
        huge = round_chunk(run, total_bytes=2**40)
        assert await run.call(t2, "ExchangeRounds", [huge]) == C.RESOURCE_EXHAUSTED
    await assert_serving(deployment)


async def test_non_compute_party_may_not_call_compute_rpcs(deployment: Deployment) -> None:
    parties = list(await live.run_parties(deployment))
    if len(parties) < 3:
        pytest.skip("needs three real parties (the compute parties)")
    assert deployment.probe is not None
    t1, t2, t3 = parties[:3]
    async with probe_run(deployment, [t1, t2, t3, deployment.probe.name]) as run:
        key = os.urandom(KEY_BYTES)
        for source in range(3):
            req = party_pb2.PushComputeKeyRequest(run=run.ref, source=source, key=key)
            for target in (t1, t2, t3):
                code = await run.call(target, "PushComputeKey", req, streamed=False)
                assert code == C.PERMISSION_DENIED, (source, target)
        for target in (t1, t2, t3):
            chunk = round_chunk(run)
            assert await run.call(target, "ExchangeRounds", [chunk]) == C.PERMISSION_DENIED
    await assert_serving(deployment)
