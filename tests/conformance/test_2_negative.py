"""Live negative checks: every malformed, unauthorised, replayed or out-of-order request gets its
documented status code (docs/protocol.md, "Status codes"), and the node keeps serving."""

from __future__ import annotations

import asyncio
import contextlib
import json
import pathlib
import re
import subprocess
import sys
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from proto import common_pb2, coordinator_pb2, party_pb2
from tests.conformance import client, live
from tests.conformance.client import CALL_TIMEOUT, Identity
from tests.conformance.conftest import Deployment

C = grpc.StatusCode
S = common_pb2.Stage
ROOT = pathlib.Path(__file__).resolve().parents[2]


async def assert_serving(dep: Deployment) -> None:
    """Coordinator and every party answer health SERVING."""
    targets = [(dep.coordinator_name, dep.coordinator)] + list(
        (await live.run_parties(dep)).items()
    )
    for name, address in targets:
        async with client.channel(address, name, dep.ca, dep.operator) as ch:
            resp = await health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT
            )
        assert resp.status == health_pb2.HealthCheckResponse.SERVING, name


@contextlib.asynccontextmanager
async def prepared_probe(dep: Deployment, probe_address: str = "127.0.0.1:9") -> Any:
    probe = await live.new_probe(dep, probe_address)
    try:
        await probe.propose()
        prep = await probe.prepare()
        if not prep.allowed:
            pytest.skip(f"{probe.target} declined the probe run: {list(prep.reasons)}")
        yield probe
    finally:
        await probe.abort()


# -- unknown run, out-of-order stage ----------------------------------------------------------


async def test_unknown_run_is_not_found(deployment: Deployment) -> None:
    unknown = client.new_run_id()
    async with live.coordinator(deployment) as stub:
        code = await client.status_of(
            stub.GetRun(coordinator_pb2.GetRunRequest(run_id=unknown), timeout=CALL_TIMEOUT)
        )
        assert code == C.NOT_FOUND
        call = stub.WatchRun(coordinator_pb2.WatchRunRequest(run_id=unknown), timeout=CALL_TIMEOUT)
        code = await client.status_of(call.read())
        assert code == C.NOT_FOUND
    if not deployment.acts_as_coordinator:
        return
    ref = common_pb2.RunRef(run_id=unknown, parameters_digest="0" * 64)
    for name, address in (await live.run_parties(deployment)).items():
        async with live.party(deployment, name, address) as stub:
            for call in (
                stub.Prepare(party_pb2.PrepareRequest(run=ref), timeout=CALL_TIMEOUT),
                stub.Abort(party_pb2.AbortRequest(run_id=unknown), timeout=CALL_TIMEOUT),
            ):
                assert await client.status_of(call) == C.NOT_FOUND, name
            execute = stub.Execute(party_pb2.ExecuteRequest(run=ref), timeout=CALL_TIMEOUT)
            assert await client.status_of(execute.read()) == C.NOT_FOUND, name
    if deployment.probe is not None:
        # A peer the node knows (it was named in a run) asking about an unknown run.
        async with prepared_probe(deployment) as probe:
            unknown_ref = common_pb2.RunRef(run_id=unknown, parameters_digest=probe.digest)
            chunk = party_pb2.PushBlocksRequest(
                run=unknown_ref, source=0, total=1, digests=client.u64([7])
            )
            assert await probe.push_status("PushBlocks", [chunk]) == C.NOT_FOUND
    await assert_serving(deployment)


async def test_out_of_order_stage_is_failed_precondition(deployment: Deployment) -> None:
    probe = await live.new_probe(deployment)
    try:
        await probe.propose()
        # Replaying the proposal of an existing run.
        async with probe.stub() as stub:
            code = await client.status_of(
                stub.Propose(probe.propose_request(), timeout=CALL_TIMEOUT)
            )
            assert code == C.ALREADY_EXISTS
            # Execute before Prepare.
            execute = stub.Execute(party_pb2.ExecuteRequest(run=probe.ref), timeout=CALL_TIMEOUT)
            assert await client.status_of(execute.read()) == C.FAILED_PRECONDITION
        # Peer data before the run is prepared.
        assert await probe.push_status("PushBlocks", [probe.blocks([5])]) == C.FAILED_PRECONDITION
        # A reference carrying another digest (a message replayed from another run).
        async with probe.stub() as stub:
            other = common_pb2.RunRef(run_id=probe.run_id, parameters_digest="f" * 64)
            code = await client.status_of(
                stub.Prepare(party_pb2.PrepareRequest(run=other), timeout=CALL_TIMEOUT)
            )
            assert code == C.FAILED_PRECONDITION
        prep = await probe.prepare()
        assert prep.records > 0
        async with probe.stub() as stub:
            code = await client.status_of(
                stub.Prepare(party_pb2.PrepareRequest(run=probe.ref), timeout=CALL_TIMEOUT)
            )
            assert code == C.FAILED_PRECONDITION  # prepared twice
        await probe.abort()
        async with probe.stub() as stub:
            execute = stub.Execute(party_pb2.ExecuteRequest(run=probe.ref), timeout=CALL_TIMEOUT)
            assert await client.status_of(execute.read()) == C.FAILED_PRECONDITION  # after abort
    finally:
        await probe.abort()
    await assert_serving(deployment)


# -- identities --------------------------------------------------------------------------------


async def test_wrong_identity_is_permission_denied(deployment: Deployment) -> None:
    other = deployment.other
    if other is None:
        pytest.skip("needs another party's certificate (--other-cert/--other-key)")
    parties = await live.run_parties(deployment)
    async with live.coordinator(deployment, other) as stub:
        # Registering under another party's name.
        victim = next(n for n in parties if n != other.name)
        code = await client.status_of(
            stub.RegisterParty(
                coordinator_pb2.RegisterPartyRequest(name=victim, address="127.0.0.1:9"),
                timeout=CALL_TIMEOUT,
            )
        )
        assert code == C.PERMISSION_DENIED
        # Operator calls from a party identity.
        code = await client.status_of(
            stub.ListParties(coordinator_pb2.ListPartiesRequest(), timeout=CALL_TIMEOUT)
        )
        assert code == C.PERMISSION_DENIED
        msg = client.parameters_message(deployment.parameters)
        code = await client.status_of(
            stub.StartRun(coordinator_pb2.StartRunRequest(parameters=msg), timeout=CALL_TIMEOUT)
        )
        assert code == C.PERMISSION_DENIED
    # The registry still names the victim at its own address.
    assert (await live.registered(deployment))[victim] == parties[victim]
    # Coordinator-only calls from a party identity.
    name, address = next(iter(parties.items()))
    async with live.party(deployment, name, address, other) as stub:
        msg = client.parameters_message(deployment.parameters)
        req = party_pb2.ProposeRequest(
            run_id=client.new_run_id(),
            parameters=msg,
            parameters_digest=client.parameters_digest(msg),
        )
        assert (
            await client.status_of(stub.Propose(req, timeout=CALL_TIMEOUT)) == C.PERMISSION_DENIED
        )
    if deployment.probe is not None and deployment.acts_as_coordinator:
        async with prepared_probe(deployment) as probe:
            # A party that is not in the run pushing data into it.
            code = await probe.push_status("PushBlocks", [probe.blocks([5])], other)
            assert code == C.PERMISSION_DENIED
            # The probe claiming the target's own ring position (its certificate names another).
            code = await probe.push_status("PushBlocks", [probe.blocks([5], source=1)])
            assert code == C.PERMISSION_DENIED
            # Only the ring predecessor may pass the ring, only the initiator deliver results:
            # the probe is both here, so claim the target's index as source instead.
            ring = party_pb2.PassRingRequest(
                run=probe.ref, source=1, hop=1, total_rows=0, parties=2, rows=0
            )
            assert await probe.push_status("PassRing", [ring]) == C.PERMISSION_DENIED
            res = party_pb2.DeliverResultsRequest(
                run=probe.ref, source=1, target=1, total_rows=0, rows=0
            )
            assert await probe.push_status("DeliverResults", [res]) == C.PERMISSION_DENIED
            # After all that, the probe's own (valid) blocks are still accepted.
            resp = await probe.push("PushBlocks", [probe.blocks([5, 9])])
            assert resp.received == 2
    await assert_serving(deployment)


def _rogue_identity(folder: pathlib.Path, name: str) -> tuple[bytes, Identity]:
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "gen_certs.py"),
            "--out",
            str(folder),
            "--ca-name",
            "untrusted conformance CA",
            name,
        ],
        check=True,
        capture_output=True,
    )
    ident = Identity.load(
        (folder / f"{name}.pem").read_bytes(), (folder / f"{name}.key").read_bytes()
    )
    return (folder / "ca.pem").read_bytes(), ident


async def test_untrusted_ca_is_rejected(deployment: Deployment, tmp_path: pathlib.Path) -> None:
    """A client certificate from another CA (even naming a real node) never reaches a servicer:
    the TLS handshake fails and the client sees UNAVAILABLE. So does a client without certificate."""
    parties = await live.run_parties(deployment)
    name, address = next(iter(parties.items()))
    _, rogue = _rogue_identity(tmp_path / "rogue", deployment.coordinator_name)
    targets = [(deployment.coordinator_name, deployment.coordinator), (name, address)]
    for peer, addr in targets:
        for ident in (rogue, None):
            async with client.channel(addr, peer, deployment.ca, ident) as ch:
                code = await client.status_of(
                    health_pb2_grpc.HealthStub(ch).Check(
                        health_pb2.HealthCheckRequest(), timeout=5.0
                    )
                )
            assert code == C.UNAVAILABLE, (peer, ident is not None)
    # A server presenting a certificate from another CA is refused by a conforming client too.
    rogue_ca, _ = _rogue_identity(tmp_path / "rogue", name)
    async with client.channel(address, name, rogue_ca, deployment.operator) as ch:
        code = await client.status_of(
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5.0)
        )
    assert code == C.UNAVAILABLE
    await assert_serving(deployment)


# -- chunks ------------------------------------------------------------------------------------


async def test_malformed_and_oversized_chunks(deployment: Deployment) -> None:
    async with prepared_probe(deployment) as probe:
        ref = probe.ref
        seven_bytes = probe.blocks([1])
        seven_bytes.digests = b"\x01" * 7
        bad: dict[str, tuple[list[Any], grpc.StatusCode]] = {
            "not a multiple of 8 bytes": (
                [seven_bytes],
                C.INVALID_ARGUMENT,
            ),
            "total differs from the rows sent": (
                [probe.blocks([3, 4], total=3)],
                C.INVALID_ARGUMENT,
            ),
            "header changes between chunks": (
                [probe.blocks([3], total=2), probe.blocks([4], total=5)],
                C.INVALID_ARGUMENT,
            ),
            "unsorted digests": ([probe.blocks([9, 4])], C.INVALID_ARGUMENT),
            "zero digest": ([probe.blocks([0, 4])], C.INVALID_ARGUMENT),
            "empty stream": ([], C.INVALID_ARGUMENT),
            "message over 8 MiB": (
                [probe.blocks(np.arange(1, 9 * 2**17 + 1, dtype=np.uint64))],
                C.RESOURCE_EXHAUSTED,
            ),
        }
        for what, (chunks, want) in bad.items():
            assert await probe.push_status("PushBlocks", chunks) == want, what
        bits = probe.filter_bits // 2
        w = client.words_for(bits)
        share = party_pb2.PushShareRequest(
            run=ref,
            source=0,
            target=1,
            segment_bits=bits,
            total_rows=1,
            block_columns=probe.block_columns,
            rows=1,
            pseudonyms=client.u64([1]),
            block_positions=client.i32([0] * probe.block_columns),
            segments=client.u64([0] * (w + 1)),
        )
        assert await probe.push_status("PushShare", [share]) == C.INVALID_ARGUMENT
        ring = party_pb2.PassRingRequest(
            run=ref,
            source=0,
            hop=0,
            total_rows=1,
            parties=2,
            rows=1,
            candidates=client.u64([1]),
            c_masked=client.u64([0]),
            x_masked=client.u64([0]),
        )
        assert await probe.push_status("PassRing", [ring]) == C.INVALID_ARGUMENT
        # The node still accepts the well-formed message afterwards, exactly once.
        resp = await probe.push("PushBlocks", [probe.blocks([3]), probe.blocks([4])][:1])
        assert resp.received == 1
        assert await probe.push_status("PushBlocks", [probe.blocks([3])]) == C.ALREADY_EXISTS
    await assert_serving(deployment)


# -- a whole run against one real party: width, replays, ring arithmetic, results --------------


def _share_chunk(
    probe: live.Probe, pseud: np.ndarray, positions: np.ndarray, segs: np.ndarray, bits: int
) -> Any:
    return party_pb2.PushShareRequest(
        run=probe.ref,
        source=0,
        target=1,
        segment_bits=bits,
        total_rows=pseud.size,
        block_columns=positions.shape[1],
        rows=pseud.size,
        pseudonyms=client.u64(pseud),
        block_positions=client.i32(positions.ravel()),
        segments=client.u64(segs.ravel()),
    )


async def test_probe_run_wrong_width_replays_and_ring_arithmetic(deployment: Deployment) -> None:
    """The suite plays party 0 (ring initiator) of a 2-party run with one real party.

    Its records are crafted so the real party's additions are checkable without its data: for
    every common block one all-ones and one all-zeros filter. Then the real party's c_1 is 0 with
    the zeros record and popcount(its segment 1) with the ones record, and its x_1 (filter
    popcount) equals that plus the popcount of the segment 0 it sent us. Masks are chosen next to
    2^64 so the additions must wrap modulo 2^64.
    """
    live.require_probe(deployment)
    assert deployment.probe is not None
    servers = client.ProbeServer(deployment.ca, deployment.probe, deployment.probe_host)
    async with servers as server:
        probe = await live.new_probe(deployment, server.address)
        inbox = server.servicer.received
        l_bits = probe.filter_bits
        bits = l_bits // 2
        try:
            await probe.propose()
            prep = await probe.prepare()
            if not prep.allowed:
                pytest.skip(f"{probe.target} declined the probe run: {list(prep.reasons)}")
            async with probe.stub() as stub:
                execute = stub.Execute(party_pb2.ExecuteRequest(run=probe.ref), timeout=120.0)
                final: list[Any] = []

                async def follow() -> None:
                    async for msg in execute:
                        if msg.HasField("summary"):
                            final.append(msg)

                follower = asyncio.create_task(follow())
                # 1. Blocks: theirs arrive; ours echo them, so every block of theirs is common.
                theirs = await asyncio.wait_for(inbox.blocks.get(), 30)
                assert theirs.size > 0 and np.all(theirs[1:] > theirs[:-1]) and theirs[0] != 0
                resp = await probe.push("PushBlocks", [probe.blocks(theirs)])
                assert resp.received == theirs.size
                assert (
                    await probe.push_status("PushBlocks", [probe.blocks(theirs)])
                    == C.ALREADY_EXISTS
                )
                # 2. Their share of segment 0 arrives.
                share = await asyncio.wait_for(inbox.shares.get(), 30)
                assert (share["source"], share["target"], share["segment_bits"]) == (1, 0, bits)
                t_pseud = share["pseudonyms"]
                t_pos = share["block_positions"]  # in the common blocks: all of theirs, sorted
                t_seg0 = share["segments"]
                assert np.unique(t_pseud).size == t_pseud.size and np.all(t_pseud != 0)
                assert np.all((t_pos >= -1) & (t_pos < theirs.size))
                assert np.all(np.any(t_pos >= 0, axis=1))
                t_dig = np.where(t_pos >= 0, theirs[np.maximum(t_pos, 0)], np.uint64(0))
                # 3. Ours: per common block, an all-ones and an all-zeros record.
                b = t_pos.shape[1]
                n = 2 * theirs.size
                our_pseud = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(2**40 + 3)
                our_dig = np.zeros((n, b), dtype=np.uint64)
                our_dig[:, 0] = np.repeat(theirs, 2)
                our_pos = np.full((n, b), -1, dtype=np.int64)
                our_pos[:, 0] = np.repeat(np.arange(theirs.size), 2)
                ones = np.arange(n) % 2 == 0  # even rows all ones, odd rows all zeros
                segs = np.zeros((n, client.words_for(bits)), dtype=np.uint64)
                segs[ones] = client.ones_row(bits)
                wide = np.zeros((n, client.words_for(bits + 64)), dtype=np.uint64)
                code = await probe.push_status(
                    "PushShare", [_share_chunk(probe, our_pseud, our_pos, wide, bits + 64)]
                )
                assert code == C.INVALID_ARGUMENT  # wrong segment width
                resp = await probe.push(
                    "PushShare", [_share_chunk(probe, our_pseud, our_pos, segs, bits)]
                )
                assert resp.received == n
                code = await probe.push_status(
                    "PushShare", [_share_chunk(probe, our_pseud, our_pos, segs, bits)]
                )
                assert code == C.ALREADY_EXISTS  # replayed share
                # 4. Candidate sets: (ours, theirs) sharing a block; s_m = 0 keeps them all.
                pairs = set()
                for i in range(n):
                    d = our_dig[i, 0]
                    for j in np.flatnonzero(np.any(t_dig == d, axis=1)):
                        pairs.add((int(our_pseud[i]), int(t_pseud[j])))
                cand = np.array(sorted(pairs), dtype=np.uint64).reshape(-1, 2)
                m = cand.shape[0]
                mask_c = np.uint64(2**64 - 1) - np.arange(m, dtype=np.uint64)
                mask_x = np.uint64(2**64 - 7) - np.arange(m, dtype=np.uint64)
                row_of = {int(p): k for k, p in enumerate(t_pseud)}
                our_ones = {int(p): bool(o) for p, o in zip(our_pseud, ones, strict=True)}
                t_pc0 = client.popcount(t_seg0)
                c0 = np.array(
                    [t_pc0[row_of[int(t)]] if our_ones[int(o)] else 0 for o, t in cand],
                    dtype=np.uint64,
                )
                x0 = np.array([l_bits if our_ones[int(o)] else 0 for o, _ in cand], dtype=np.uint64)
                with np.errstate(over="ignore"):
                    c_masked, x_masked = mask_c + c0, mask_x + x0

                def ring(hop: int, rows: np.ndarray = cand) -> Any:
                    return party_pb2.PassRingRequest(
                        run=probe.ref,
                        source=0,
                        hop=hop,
                        total_rows=rows.shape[0],
                        parties=2,
                        rows=rows.shape[0],
                        candidates=client.u64(rows.ravel()),
                        c_masked=client.u64(c_masked[: rows.shape[0]]),
                        x_masked=client.u64(x_masked[: rows.shape[0]]),
                    )

                assert await probe.push_status("PassRing", [ring(1)]) == C.INVALID_ARGUMENT  # hop
                assert m >= 2, "the probe data set must give at least two candidate sets"
                unsorted = cand[::-1].copy()
                assert await probe.push_status("PassRing", [ring(0, unsorted)]) == (
                    C.INVALID_ARGUMENT
                ), "a ring whose candidate rows are not sorted and unique is malformed"
                resp = await probe.push("PassRing", [ring(0)])
                assert resp.received == m
                assert await probe.push_status("PassRing", [ring(0)]) == C.ALREADY_EXISTS
                # 5. Their hop 1 comes back to us, the initiator.
                back = await asyncio.wait_for(inbox.rings.get(), 30)
                assert (back["source"], back["hop"]) == (1, 1)
                assert np.array_equal(back["candidates"], cand)
                with np.errstate(over="ignore"):
                    c1 = back["c_masked"] - c_masked
                    x1 = back["x_masked"] - x_masked
                t_rows = [row_of[int(t)] for t in cand[:, 1]]
                is_ones = np.array([our_ones[int(o)] for o in cand[:, 0]])
                assert np.all(c1[~is_ones] == 0)
                assert np.all(c1 <= bits)
                x_of: dict[int, int] = {}
                for k, r in enumerate(t_rows):
                    assert x_of.setdefault(r, int(x1[k])) == int(x1[k])  # one x per record
                    if is_ones[k]:
                        assert int(c1[k]) + int(t_pc0[r]) == int(x1[k])
                # 6. Results: one matched set per distinct record of theirs paired with a ones row.
                first_of: dict[int, int] = {}
                for k in range(m):
                    if is_ones[k]:
                        first_of.setdefault(int(cand[k, 1]), k)
                chosen = sorted(first_of.values())
                sims = np.array(
                    [2 * (int(c0[k]) + int(c1[k])) / (l_bits + int(x1[k])) for k in chosen]
                )
                lids = np.arange(1, len(chosen) + 1, dtype=np.uint64)
                res = party_pb2.DeliverResultsRequest(
                    run=probe.ref,
                    source=0,
                    target=1,
                    total_rows=len(chosen),
                    rows=len(chosen),
                    linkage_ids=client.u64(lids),
                    similarities=sims.astype(client.F64).tobytes(),
                    pseudonyms=client.u64(cand[chosen, 1]),
                )
                resp = await probe.push("DeliverResults", [res])
                assert resp.received == len(chosen)
                await asyncio.wait_for(follower, 60)
                assert final, "Execute ended without a final message"
                last = final[-1]
                assert last.progress.stage == S.STAGE_DONE, last.reason
                assert last.summary.matches == len(chosen)
                # Out of order: the run is over.
                assert await probe.push_status("DeliverResults", [res]) == C.FAILED_PRECONDITION
                rows = deployment.result_rows(probe.target, probe.run_id)
                if rows is not None:
                    assert len(rows) == len(chosen)
                    assert sorted(float(r["similarity"]) for r in rows) == sorted(sims.tolist())
        finally:
            await probe.abort()
    await assert_serving(deployment)


async def test_start_run_rejections(deployment: Deployment) -> None:
    """Parameters a party finds invalid (l % P != 0) -> INVALID_ARGUMENT; a party that is not
    registered -> FAILED_PRECONDITION; the failed agreement is stored as a FAILED run."""
    params = json.loads(json.dumps(deployment.parameters))
    p = len(params["parties"])
    l_bits = int(params["schema"]["l"])
    params["schema"]["l"] = l_bits + 1 if l_bits % p == 0 else l_bits  # l % P != 0
    async with live.coordinator(deployment) as stub:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.StartRun(
                coordinator_pb2.StartRunRequest(parameters=client.parameters_message(params)),
                timeout=CALL_TIMEOUT,
            )
        assert err.value.code() == C.INVALID_ARGUMENT
        run_ids = re.findall(r"\b[0-9a-f]{32}\b", err.value.details() or "")
        assert run_ids, "the message names the failed run"
        status = await stub.GetRun(
            coordinator_pb2.GetRunRequest(run_id=run_ids[0]), timeout=CALL_TIMEOUT
        )
        assert status.status.stage == S.STAGE_FAILED and status.status.reason
        unknown = json.loads(json.dumps(deployment.parameters))
        unknown["parties"] = [*unknown["parties"][:-1], "not-registered-party"]
        code = await client.status_of(
            stub.StartRun(
                coordinator_pb2.StartRunRequest(parameters=client.parameters_message(unknown)),
                timeout=CALL_TIMEOUT,
            )
        )
        assert code == C.FAILED_PRECONDITION
    await assert_serving(deployment)


# -- trust boundaries: a party picks its own recipients and checks co-parties' keys itself -------


async def test_proposal_naming_the_coordinator_or_an_untrusted_party_is_refused(
    deployment: Deployment,
) -> None:
    """The coordinator redirect: parameters naming the coordinator's identity, or an identity the
    party has not agreed to, are refused at Propose (PERMISSION_DENIED) before anything leaves it."""
    probe = await live.new_probe(deployment)
    for outsider in (deployment.coordinator_name, "conformance-untrusted"):
        obj = live.probe_parameters(deployment, probe.target)
        obj["parties"] = [outsider, probe.target]
        msg = client.parameters_message(obj)
        req = party_pb2.ProposeRequest(
            run_id=client.new_run_id(),
            parameters=msg,
            parameters_digest=client.parameters_digest(msg),
            directory=[
                common_pb2.PartyAddress(name=outsider, address=deployment.coordinator),
                common_pb2.PartyAddress(name=probe.target, address=probe.address),
            ],
        )
        async with probe.stub() as stub:
            try:
                await stub.Propose(req, timeout=CALL_TIMEOUT)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == C.PERMISSION_DENIED, outsider
                assert re.search("trust|coordinator", exc.details() or ""), exc.details()
                assert len(exc.details() or "") < 300
            else:
                pytest.fail(f"{probe.target} accepted a run naming {outsider}")
            # Nothing was kept: the run is unknown to the party.
            ref = common_pb2.RunRef(run_id=req.run_id, parameters_digest=req.parameters_digest)
            code = await client.status_of(
                stub.Prepare(party_pb2.PrepareRequest(run=ref), timeout=CALL_TIMEOUT)
            )
            assert code == C.NOT_FOUND
    await assert_serving(deployment)


async def test_bad_target_parameters_are_refused_at_propose(deployment: Deployment) -> None:
    """Target any with m outside 2..P, an unknown target or an unknown solver: INVALID_ARGUMENT at
    Propose naming the field (docs/protocol.md section 2); nothing is kept, the node serves on."""
    probe = await live.new_probe(deployment)
    parties = len(live.probe_parameters(deployment, probe.target)["parties"])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"target": "any", "min_parties": parties + 1}, "min_parties"),
        ({"target": "any", "min_parties": 1}, "min_parties"),
        ({"target": "some"}, "target"),
        ({"target": "any", "solver": "hungarian"}, "solver"),
    ]
    for fields, word in cases:
        obj = live.probe_parameters(deployment, probe.target) | fields
        msg = client.parameters_message(obj)
        req = party_pb2.ProposeRequest()
        req.CopyFrom(probe.propose_request())
        req.run_id = client.new_run_id()
        req.parameters.CopyFrom(msg)
        req.parameters_digest = client.parameters_digest(msg)
        async with probe.stub() as stub:
            try:
                await stub.Propose(req, timeout=CALL_TIMEOUT)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == C.INVALID_ARGUMENT, (fields, exc.code())
                assert word in (exc.details() or ""), exc.details()
            else:
                pytest.fail(f"{probe.target} accepted {fields}")
            ref = common_pb2.RunRef(run_id=req.run_id, parameters_digest=req.parameters_digest)
            code = await client.status_of(
                stub.Prepare(party_pb2.PrepareRequest(run=ref), timeout=CALL_TIMEOUT)
            )
            assert code == C.NOT_FOUND
    await assert_serving(deployment)


async def test_co_party_key_confirmation_is_checked_party_to_party(deployment: Deployment) -> None:
    """A co-party whose first block-digest chunk lacks or carries a wrong key confirmation is
    refused (FAILED_PRECONDITION) and the run fails at the receiver, whatever the coordinator said."""
    for what, confirmation in (("missing", b""), ("wrong", b"\x00" * 32)):
        async with prepared_probe(deployment) as probe:
            chunk = probe.blocks([5, 9], confirm=False)
            chunk.key_confirmation = confirmation
            code = await probe.push_status("PushBlocks", [chunk])
            assert code == C.FAILED_PRECONDITION, what
            # The run failed at the target: even correctly confirmed data is no longer accepted.
            code = await probe.push_status("PushBlocks", [probe.blocks([5, 9])])
            assert code == C.FAILED_PRECONDITION, what
    async with prepared_probe(deployment) as probe:
        resp = await probe.push("PushBlocks", [probe.blocks([5, 9])])
        assert resp.received == 2
    await assert_serving(deployment)


# -- hostile input: undecodable, non-finite, deep, huge, forged addresses -------------------------


async def _details_of(call: Any) -> tuple[grpc.StatusCode, str]:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return C.OK, ""


def assert_no_traceback_logged(dep: Deployment) -> None:
    """A local deployment's nodes logged no traceback (hostile requests are not internal errors)."""
    if dep.cluster is None:
        return
    for name in ["coordinator", *dep.cluster.parties]:
        assert "Traceback" not in dep.cluster.log_text(name), name


def _short_and_value_free(details: str) -> bool:
    return len(details) < 300 and "Error" not in details and "\n" not in details


GARBAGE = b"\xff\xff\xff\xff\x0f"  # not a protobuf message of any type


async def test_undecodable_requests_are_invalid_argument(deployment: Deployment) -> None:
    """Undecodable bytes get INVALID_ARGUMENT with a short message naming the message type (not
    UNKNOWN with a Python exception class), on unary and streamed RPCs of both services."""
    async with client.channel(
        deployment.coordinator, deployment.coordinator_name, deployment.ca, deployment.operator
    ) as ch:
        for method in ("GetRun", "StartRun", "RegisterParty", "ListParties"):
            call = ch.unary_unary(f"/pprl.v1.Coordinator/{method}")(GARBAGE, timeout=CALL_TIMEOUT)
            code, details = await _details_of(call)
            assert code == C.INVALID_ARGUMENT, (method, code, details)
            assert "pprl.v1." in details and _short_and_value_free(details), details
        watch = ch.unary_stream("/pprl.v1.Coordinator/WatchRun")(GARBAGE, timeout=CALL_TIMEOUT)
        code, details = await _details_of(watch.read())
        assert code == C.INVALID_ARGUMENT and _short_and_value_free(details), details
    if deployment.acts_as_coordinator:
        for name, address in (await live.run_parties(deployment)).items():
            async with client.channel(address, name, deployment.ca, deployment.operator) as ch:
                call = ch.unary_unary("/pprl.v1.Party/Propose")(GARBAGE, timeout=CALL_TIMEOUT)
                code, details = await _details_of(call)
                assert code == C.INVALID_ARGUMENT and _short_and_value_free(details), details
    if deployment.probe is not None and deployment.acts_as_coordinator:
        async with (
            prepared_probe(deployment) as probe,
            client.channel(probe.address, probe.target, deployment.ca, deployment.probe) as ch,
        ):
            push = ch.stream_unary("/pprl.v1.Party/PushBlocks")
            code, details = await _details_of(
                push(client.stream_of([GARBAGE]), timeout=CALL_TIMEOUT)
            )
            assert code == C.INVALID_ARGUMENT and _short_and_value_free(details), details
    assert_no_traceback_logged(deployment)
    await assert_serving(deployment)


def _hostile_parameters(deployment: Deployment) -> dict[str, common_pb2.LinkageParameters]:
    def changed(**fields: Any) -> common_pb2.LinkageParameters:
        msg = client.parameters_message(deployment.parameters)
        for key, value in fields.items():
            if key == "parties":
                del msg.parties[:]
                msg.parties.extend(value)
            else:
                setattr(msg, key, value)
        return msg

    others = list(deployment.parameters["parties"])[1:]
    return {
        "NaN threshold": changed(match_threshold=float("nan")),
        "infinite threshold": changed(segment_threshold=float("inf")),
        "5,000-deep schema JSON": changed(schema_json="[" * 5000 + "]" * 5000),
        "NaN in the schema JSON": changed(schema_json='{"l": NaN}'),
        "a party name of 5,000 characters": changed(parties=["p" * 5000, *others]),
    }


async def test_non_finite_deep_or_huge_input_is_invalid_argument(deployment: Deployment) -> None:
    """NaN/inf/deeply nested parameters, an infinite timeout and a 7 MiB run id are refused with
    INVALID_ARGUMENT and a short message that does not echo them."""
    hostile = _hostile_parameters(deployment)
    async with live.coordinator(deployment) as stub:
        for what, msg in hostile.items():
            call = stub.StartRun(
                coordinator_pb2.StartRunRequest(parameters=msg), timeout=CALL_TIMEOUT
            )
            code, details = await _details_of(call)
            assert code == C.INVALID_ARGUMENT, (what, code, details)
            assert len(details) < 300 and "ppppp" not in details, (what, details)
        good = client.parameters_message(deployment.parameters)
        for timeout in (float("inf"), float("nan"), 1e300):
            call = stub.StartRun(
                coordinator_pb2.StartRunRequest(parameters=good, timeout_seconds=timeout),
                timeout=CALL_TIMEOUT,
            )
            code, details = await _details_of(call)
            assert code == C.INVALID_ARGUMENT and "timeout_seconds" in details, (timeout, details)
        huge = "f" * (7 * 2**20)
        for call in (
            stub.GetRun(coordinator_pb2.GetRunRequest(run_id=huge), timeout=CALL_TIMEOUT),
            stub.WatchRun(
                coordinator_pb2.WatchRunRequest(run_id=huge), timeout=CALL_TIMEOUT
            ).read(),
        ):
            code, details = await _details_of(call)
            assert code == C.INVALID_ARGUMENT and len(details) < 300, (code, details[:300])
    if deployment.acts_as_coordinator:
        name, address = next(iter((await live.run_parties(deployment)).items()))
        async with live.party(deployment, name, address) as stub:
            for what, msg in hostile.items():
                digest = "0" * 64
                req = party_pb2.ProposeRequest(
                    run_id=client.new_run_id(), parameters=msg, parameters_digest=digest
                )
                code, details = await _details_of(stub.Propose(req, timeout=CALL_TIMEOUT))
                assert code == C.INVALID_ARGUMENT, (what, code, details)
                assert len(details) < 300 and "ppppp" not in details, (what, details)
            code, details = await _details_of(
                stub.Abort(party_pb2.AbortRequest(run_id="f" * 2**20), timeout=CALL_TIMEOUT)
            )
            assert code == C.INVALID_ARGUMENT and len(details) < 300, details[:300]
    assert_no_traceback_logged(deployment)
    await assert_serving(deployment)


async def test_registration_refuses_forged_or_oversized_addresses(deployment: Deployment) -> None:
    """Addresses with a newline (a forged log line), path-like or 5 KB host names are refused with
    INVALID_ARGUMENT; the party's registered address is unchanged."""
    if deployment.other is None:
        pytest.skip("needs another party's identity (--other-cert/--other-key)")
    other = deployment.other
    before = await live.registered(deployment)
    async with live.coordinator(deployment, other) as stub:
        for address in (
            "127.0.0.1:5\ncoordinator: run 0 done",
            "127.0.0.1\n:80",
            "../../etc:80",
            "/etc/passwd:80",
            "h" * 5000 + ":80",
            "a." * 200 + "b:80",
            "[not-ipv6]:80",
            "127.0.0.1:0",
            "127.0.0.1:99999",
        ):
            call = stub.RegisterParty(
                coordinator_pb2.RegisterPartyRequest(name=other.name, address=address),
                timeout=CALL_TIMEOUT,
            )
            code, details = await _details_of(call)
            assert code == C.INVALID_ARGUMENT, (address[:40], code, details)
            assert len(details) < 200 and "etc" not in details and "hhh" not in details, details
        call = stub.RegisterParty(
            coordinator_pb2.RegisterPartyRequest(name="x" * 5000, address="127.0.0.1:80"),
            timeout=CALL_TIMEOUT,
        )
        code, details = await _details_of(call)
        assert code == C.INVALID_ARGUMENT and "xxx" not in details, details
    assert await live.registered(deployment) == before
    assert_no_traceback_logged(deployment)
    await assert_serving(deployment)
