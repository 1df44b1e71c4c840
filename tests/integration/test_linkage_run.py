"""End-to-end linkage over real processes: results equal the in-process driver and the oracle."""

from __future__ import annotations

import re

import pytest

from party.synthetic.cluster import Cluster
from proto import common_pb2
from tests.integration.conftest import expected_sets, network_sets, parameters, run_and_wait

S = common_pb2.Stage


def test_three_parties_via_cli_equal_in_process_and_oracle(cluster3: Cluster) -> None:
    params = parameters(cluster3, match_threshold=0.75, segment_threshold=0.0)
    proc = cluster3.run(params, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_id = re.search(r"run ([0-9a-f]{32}) agreed", proc.stdout).group(1)  # type: ignore[union-attr]
    assert "done" in proc.stdout
    got = network_sets(cluster3, run_id)
    inproc, oracle = expected_sets(cluster3, params)
    assert got, "the generated data should produce matches"
    assert got == inproc
    assert got == oracle
    for name in cluster3.parties:
        folder = cluster3.result_dir(name, run_id)
        assert sorted(p.name for p in folder.iterdir()) == ["matches.csv"]  # no temp file left
        header = (folder / "matches.csv").read_text().splitlines()[0]
        assert header == "linkage_id,similarity,record_id"


def test_coordinator_reports_stages_and_summaries(cluster3: Cluster) -> None:
    params = parameters(cluster3, name="p-filter.json", match_threshold=0.8, segment_threshold=0.7)
    status = run_and_wait(cluster3, params)
    assert status.stage == S.STAGE_DONE, status.reason
    assert [s.party for s in status.summaries] == cluster3.parties
    for s in status.summaries:
        assert s.bytes_sent > 0 and s.peak_rss_bytes > 0
        assert set(s.stage_seconds) >= {"exchanging", "comparing", "summing"}
    got = network_sets(cluster3, status.run_id)
    inproc, oracle = expected_sets(cluster3, params)
    assert got == inproc
    assert got <= oracle  # s_m > 0 may only lose matches


def test_no_plaintext_quasi_identifier_leaves_a_party(cluster3: Cluster) -> None:
    """Every byte party-a sent (to peers and the coordinator) is free of its QID values and ids."""
    import csv

    status = run_and_wait(cluster3, parameters(cluster3, name="p-capture.json"))
    assert status.stage == S.STAGE_DONE, status.reason
    capture = (cluster3.root / "party-a.capture").read_bytes()
    assert len(capture) > 10_000, "the capture hook recorded the party's traffic"
    with cluster3.csvs[0].open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    needles: set[str] = set()
    for row in rows:
        for col in ("rec_id", "given_name", "surname", "dob", "street_address", "suburb"):
            value = row.get(col, "")
            for v in {value, value.lower(), value.upper(), value.replace("-", "")}:
                if len(v) >= 6:
                    needles.add(v)
    assert len(needles) > 100
    lowered = capture.lower()
    leaked = [n for n in needles if n.lower().encode("utf-8") in lowered]
    assert not leaked, f"{len(leaked)} plaintext values found in party-a's traffic"


@pytest.mark.slow
def test_five_parties_equal_in_process_and_oracle(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(5, 120)
    params = parameters(cluster, match_threshold=0.75, segment_threshold=0.0)
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_sets(cluster, status.run_id)
    inproc, oracle = expected_sets(cluster, params)
    assert got and got == inproc == oracle


def test_run_state_survives_a_coordinator_restart(cluster3: Cluster) -> None:
    import asyncio

    from proto import coordinator_pb2, coordinator_pb2_grpc

    before = run_and_wait(cluster3, parameters(cluster3, name="p-restart.json"))
    assert before.stage == S.STAGE_DONE
    cluster3.stop("coordinator")
    cluster3.start_coordinator()

    async def get(run_id: str):  # type: ignore[no-untyped-def]
        sec = cluster3.security("coordinator")
        address = cluster3.coordinator.address
        async with sec.channel(address, "coordinator", ["pprl.v1.Coordinator"]) as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            resp = await stub.GetRun(coordinator_pb2.GetRunRequest(run_id=run_id), timeout=5)
        return resp.status

    after = asyncio.run(get(before.run_id))
    assert after.stage == S.STAGE_DONE
    assert [s.matches for s in after.summaries] == [s.matches for s in before.summaries]
    again = run_and_wait(cluster3, parameters(cluster3, name="p-restart2.json"))
    assert again.stage == S.STAGE_DONE, again.reason


def test_one_to_one_and_capped_blocks_over_the_network(cluster3: Cluster) -> None:
    """Options whose tie-breaks and sub-blocks follow the run's random pseudonyms: the result is
    a valid one-to-one subset of the unrestricted matches (exact equality needs equal pseudonyms)."""
    capped = parameters(cluster3, name="p-1to1.json", one_to_one=True, max_block_size=4)
    status = run_and_wait(cluster3, capped)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_sets(cluster3, status.run_id)
    assert got
    for j in range(len(cluster3.parties)):
        ids = [members[j] for members, _ in got]
        assert len(ids) == len(set(ids)), "a record is in two matched sets"
    unrestricted, _ = expected_sets(cluster3, parameters(cluster3, name="p-free.json"))
    assert got <= unrestricted
