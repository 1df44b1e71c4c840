"""Trust boundaries and operations of live nodes (issue 15): messages attributed to the stream's
certificate identity, registration that a second process cannot hijack, start-up checks."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import pathlib
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from typing import Any

import grpc

from party.synthetic.cluster import Cluster
from proto import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    linkage,
    party_pb2,
    party_pb2_grpc,
)
from tests.integration.conftest import parameters, run_and_wait
from tests.x509_factory import issue

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
    # Parties paused while the coordinator comes back, so no heartbeat can beat the assertion.
    for name in cluster.parties:
        cluster.signal(name, signal.SIGSTOP)
    try:
        cluster.start_coordinator({"PPRL_LISTEN": f"127.0.0.1:{port}"})
        assert asyncio.run(cluster._list_parties()) == {}
    finally:
        for name in cluster.parties:
            cluster.signal(name, signal.SIGCONT)
    cluster.wait_registered(cluster.parties, timeout=20.0)
    status = run_and_wait(cluster, parameters(cluster, name="p-reregistered.json"))
    assert status.stage == S.STAGE_DONE, status.reason


def _latest_run(cluster: Cluster, after: float) -> tuple[str, int, str] | None:
    """(run id, stage, reason) of the newest run created after ``after`` (coordinator's store)."""
    db = sqlite3.connect(f"file:{cluster.root / 'state' / 'coordinator.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute(
            "SELECT run_id, stage, reason FROM runs WHERE created_at > ? "
            "ORDER BY created_at DESC LIMIT 1",
            (after,),
        ).fetchone()
    finally:
        db.close()
    return None if row is None else (str(row[0]), int(row[1]), str(row[2]))


def test_start_run_abandoned_by_its_caller_fails_with_a_reason(cluster3: Cluster) -> None:
    """party-b is stopped, so agreement hangs; the operator's StartRun deadline passes. The run is
    FAILED with a reason naming what it waited for (not CREATED forever with no reason), and the
    parties that accepted the proposal are told to abort it."""
    params = linkage.load_parameters(parameters(cluster3, name="p-abandoned.json"))
    t0 = time.time()
    cluster3.signal("party-b", signal.SIGSTOP)
    try:

        async def start() -> grpc.StatusCode:
            sec = cluster3.security("coordinator")
            async with sec.channel(
                cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
            ) as ch:
                try:
                    await coordinator_pb2_grpc.CoordinatorStub(ch).StartRun(
                        coordinator_pb2.StartRunRequest(parameters=params), timeout=3.0
                    )
                except grpc.aio.AioRpcError as exc:
                    return exc.code()
            return grpc.StatusCode.OK

        assert asyncio.run(start()) == grpc.StatusCode.DEADLINE_EXCEEDED
        deadline = time.monotonic() + 15
        while True:
            run = _latest_run(cluster3, t0)
            if run is not None and run[1] == S.STAGE_FAILED:
                break
            assert time.monotonic() < deadline, f"run left as {run}"
            time.sleep(0.1)
        run_id, _, reason = run
        assert "cancelled by its caller" in reason and "party-b" in reason, reason
        for name in ("party-a", "party-c"):
            _wait_log(cluster3, name, f"run {run_id} aborted: the StartRun call was cancelled")
    finally:
        cluster3.signal("party-b", signal.SIGCONT)
    cluster3.wait_healthy(cluster3.nodes["party-b"])
    again = run_and_wait(cluster3, parameters(cluster3, name="p-after-abandoned.json"))
    assert again.stage == S.STAGE_DONE, again.reason


def test_a_coordinator_stall_is_not_blamed_on_a_healthy_party(cluster3: Cluster) -> None:
    """The coordinator is SIGSTOPped for longer than its liveness timeout (6 s) while every party
    is healthy (party-a paused at compare, heartbeating): no party is blamed for the silence."""
    pause = cluster3.root / "pause-stall"
    cluster3.restart_party(
        "party-a", {"PPRL_TEST_PAUSE_AT": "compare", "PPRL_TEST_PAUSE_FILE": str(pause)}
    )
    params = parameters(cluster3, name="p-stall.json")
    try:

        async def go() -> Any:
            run_id = await cluster3.start_run(params, 90.0)
            deadline = time.monotonic() + 60
            while not pause.exists():
                assert time.monotonic() < deadline, "party-a never paused"
                await asyncio.sleep(0.05)
            cluster3.signal("coordinator", signal.SIGSTOP)
            try:
                await asyncio.sleep(10.0)
            finally:
                cluster3.signal("coordinator", signal.SIGCONT)
            await asyncio.sleep(3.0)  # several liveness checks after the stall
            return await _get_run(cluster3, run_id)

        status = asyncio.run(go())
        if status.stage == S.STAGE_FAILED:  # only acceptable if it names the coordinator
            assert status.reason.startswith("the coordinator stalled"), status.reason
        else:
            assert status.stage == S.STAGE_COMPARING, status
    finally:
        cluster3.restart_party("party-a")  # ends the paused run
    again = run_and_wait(cluster3, parameters(cluster3, name="p-after-stall.json"))
    assert again.stage == S.STAGE_DONE, again.reason


async def _get_run(cluster: Cluster, run_id: str) -> Any:
    sec = cluster.security("coordinator")
    async with sec.channel(
        cluster.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
    ) as ch:
        resp = await coordinator_pb2_grpc.CoordinatorStub(ch).GetRun(
            coordinator_pb2.GetRunRequest(run_id=run_id), timeout=10
        )
    return resp.status


def _wait_log(cluster: Cluster, name: str, needle: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while needle not in cluster.log_text(name):
        assert time.monotonic() < deadline, f"{name} never logged: {needle}"
        time.sleep(0.1)


def test_start_up_problems_stop_the_node_with_one_clear_message(
    cluster3: Cluster, tmp_path: pathlib.Path
) -> None:
    """Each broken deployment stops `serve` at once: exit status 2, a message naming the key and
    file, no traceback (nodes started in parallel as real processes)."""
    certs = cluster3.certs
    now = dt.datetime.now(dt.UTC)
    expired = issue(
        certs,
        tmp_path,
        "expired",
        ["party-a"],
        dns_name="party-a",
        not_before=now - dt.timedelta(days=3),
        not_after=now - dt.timedelta(days=1),
    )
    future = issue(
        certs,
        tmp_path,
        "future",
        ["party-a"],
        dns_name="party-a",
        not_before=now + dt.timedelta(days=1),
        not_after=now + dt.timedelta(days=3),
    )
    garbage = tmp_path / "garbage.pem"
    garbage.write_text(
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )
    passphrase = tmp_path / "passphrase.key"
    passphrase.write_text("correct horse battery staple, long enough to pass 32\n")
    bad_toml = tmp_path / "latin1.toml"
    bad_toml.write_bytes(cluster3.nodes["party-a"].config.read_bytes() + b"\n# caf\xe9\n")
    not_sqlite = tmp_path / "state.txt"
    not_sqlite.write_text("this is not a database\n")
    busy = cluster3.nodes["party-b"].address
    party_cfg = cluster3.nodes["party-a"].config
    coord_cfg = cluster3.coordinator.config
    cases: dict[str, tuple[str, pathlib.Path, dict[str, str], list[str]]] = {
        "port in use": ("party", party_cfg, {"PPRL_LISTEN": busy}, ["node.listen", busy]),
        "unresolvable host": (
            "party",
            party_cfg,
            {"PPRL_LISTEN": "no-such-host.invalid:0"},
            ["node.listen", "resolved"],
        ),
        "garbage certificate": (
            "party",
            party_cfg,
            {"PPRL_TLS_CERT": str(garbage)},
            ["tls.cert", str(garbage)],
        ),
        "key of another certificate": (
            "party",
            party_cfg,
            {"PPRL_TLS_KEY": str(certs / "party-b.key")},
            ["tls.key", "party-b.key", "not the private key"],
        ),
        "expired certificate": (
            "party",
            party_cfg,
            {"PPRL_TLS_CERT": str(expired[0]), "PPRL_TLS_KEY": str(expired[1])},
            ["tls.cert", "expired.pem", "expired on"],
        ),
        "not yet valid certificate": (
            "party",
            party_cfg,
            {"PPRL_TLS_CERT": str(future[0]), "PPRL_TLS_KEY": str(future[1])},
            ["tls.cert", "future.pem", "not valid yet"],
        ),
        "certificate of another name": (
            "party",
            party_cfg,
            {
                "PPRL_TLS_CERT": str(certs / "party-b.pem"),
                "PPRL_TLS_KEY": str(certs / "party-b.key"),
            },
            ["tls.cert", "party-b.pem", "not issued to this node's name party-a"],
        ),
        "passphrase secret": (
            "party",
            party_cfg,
            {"PPRL_SECRET_FILE": str(passphrase)},
            ["passphrase.key", "passphrase", "32 random bytes"],
        ),
        "TOML not UTF-8": ("party", bad_toml, {}, ["latin1.toml", "not UTF-8"]),
        "state_db a directory": (
            "coordinator",
            coord_cfg,
            {"PPRL_STATE_DB": str(tmp_path)},
            ["coordinator.state_db", "is a directory"],
        ),
        "state_db not SQLite": (
            "coordinator",
            coord_cfg,
            {"PPRL_STATE_DB": str(not_sqlite)},
            ["coordinator.state_db", "state.txt", "not an SQLite database"],
        ),
        "coordinator port in use": (
            "coordinator",
            coord_cfg,
            {"PPRL_LISTEN": busy, "PPRL_STATE_DB": str(tmp_path / "s.db")},
            ["coordinator.listen", busy],
        ),
    }
    procs: dict[str, subprocess.Popen[str]] = {}
    for what, (kind, cfg, env, _) in cases.items():
        module = "party.cli" if kind == "party" else "coordinator.cli"
        full_env = {
            **os.environ,
            "PPRL_PORT_FILE": str(tmp_path / f"{len(procs)}.port"),
            "PPRL_COORDINATOR": cluster3.coordinator.address,
            **env,
        }
        procs[what] = subprocess.Popen(
            [sys.executable, "-m", module, "serve", "--config", str(cfg)],
            cwd=cluster3.root,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    failures = []
    for what, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            failures.append(f"{what}: still running")
            continue
        text = out + err
        words = cases[what][3]
        if proc.returncode != 2 or "Traceback" in text or not all(w in text for w in words):
            failures.append(f"{what}: exit {proc.returncode}: {text[-600:]}")
    assert not failures, "\n".join(failures)
    assert asyncio.run(cluster3.health("party-b")) == "SERVING"


def test_a_proposal_without_prepare_expires_at_the_party(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """A party that accepted a proposal (its coordinator then gave up or lost it) fails the run
    after its stage timeout instead of keeping it PROPOSED."""
    cluster = make_cluster(2, 20, stage_timeout=2.0)
    msg = linkage.load_parameters(parameters(cluster, name="p-expire.json"))
    digest = linkage.parameters_digest(msg)
    run_id = uuid.uuid4().hex
    directory = [
        common_pb2.PartyAddress(name=n, address=cluster.nodes[n].address) for n in cluster.parties
    ]

    async def go() -> grpc.StatusCode:
        sec = cluster.security("coordinator")
        async with sec.channel(
            cluster.nodes["party-a"].address, "party-a", ["pprl.v1.Party"]
        ) as ch:
            stub = party_pb2_grpc.PartyStub(ch)
            await stub.Propose(
                party_pb2.ProposeRequest(
                    run_id=run_id, parameters=msg, parameters_digest=digest, directory=directory
                ),
                timeout=10,
            )
            await asyncio.sleep(3.0)
            ref = common_pb2.RunRef(run_id=run_id, parameters_digest=digest)
            try:
                await stub.Prepare(party_pb2.PrepareRequest(run=ref), timeout=10)
            except grpc.aio.AioRpcError as exc:
                return exc.code()
        return grpc.StatusCode.OK

    assert asyncio.run(go()) == grpc.StatusCode.FAILED_PRECONDITION
    _wait_log(cluster, "party-a", f"run {run_id} aborted: the proposal expired at party-a")
