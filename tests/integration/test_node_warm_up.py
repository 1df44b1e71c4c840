"""A run's encoding waits for the node's warm-up (compiled loops, encoding lanes), so that the
two never share the cores; the wait is reported apart from the encoding (``wait.audited``)."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib

from party.config import ClusterConfig
from party.node.node import Phase
from party.synthetic.cluster import write_parameters
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
