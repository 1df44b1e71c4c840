"""Each misuse of the Party and Coordinator services gets its documented status code and a clear
message, and the node keeps serving: wrong stage, unknown run, digest mismatch, impersonation,
unknown identity, certificate from another CA, malformed and oversized chunks."""

from __future__ import annotations

import pathlib
import uuid

import grpc
import numpy as np
import pytest

from party.node.keyconfirm import peer_confirmation
from party.synthetic.cluster import Cluster, make_certs
from proto import common_pb2, coordinator_pb2, coordinator_pb2_grpc, linkage, party_pb2
from proto.party_pb2_grpc import PartyStub
from proto.transport import Security, TlsMaterial
from tests.integration.conftest import parameters
from tests.x509_factory import issue

Code = grpc.StatusCode


def _stub(
    cluster: Cluster, target: str, security: Security, **opts: int
) -> tuple[grpc.aio.Channel, PartyStub]:
    node = cluster.nodes[target]
    if opts:
        assert security.tls is not None
        creds = grpc.ssl_channel_credentials(security.tls.ca, security.tls.key, security.tls.cert)
        channel = grpc.aio.secure_channel(
            node.address,
            creds,
            options=[("grpc.ssl_target_name_override", target), *opts.items()],
        )
    else:
        channel = security.channel(node.address, target, ["pprl.v1.Party"])
    return channel, PartyStub(channel)


async def _code(call) -> tuple[grpc.StatusCode, str]:  # type: ignore[no-untyped-def]
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return Code.OK, ""


async def _stream_code(method, chunks, **kw) -> tuple[grpc.StatusCode, str]:  # type: ignore[no-untyped-def]
    async def gen():  # type: ignore[no-untyped-def]
        for c in chunks:
            yield c

    return await _code(method(gen(), timeout=10.0, **kw))


async def test_party_service_status_codes(cluster3: Cluster) -> None:
    coord = cluster3.security("coordinator")
    a = cluster3.security("party-a")
    c = cluster3.security("party-c")
    intruder = cluster3.security("intruder")
    msg = linkage.load_parameters(parameters(cluster3, name="p-rpc.json"))
    digest = linkage.parameters_digest(msg)
    run_id = uuid.uuid4().hex
    directory = [
        common_pb2.PartyAddress(name=n, address=cluster3.nodes[n].address) for n in cluster3.parties
    ]
    propose = party_pb2.ProposeRequest(
        run_id=run_id, parameters=msg, parameters_digest=digest, directory=directory
    )
    ref = common_pb2.RunRef(run_id=run_id, parameters_digest=digest)
    # party-a's key confirmation for party-b, carried by its first block-digest chunk.
    a_to_b = peer_confirmation(cluster3.secret, run_id, digest, "party-a", "party-b")
    ch_c, as_coord = _stub(cluster3, "party-b", coord)
    ch_a, as_a = _stub(cluster3, "party-b", a)
    ch_cc, as_c = _stub(cluster3, "party-b", c)
    ch_i, as_intruder = _stub(cluster3, "party-b", intruder)
    try:
        # Coordinator-only calls, digest checks and duplicates.
        code, text = await _code(as_a.Propose(propose, timeout=10))
        assert code == Code.PERMISSION_DENIED and "not the coordinator" in text
        bad = party_pb2.ProposeRequest()
        bad.CopyFrom(propose)
        bad.parameters_digest = "0" * 64
        code, text = await _code(as_coord.Propose(bad, timeout=10))
        assert code == Code.FAILED_PRECONDITION and "digest" in text
        code, _ = await _code(as_coord.Propose(propose, timeout=10))
        assert code == Code.OK
        code, text = await _code(as_coord.Propose(propose, timeout=10))
        assert code == Code.ALREADY_EXISTS and run_id in text

        # Wrong stage: the run is only proposed.
        stream = as_coord.Execute(party_pb2.ExecuteRequest(run=ref), timeout=10)
        code, text = await _code(stream.read())
        assert code == Code.FAILED_PRECONDITION and "not prepared" in text
        blocks = party_pb2.PushBlocksRequest(
            run=ref, source=0, total=1, digests=b"\x01" + b"\0" * 7, key_confirmation=a_to_b
        )
        code, text = await _stream_code(as_a.PushBlocks, [blocks])
        assert code == Code.FAILED_PRECONDITION and "proposed" in text

        # Unknown run id and digest mismatch.
        unknown = common_pb2.RunRef(run_id=uuid.uuid4().hex, parameters_digest=digest)
        code, text = await _code(
            as_coord.Prepare(party_pb2.PrepareRequest(run=unknown), timeout=10)
        )
        assert code == Code.NOT_FOUND and "unknown run" in text
        wrong = common_pb2.RunRef(run_id=run_id, parameters_digest="f" * 64)
        code, text = await _code(as_coord.Prepare(party_pb2.PrepareRequest(run=wrong), timeout=10))
        assert code == Code.FAILED_PRECONDITION and "digest" in text

        prepared = await as_coord.Prepare(party_pb2.PrepareRequest(run=ref), timeout=30)
        assert prepared.allowed and prepared.records == 200

        # Identity binding.
        claim_c = party_pb2.PushBlocksRequest(run=ref, source=2, total=0)
        code, text = await _stream_code(as_a.PushBlocks, [claim_c])
        assert code == Code.PERMISSION_DENIED and "own" in text
        code, text = await _stream_code(as_intruder.PushBlocks, [blocks])
        assert code == Code.PERMISSION_DENIED and "intruder" in text
        ring = party_pb2.PassRingRequest(run=ref, source=2, hop=2, total_rows=0, parties=3)
        code, text = await _stream_code(as_c.PassRing, [ring])
        assert code == Code.PERMISSION_DENIED and "predecessor" in text
        res = party_pb2.DeliverResultsRequest(run=ref, source=2, target=1, total_rows=0)
        code, text = await _stream_code(as_c.DeliverResults, [res])
        assert code == Code.PERMISSION_DENIED and "initiator" in text

        # Malformed chunks.
        torn = party_pb2.PushBlocksRequest(
            run=ref, source=0, total=1, digests=b"\x01" * 7, key_confirmation=a_to_b
        )
        code, text = await _stream_code(as_a.PushBlocks, [torn])
        assert code == Code.INVALID_ARGUMENT and "multiple of 8" in text
        share = party_pb2.PushShareRequest(
            run=ref,
            source=0,
            target=1,
            segment_bits=340,
            total_rows=2,
            block_columns=2,
            rows=2,
            pseudonyms=np.arange(1, 2, dtype="<u8").tobytes(),  # one pseudonym for two rows
        )
        code, text = await _stream_code(as_a.PushShare, [share])
        assert code == Code.INVALID_ARGUMENT and "pseudonyms" in text
        share.target = 2
        code, text = await _stream_code(as_a.PushShare, [share])
        assert code == Code.INVALID_ARGUMENT and "index 2" in text
        bounded_hop0 = party_pb2.PassRingRequest(
            run=ref, source=0, hop=0, total_rows=0, parties=3, bounded=True, last=True
        )
        code, text = await _stream_code(as_a.PassRing, [bounded_hop0])
        assert code == Code.INVALID_ARGUMENT and "exact total" in text
        unknown_blocks = party_pb2.PushBlocksRequest(run=unknown, source=0, total=0)
        code, text = await _stream_code(as_a.PushBlocks, [unknown_blocks])
        assert code == Code.NOT_FOUND

        # Oversized chunk: 9 MiB > the 8 MiB limit (client limit raised to let it leave).
        ch_big, big = _stub(cluster3, "party-b", a, **{"grpc.max_send_message_length": 32 * 2**20})
        huge = party_pb2.PushBlocksRequest(
            run=ref,
            source=0,
            total=9 * 2**17,
            digests=b"\1" * 9 * 2**20,
            key_confirmation=a_to_b,
        )
        code, _ = await _stream_code(big.PushBlocks, [huge])
        await ch_big.close()
        assert code == Code.RESOURCE_EXHAUSTED

        # A proper delivery is accepted once.
        code, _ = await _stream_code(as_a.PushBlocks, [blocks])
        assert code == Code.OK
        code, text = await _stream_code(as_a.PushBlocks, [blocks])
        assert code == Code.ALREADY_EXISTS

        # After an abort the run accepts nothing.
        await as_coord.Abort(party_pb2.AbortRequest(run_id=run_id, reason="test"), timeout=10)
        late = party_pb2.PushBlocksRequest(run=ref, source=2, total=0)
        code, text = await _stream_code(as_c.PushBlocks, [late])
        assert code == Code.FAILED_PRECONDITION and "failed" in text
    finally:
        for ch in (ch_c, ch_a, ch_cc, ch_i):
            await ch.close()
    assert await cluster3.health("party-b") == "SERVING"


@pytest.mark.parametrize(
    "common_names", [["coordinator", "party-d"], ["party-d", "coordinator"], []]
)
async def test_certificate_without_exactly_one_cn_has_no_identity(
    cluster3: Cluster, tmp_path: pathlib.Path, common_names: list[str]
) -> None:
    """A CA-signed certificate whose subject holds two CNs (or none) is nobody: not the coordinator
    (operator calls, coordinator calls on a party), not a party."""
    cert, key = issue(cluster3.certs, tmp_path, "two-cn", common_names)
    sec = Security(
        "coordinator",
        TlsMaterial(
            ca=(cluster3.certs / "ca.pem").read_bytes(),
            cert=cert.read_bytes(),
            key=key.read_bytes(),
        ),
    )
    async with sec.channel(
        cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as ch:
        code, text = await _code(
            coordinator_pb2_grpc.CoordinatorStub(ch).ListParties(
                coordinator_pb2.ListPartiesRequest(), timeout=5
            )
        )
    assert code == Code.UNAUTHENTICATED, text
    ch2, stub = _stub(cluster3, "party-b", sec)
    try:
        code, text = await _code(stub.Abort(party_pb2.AbortRequest(run_id="0" * 32), timeout=5))
    finally:
        await ch2.close()
    assert code == Code.UNAUTHENTICATED, text


async def test_certificate_from_another_ca_is_refused(cluster3: Cluster, tmp_path) -> None:  # type: ignore[no-untyped-def]
    make_certs(tmp_path, ["party-a", "coordinator"], ca_name="rogue CA")
    rogue = cluster3.security("party-a", certs=tmp_path)
    # The rogue client trusts the real CA so only the server's check of the client is tested.
    assert rogue.tls is not None
    rogue = Security(
        "party-a",
        type(rogue.tls)(
            ca=(cluster3.certs / "ca.pem").read_bytes(), cert=rogue.tls.cert, key=rogue.tls.key
        ),
    )
    ch, stub = _stub(cluster3, "party-b", rogue)
    try:
        code, _ = await _code(stub.Abort(party_pb2.AbortRequest(run_id="0" * 32), timeout=5))
    finally:
        await ch.close()
    assert code == Code.UNAVAILABLE  # the TLS handshake fails: no RPC is ever dispatched
    sec = cluster3.security("coordinator", certs=tmp_path)
    async with sec.channel(
        cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as c2:
        code, _ = await _code(
            coordinator_pb2_grpc.CoordinatorStub(c2).ListParties(
                coordinator_pb2.ListPartiesRequest(), timeout=5
            )
        )
    assert code == Code.UNAVAILABLE
    assert await cluster3.health("party-b") == "SERVING"
    assert await cluster3.health("coordinator") == "SERVING"


async def test_coordinator_service_status_codes(cluster3: Cluster) -> None:
    a = cluster3.security("party-a")
    async with a.channel(
        cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        code, text = await _code(
            stub.RegisterParty(
                coordinator_pb2.RegisterPartyRequest(name="party-b", address="127.0.0.1:1"),
                timeout=5,
            )
        )
        assert code == Code.PERMISSION_DENIED and "party-b" in text
        code, text = await _code(
            stub.RegisterParty(
                coordinator_pb2.RegisterPartyRequest(name="party-a", address="nope"), timeout=5
            )
        )
        assert code == Code.INVALID_ARGUMENT
        msg = linkage.load_parameters(parameters(cluster3, name="p-rpc2.json"))
    intruder = cluster3.security("intruder")
    async with intruder.channel(
        cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        code, text = await _code(
            stub.RegisterParty(
                coordinator_pb2.RegisterPartyRequest(name="intruder", address="127.0.0.1:1"),
                timeout=5,
            )
        )
        assert code == Code.PERMISSION_DENIED and "not an allowed party" in text
    async with a.channel(
        cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        code, text = await _code(
            stub.StartRun(coordinator_pb2.StartRunRequest(parameters=msg), timeout=5)
        )
        assert code == Code.PERMISSION_DENIED and "operator" in text
    op = cluster3.security("coordinator")
    async with op.channel(
        cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as ch:
        stub = coordinator_pb2_grpc.CoordinatorStub(ch)
        for run_id, want in (("nope", Code.INVALID_ARGUMENT), ("0" * 32, Code.NOT_FOUND)):
            code, text = await _code(
                stub.GetRun(coordinator_pb2.GetRunRequest(run_id=run_id), timeout=5)
            )
            assert code == want
            code, text = await _code(
                stub.WatchRun(coordinator_pb2.WatchRunRequest(run_id=run_id), timeout=5).read()
            )
            assert code == want
        bad = linkage.load_parameters(parameters(cluster3, name="p-rpc3.json"))
        bad.parties.append("party-zz")
        code, text = await _code(
            stub.StartRun(coordinator_pb2.StartRunRequest(parameters=bad), timeout=5)
        )
        assert code == Code.FAILED_PRECONDITION and "party-zz" in text
        bad.match_threshold = 7.0
        code, text = await _code(
            stub.StartRun(coordinator_pb2.StartRunRequest(parameters=bad), timeout=5)
        )
        assert code == Code.INVALID_ARGUMENT and "match_threshold" in text
    assert await cluster3.health("coordinator") == "SERVING"


@pytest.mark.parametrize("who", ["party-a", "coordinator"])
def test_health_cli_exit_status(cluster3: Cluster, who: str) -> None:
    import os
    import subprocess
    import sys

    from party.synthetic.cluster import PARTY_ENTRY

    if who == "coordinator":
        argv = [
            sys.executable,
            "-m",
            "coordinator.cli",
            "health",
            "--config",
            str(cluster3.coordinator.config),
        ]
    else:
        argv = [
            sys.executable,
            "-m",
            PARTY_ENTRY,
            "health",
            "--config",
            str(cluster3.nodes[who].config),
        ]
    ok = subprocess.run(argv, capture_output=True, text=True, cwd=cluster3.root, env=os.environ)
    assert ok.returncode == 0, ok.stderr
    assert "SERVING" in ok.stderr


@pytest.mark.parametrize(
    ("who", "service"), [("party-a", "pprl.v1.Party"), ("coordinator", "pprl.v1.Coordinator")]
)
async def test_reflection_lists_the_services(cluster3: Cluster, who: str, service: str) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    node = cluster3.coordinator if who == "coordinator" else cluster3.nodes[who]
    sec = cluster3.security("coordinator")
    async with sec.channel(node.address, who, ["grpc.reflection.v1alpha.ServerReflection"]) as ch:
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)

        async def one():  # type: ignore[no-untyped-def]
            yield reflection_pb2.ServerReflectionRequest(list_services="")

        names: set[str] = set()
        async for resp in stub.ServerReflectionInfo(one(), timeout=5):
            names.update(s.name for s in resp.list_services_response.service)
    assert {service, "grpc.health.v1.Health"} <= names


async def test_insecure_mode_is_loud_and_requires_a_claimed_identity(
    cluster3: Cluster, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    import asyncio
    import os
    import subprocess
    import sys

    from party.synthetic.cluster import PARTY_ENTRY

    port_file = tmp_path / "insecure.port"
    log = tmp_path / "insecure.log"
    env = {
        **os.environ,
        "PPRL_PORT_FILE": str(port_file),
        "PPRL_COORDINATOR": "127.0.0.1:9",  # nobody: registration retries in the background
        "PPRL_NODE_NAME": "party-b",
    }
    cfg = cluster3.nodes["party-b"].config
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", PARTY_ENTRY, "serve", "--config", str(cfg), "--insecure"],
            cwd=cluster3.root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        while not port_file.exists():
            assert proc.poll() is None, log.read_text()
            await asyncio.sleep(0.05)
        address = f"127.0.0.1:{port_file.read_text().strip()}"
        async with grpc.aio.insecure_channel(address) as ch:
            await asyncio.wait_for(ch.channel_ready(), 30)
            stub = PartyStub(ch)
            code, text = await _code(stub.Abort(party_pb2.AbortRequest(run_id="0" * 32), timeout=5))
            assert code == Code.UNAUTHENTICATED
            code, text = await _code(
                stub.Abort(
                    party_pb2.AbortRequest(run_id="0" * 32),
                    timeout=5,
                    metadata=(("x-pprl-identity", "coordinator"),),
                )
            )
            assert code == Code.NOT_FOUND  # the claimed identity is trusted in insecure mode
    finally:
        proc.terminate()
        proc.wait(10)
    assert "INSECURE MODE" in log.read_text()
