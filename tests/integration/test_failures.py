"""Runs that must fail: a party killed or stalled mid-run, wrong secret, mismatched or invalid
parameters. Every failure names the party and stage, reaches every node, leaves no result file, the
other nodes keep serving, and a fresh run afterwards succeeds."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import signal
import time
from typing import Any

import grpc
import pytest

from party.synthetic.cluster import Cluster
from proto import common_pb2
from tests.integration.conftest import declined_run, parameters, run_and_wait

S = common_pb2.Stage


async def _wait_file(
    path: pathlib.Path, cluster: Cluster, name: str, timeout: float = 60.0
) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert cluster.alive(name), cluster.tail(cluster.nodes[name])
        assert time.monotonic() < deadline, f"{name} never reached its pause point"
        await asyncio.sleep(0.05)


def _run_with_fault(cluster: Cluster, victim: str, point: str, action: str) -> Any:
    """Start a run with ``victim`` pausing at ``point``, then SIGKILL or SIGSTOP it there."""
    pause = cluster.root / f"pause-{victim}-{point}-{action}"
    cluster.restart_party(victim, {"PPRL_TEST_PAUSE_AT": point, "PPRL_TEST_PAUSE_FILE": str(pause)})
    params = parameters(cluster, name=f"p-{point}-{action}.json")

    async def go():  # type: ignore[no-untyped-def]
        run_id = await cluster.start_run(params, 60.0)
        watch = asyncio.create_task(cluster.wait_run(run_id, 90.0))
        await _wait_file(pause, cluster, victim)
        cluster.signal(victim, signal.SIGKILL if action == "kill" else signal.SIGSTOP)
        return await watch

    return asyncio.run(go())


def _wait_log(cluster: Cluster, name: str, needle: str, timeout: float = 30.0) -> None:
    """Wait until ``name``'s log shows ``needle`` (the node's own record of the failure)."""
    deadline = time.monotonic() + timeout
    while needle not in cluster.log_text(name):
        assert time.monotonic() < deadline, f"{name} never logged: {needle}"
        time.sleep(0.05)


def _assert_failed_everywhere(cluster: Cluster, status, victim: str, stage: str) -> None:  # type: ignore[no-untyped-def]
    assert status.stage == S.STAGE_FAILED
    assert victim in status.reason and stage in status.reason, status.reason
    assert "timed out after" not in status.reason or victim in status.reason
    for name in cluster.parties:
        assert not cluster.result_dir(name, status.run_id).exists(), f"{name} left results"
        if name != victim:
            assert asyncio.run(cluster.health(name)) == "SERVING"
            _wait_log(cluster, name, f"run {status.run_id} failed: {status.reason}")


@pytest.mark.parametrize(("point", "stage"), [("exchange", "exchanging"), ("ring", "summing")])
def test_party_killed_mid_run_fails_everywhere_then_fresh_run_succeeds(
    cluster3: Cluster, point: str, stage: str
) -> None:
    status = _run_with_fault(cluster3, "party-b", point, "kill")
    _assert_failed_everywhere(cluster3, status, "party-b", stage)
    cluster3.restart_party("party-b")
    again = run_and_wait(cluster3, parameters(cluster3, name=f"p-after-{point}.json"))
    assert again.stage == S.STAGE_DONE, again.reason


def test_stalled_party_fails_the_run_and_recovers_without_restart(cluster3: Cluster) -> None:
    status = _run_with_fault(cluster3, "party-c", "compare", "stop")
    try:
        _assert_failed_everywhere(cluster3, status, "party-c", "comparing")
        assert "stopped responding" in status.reason or "timed out" in status.reason
    finally:
        cluster3.signal("party-c", signal.SIGCONT)
    cluster3.wait_healthy(cluster3.nodes["party-c"])
    again = run_and_wait(cluster3, parameters(cluster3, name="p-after-stop.json"))
    assert again.stage == S.STAGE_DONE, again.reason


async def _start_expecting_error(cluster: Cluster, params: pathlib.Path) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await cluster.start_run(params, 30.0)
    return err.value


def test_wrong_secret_fails_key_confirmation_naming_the_party(cluster3: Cluster) -> None:
    other = cluster3.root / "other-secret.key"
    other.write_text(os.urandom(32).hex())  # raw bytes ending in "\n" would be read as 31 bytes
    cluster3.restart_party("party-c", {"PPRL_SECRET_FILE": str(other)})
    try:
        proc = cluster3.run(parameters(cluster3, name="p-secret.json"), timeout=30)
        assert proc.returncode == 2
        assert "FAILED_PRECONDITION" in proc.stderr
        assert "key confirmation failed: party-c" in proc.stderr
        assert "party-a, party-b" in proc.stderr
        assert other.read_bytes().hex() not in proc.stderr + proc.stdout
    finally:
        cluster3.restart_party("party-c")


def test_pinned_schema_mismatch_is_rejected(cluster3: Cluster) -> None:
    pinned = cluster3.root / "pinned-schema.json"
    schema = dict(cluster3.schema)
    schema["l"] = 1023
    pinned.write_text(json.dumps(schema))
    cluster3.restart_party("party-a", {"PPRL_SCHEMA": str(pinned)})
    try:
        err = asyncio.run(_start_expecting_error(cluster3, parameters(cluster3, name="p-pin.json")))
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "party-a rejected the parameters" in (err.details() or "")
        assert "pinned" in (err.details() or "")
    finally:
        cluster3.restart_party("party-a")


def test_filter_length_not_divisible_by_parties_is_invalid(cluster3: Cluster) -> None:
    schema = dict(cluster3.schema)
    schema["l"] = 1024
    path = cluster3.root / "p-1024.json"
    path.write_text(
        json.dumps(
            {
                "parties": cluster3.parties,
                "schema": schema,
                "match_threshold": 0.8,
                "segment_threshold": 0.0,
            }
        )
    )
    err = asyncio.run(_start_expecting_error(cluster3, path))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = err.details() or ""
    assert "l=1024" in details and "P=3" in details, details
    assert "rejected the parameters" in details


def test_self_audit_decline_fails_the_run_with_the_reason(cluster3: Cluster) -> None:
    cluster3.set_extra_toml("party-b", "[audit.policy]\nmax_alone_in_block = 0.0\n")
    cluster3.restart_party("party-b")
    try:
        out, run_id = declined_run(cluster3, "p-audit.json", "party-b")
        assert "alone in their block" in out
        for name in cluster3.parties:
            if name != "party-b":
                _wait_log(cluster3, name, f"run {run_id} aborted: party-b declined")
    finally:
        cluster3.set_extra_toml("party-b", "")
        cluster3.restart_party("party-b")


def test_invalid_audit_policy_stops_the_node_at_start(cluster3: Cluster) -> None:
    import subprocess
    import sys

    from party.synthetic.cluster import PARTY_ENTRY

    node = cluster3.nodes["party-c"]
    bad = cluster3.root / "bad-policy.toml"
    bad.write_text(node.config.read_text() + "[audit.policy]\nmax_everything = 2\n")
    proc = subprocess.run(
        [sys.executable, "-m", PARTY_ENTRY, "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        cwd=cluster3.root,
        timeout=60,
        env={**__import__("os").environ, "PPRL_COORDINATOR": cluster3.coordinator.address},
    )
    assert proc.returncode == 2
    assert "max_everything" in proc.stderr and "Traceback" not in proc.stderr


def test_coordinator_killed_mid_run_fails_the_run_on_every_node(cluster3: Cluster) -> None:
    pause = cluster3.root / "pause-coordinator-kill"
    cluster3.restart_party(
        "party-b", {"PPRL_TEST_PAUSE_AT": "compare", "PPRL_TEST_PAUSE_FILE": str(pause)}
    )
    params = parameters(cluster3, name="p-coord-kill.json")

    async def start() -> str:
        run_id = await cluster3.start_run(params, 60.0)
        await _wait_file(pause, cluster3, "party-b")
        return run_id

    run_id = asyncio.run(start())
    cluster3.signal("coordinator", signal.SIGKILL)
    for name in cluster3.parties:  # every party drops the run when its Execute stream breaks
        _wait_log(cluster3, name, f"run {run_id} failed")
        assert not cluster3.result_dir(name, run_id).exists()
    cluster3.start_coordinator()

    async def get() -> Any:
        from proto import coordinator_pb2, coordinator_pb2_grpc

        sec = cluster3.security("coordinator")
        async with sec.channel(
            cluster3.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
        ) as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            return (
                await stub.GetRun(coordinator_pb2.GetRunRequest(run_id=run_id), timeout=5)
            ).status

    status = asyncio.run(get())
    assert status.stage == S.STAGE_FAILED
    assert status.reason.startswith("the coordinator restarted while the run was"), status.reason
    again = run_and_wait(cluster3, parameters(cluster3, name="p-after-coord-kill.json"))
    assert again.stage == S.STAGE_DONE, again.reason
