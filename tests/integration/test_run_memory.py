"""A node frees a run's bulk data when the run ends (done, aborted): many runs in one node leave
no buffered bytes in the node's buffer budget, no engine, block buffers or spill files, only the
runs' summaries. Nodes run in process (tests/integration/inprocess.py) so the budget is readable."""

from __future__ import annotations

import pathlib

import pytest

from party.node.node import PartyNode, Phase
from party.synthetic.cluster import write_parameters
from proto import party_pb2
from tests.integration.conftest import build_cluster
from tests.integration.inprocess import InProcessParties


def _assert_freed(node: PartyNode, run_id: str) -> None:
    run = node.runs[run_id]
    assert run.phase in (Phase.DONE, Phase.FAILED)
    assert node.budget.held(run_id) == 0, "a finished run still holds buffered bytes"
    assert run.engine is None and not run.blocks_in
    spill = node.config.results_dir / ".spill"
    assert not spill.exists() or not any(spill.iterdir()), "a finished run left spill files"


@pytest.mark.slow
async def test_finished_runs_hold_no_buffered_bytes(tmp_path: pathlib.Path) -> None:
    cluster = build_cluster(tmp_path, 2, 300)
    params = write_parameters(
        tmp_path / "params.json", cluster.parties, cluster.schema, segment_threshold=0.0
    )
    parties = InProcessParties(cluster)
    await parties.start()
    try:
        finished: list[str] = []
        for _ in range(6):
            ref = await parties.propose_and_prepare(params)
            summaries = await parties.execute(ref)
            assert all(s.reason == "" for s in summaries.values())
            assert all(s.summary.matches > 0 for s in summaries.values())
            finished.append(ref.run_id)
            for node in parties.nodes.values():
                for run_id in finished:
                    _assert_freed(node, run_id)
                assert node.runs[ref.run_id].comparison is not None  # the summary stays
        # A run aborted after Prepare, and one whose Execute the coordinator abandons, end too.
        ref = await parties.propose_and_prepare(params)
        for name in parties.nodes:
            await parties.stub(name).Abort(
                party_pb2.AbortRequest(run_id=ref.run_id, reason="test"), timeout=10
            )
        finished.append(ref.run_id)
        for node in parties.nodes.values():
            for run_id in finished:
                _assert_freed(node, run_id)
            assert node.budget.held_total() == 0
    finally:
        await parties.stop()
