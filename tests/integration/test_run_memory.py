"""A node frees a run's bulk data when the run ends (done, aborted): many runs in one node leave
no buffered bytes in the node's buffer budget, no engine, block buffers or spill files, only the
runs' summaries. Nodes run in process (tests/integration/inprocess.py) so the budget is readable."""

from __future__ import annotations

import json
import pathlib

import pytest

from party.node.node import PartyNode, Phase
from party.synthetic.cluster import ROOT, write_parameters
from proto import party_pb2
from tests.integration.conftest import build_cluster, expected_sets, network_sets
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


@pytest.mark.slow
async def test_a_networked_run_that_spills_equals_the_in_process_run_and_the_oracle(
    tmp_path: pathlib.Path,
) -> None:
    schema = json.loads((ROOT / "examples" / "schema.json").read_text(encoding="utf-8"))
    schema["l"] = 1020
    # one coarse blocking key (first postcode digit): ~10 blocks, ~10^5 candidate sets at P = 3
    schema["blocking"] = [
        {
            "name": "postcode1",
            "parts": [{"field": "postcode", "function": "postcode_prefix", "length": 1}],
        }
    ]
    cluster = build_cluster(tmp_path, 3, 150, schema=schema)
    params = write_parameters(
        tmp_path / "params.json",
        cluster.parties,
        cluster.schema,
        match_threshold=0.6,
        segment_threshold=0.0,
    )
    # a 4 MiB budget (room for 1 MiB wire chunks) keeps 1 MiB of rows per run in memory:
    # survivors (~300,000 sets, 9 MiB), masks, ring and matches spill
    parties = InProcessParties(cluster, budget_mib=4)
    await parties.start()
    try:
        ref = await parties.propose_and_prepare(params)
        summaries = await parties.execute(ref)
        assert all(s.reason == "" for s in summaries.values()), summaries
        for node in parties.nodes.values():
            stats = node.runs[ref.run_id].comparison
            assert stats is not None and stats.survivors > 32_768
            assert stats.spilled_bytes > 0
            _assert_freed(node, ref.run_id)
    finally:
        await parties.stop()
    inproc, oracle = expected_sets(cluster, params)
    got = network_sets(cluster, ref.run_id)
    assert got == inproc == oracle
    assert len(got) > 20
