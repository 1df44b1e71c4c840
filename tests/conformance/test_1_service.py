"""Live checks of a healthy deployment: health and reflection, digest agreement, a known answer."""

from __future__ import annotations

import collections

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from proto import common_pb2, party_pb2
from tests.conformance import client, live
from tests.conformance.client import CALL_TIMEOUT
from tests.conformance.conftest import Deployment

S = live.S
EXEC_ORDER = [
    S.STAGE_CREATED,
    S.STAGE_AGREED,
    S.STAGE_AUDITED,
    S.STAGE_EXCHANGING,
    S.STAGE_COMPARING,
    S.STAGE_SUMMING,
    S.STAGE_DONE,
]


async def _health_and_services(dep: Deployment, address: str, name: str) -> tuple[str, set[str]]:
    async with client.channel(address, name, dep.ca, dep.operator) as ch:
        resp = await health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=CALL_TIMEOUT
        )
        call = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
            client.stream_of([reflection_pb2.ServerReflectionRequest(list_services="")]),
            timeout=CALL_TIMEOUT,
        )
        services: set[str] = set()
        async for answer in call:
            services |= {s.name for s in answer.list_services_response.service}
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status), services


async def test_health_and_reflection_served(deployment: Deployment) -> None:
    status, services = await _health_and_services(
        deployment, deployment.coordinator, deployment.coordinator_name
    )
    assert status == "SERVING"
    assert {"pprl.v1.Coordinator", "grpc.health.v1.Health"} <= services
    for name, address in (await live.run_parties(deployment)).items():
        status, services = await _health_and_services(deployment, address, name)
        assert status == "SERVING", name
        assert {"pprl.v1.Party", "grpc.health.v1.Health"} <= services, name
        async with client.channel(address, name, deployment.ca, deployment.operator) as ch:
            per_service = await health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service="pprl.v1.Party"), timeout=CALL_TIMEOUT
            )
        assert per_service.status == health_pb2.HealthCheckResponse.SERVING


async def test_parameter_digest_and_key_confirmation_agree(deployment: Deployment) -> None:
    """Every party computes the specification's digest; confirmations agree (and, locally, equal
    the HMAC the specification defines). A digest that differs is FAILED_PRECONDITION."""
    live.require_coordinator_identity(deployment)
    parties = await live.run_parties(deployment)
    msg = client.parameters_message(deployment.parameters)
    digest = client.parameters_digest(msg)
    directory = [common_pb2.PartyAddress(name=n, address=a) for n, a in parties.items()]
    confirmations: dict[str, bytes] = {}
    run_id = client.new_run_id()
    try:
        for name, address in parties.items():
            async with live.party(deployment, name, address) as stub:
                bad = party_pb2.ProposeRequest(
                    run_id=client.new_run_id(),
                    parameters=msg,
                    parameters_digest="0" * 64,
                    directory=directory,
                )
                code = await client.status_of(stub.Propose(bad, timeout=CALL_TIMEOUT))
                assert code == grpc.StatusCode.FAILED_PRECONDITION, name
                resp = await stub.Propose(
                    party_pb2.ProposeRequest(
                        run_id=run_id, parameters=msg, parameters_digest=digest, directory=directory
                    ),
                    timeout=CALL_TIMEOUT,
                )
            assert resp.parameters_digest == digest, name
            assert len(resp.key_confirmation) == 32, name
            confirmations[name] = resp.key_confirmation
    finally:
        for name, address in parties.items():
            async with live.party(deployment, name, address) as stub:
                await client.status_of(
                    stub.Abort(party_pb2.AbortRequest(run_id=run_id), timeout=CALL_TIMEOUT)
                )
    assert len(set(confirmations.values())) == 1, "parties do not share one linkage secret"
    if deployment.secret is not None:
        want = client.key_confirmation(deployment.secret, run_id, digest)
        assert set(confirmations.values()) == {want}


def check_known_answer(dep: Deployment, run_id: str, digest: str, statuses: list[object]) -> None:
    final = statuses[-1]
    assert final.stage == S.STAGE_DONE, f"run failed: {final.reason}"  # type: ignore[attr-defined]
    msg = client.parameters_message(dep.parameters)
    assert digest == client.parameters_digest(msg)
    assert final.parameters_digest == digest  # type: ignore[attr-defined]
    stages = [s.stage for s in statuses]  # type: ignore[attr-defined]
    ranks = [EXEC_ORDER.index(s) for s in stages]
    assert ranks == sorted(ranks), f"stages went backwards: {stages}"
    summaries = {s.party: s for s in final.summaries}  # type: ignore[attr-defined]
    assert set(summaries) == set(dep.parameters["parties"])
    counts = {s.matches for s in summaries.values()}
    assert len(counts) == 1, f"parties disagree on the number of matched sets: {counts}"
    if dep.expect_matches is not None:
        assert counts == {dep.expect_matches}
    for s in summaries.values():
        assert s.bytes_sent > 0
    if dep.expected_groups is None:
        return
    by_lid: dict[str, dict[str, str]] = collections.defaultdict(dict)
    for name in dep.parameters["parties"]:
        rows = dep.result_rows(name, run_id)
        assert rows is not None
        for row in rows:
            assert float(row["similarity"]) == 1.0
            assert row["record_id"] not in by_lid[row["linkage_id"]].values()
            by_lid[row["linkage_id"]][name] = row["record_id"]
    got = sorted(sorted(g.items()) for g in by_lid.values())
    want = sorted(sorted(g.items()) for g in dep.expected_groups)
    assert got == want


async def test_known_answer_linkage(deployment: Deployment) -> None:
    run_id, digest, statuses = await live.linkage(deployment)
    check_known_answer(deployment, run_id, digest, statuses)
