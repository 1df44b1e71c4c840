"""A run's encoding waits for the node's warm-up (compiled loops, encoding lanes), so that the
two never share the cores; the wait is reported apart from the encoding (``wait.audited``); the
node reports the warm-up's end on its health service ``WARM_SERVICE``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from party.config import ClusterConfig
from party.node.node import Phase
from party.node.probe import WARM_SERVICE
from party.synthetic.cluster import PARTY_ENTRY, Cluster, write_parameters
from tests.integration.conftest import build_cluster
from tests.integration.inprocess import InProcessParties


async def test_prepare_waits_for_the_warm_up(tmp_path: pathlib.Path) -> None:
    cluster = build_cluster(tmp_path, 2, 60)
    params = write_parameters(
        tmp_path / "params.json", cluster.parties, cluster.schema, segment_threshold=0.0
    )
    parties = InProcessParties(cluster)
    await parties.start()
    try:
        nodes = list(parties.nodes.values())
        warmed = [asyncio.Event() for _ in nodes]
        for node, event in zip(nodes, warmed, strict=True):
            node.warmed = event
        preparing = asyncio.create_task(parties.propose_and_prepare(params))
        await asyncio.sleep(0.5)
        assert not preparing.done()
        (run,) = nodes[0].runs.values()  # the first party is prepared first
        assert run.phase is Phase.PREPARING
        assert "audited.encoding" not in run.stage_seconds  # not started
        warmed[1].set()  # already warm when its Prepare comes: no wait recorded
        warmed[0].set()
        ref = await preparing
        first, second = (node.runs[ref.run_id].stage_seconds for node in nodes)
        assert first["wait.audited"] > 0 and "audited.encoding" in first
        assert "wait.audited" not in second and "audited.encoding" in second
        summaries = await parties.execute(ref)
        assert all(s.reason == "" for s in summaries.values())
        # lanes ahead of a run: none for a CSV of one block, nor for a Dask cluster
        assert nodes[0].start_encoding_lanes() == 0
        nodes[0].config = dataclasses.replace(nodes[0].config, cluster=ClusterConfig())
        assert nodes[0].start_encoding_lanes() == 0
    finally:
        await parties.stop()


@pytest.mark.parametrize("fails", [False, True])
async def test_warm_service_reports_after_the_warm_up(
    monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    import party.node.warmup
    from party.node.server import _warm_up

    class Node:
        warmed = asyncio.Event()

        def start_encoding_lanes(self) -> int:
            return 0

    def warm_up() -> float:
        if fails:
            raise RuntimeError("no compiler")
        return 0.0

    monkeypatch.setattr(party.node.warmup, "warm_up", warm_up)
    node = Node()
    seen: list[bool] = []

    async def done() -> None:
        seen.append(node.warmed.is_set())

    await _warm_up(node, done)  # type: ignore[arg-type]
    assert seen == [True]  # reported once, after the run's event, failed warm-up or not


def test_health_cli_warm(cluster3: Cluster) -> None:
    cluster3.wait_warm(["party-a"])

    def health(*extra: str) -> Any:
        argv = [sys.executable, "-m", PARTY_ENTRY, "health", *extra]
        argv += ["--config", str(cluster3.nodes["party-a"].config)]
        return subprocess.run(
            argv, capture_output=True, text=True, cwd=cluster3.root, env=os.environ
        )

    for extra in ([], ["--warm"]):
        ok = health(*extra)
        assert ok.returncode == 0, ok.stderr
        assert "party-a: SERVING" in ok.stderr
    assert asyncio.run(cluster3.health("party-a", WARM_SERVICE)) == "SERVING"
    assert asyncio.run(cluster3.health("party-a", "pprl.v1.NoSuchService")).startswith(
        "UNREACHABLE: NOT_FOUND"
    )
