"""Mode mpc3 over real processes with mutual TLS: results equal the plaintext oracle (P = 2 with a
helper compute node, 3, 5), no node sends filter bits or segments, a killed compute party fails
the run everywhere without partial results."""

from __future__ import annotations

import pathlib
import signal
import time
from typing import Any

import numpy as np
import pytest

from party.synthetic.cluster import SECRET, Cluster
from proto import common_pb2
from tests.integration.conftest import (
    expected_sets,
    network_sets,
    parameters,
    run_and_wait,
)

S = common_pb2.Stage


def mpc3_parameters(cluster: Cluster, name: str = "p-mpc3.json", **kw: Any) -> pathlib.Path:
    compute = [*cluster.parties, *cluster.helpers][:3] if cluster.helpers else []
    return parameters(
        cluster, name, mode="mpc3", compute_parties=compute, segment_threshold=0.0, **kw
    )


def test_three_parties_mpc3_equal_the_oracle(cluster3: Cluster) -> None:
    params = mpc3_parameters(cluster3, match_threshold=0.75)
    status = run_and_wait(cluster3, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_sets(cluster3, status.run_id)
    _, oracle = expected_sets(cluster3, params)
    assert got, "the generated data should produce matches"
    assert got == oracle  # same sets, same float similarities
    summaries = {s.party: s for s in status.summaries}
    for name in cluster3.parties:  # every party is a compute party at P = 3
        s = summaries[name]
        assert s.mpc_rounds > 0 and s.mpc_batches > 0 and s.mpc_and_gates > 0
        assert s.mpc_round_bytes > 0 and s.candidate_sets > 0
        assert set(s.stage_seconds) >= {"exchanging", "comparing", "summing"}
    assert len({s.candidate_sets for s in summaries.values()}) == 1
    assert len({s.mpc_round_bytes for s in summaries.values()}) == 1  # equal payloads at all CPs


def test_two_parties_with_a_helper_equal_the_oracle(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(2, 150, helpers=["helper"])
    params = mpc3_parameters(cluster, match_threshold=0.7, one_to_one=True)
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_sets(cluster, status.run_id)
    _, oracle = expected_sets(cluster, params)
    assert got and got == oracle
    helper = {s.party: s for s in status.summaries}["helper"]
    assert helper.mpc_rounds > 0 and helper.matches == 0 and helper.result_path == ""
    assert not (cluster.root / "results" / "helper").exists()


@pytest.mark.slow
def test_five_parties_mpc3_equal_the_oracle(make_cluster) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster(5, 100)
    params = mpc3_parameters(cluster, match_threshold=0.75)
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_sets(cluster, status.run_id)
    _, oracle = expected_sets(cluster, params)
    assert got and got == oracle
    rounds = {s.party: s.mpc_rounds for s in status.summaries}
    assert rounds["party-d"] == rounds["party-e"] == 0  # data parties only
    assert rounds["party-a"] > 0


def _filter_words(cluster: Cluster) -> np.ndarray:
    """Every distinctive 64-bit word of every party's filters and segments: >= 12 bits set and a
    value of at least 2^32. A segment's last, partial word can be a small number (0xb7b7), which a
    CI run found once by chance inside an array of numbers below 2^16 that a node sent; full words
    stay."""
    from party.encoding.bits import slice_bits
    from party.encoding.encoder import Encoder
    from party.encoding.schema import parse_schema

    schema = parse_schema(cluster.schema)
    l_bits = schema.output_bits
    p = len(cluster.parties)
    words = []
    for path in cluster.csvs:
        filters = Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")[0].filters
        words.append(filters.ravel())
        w = l_bits // p
        for j in range(p):
            words.append(slice_bits(filters, j * w, (j + 1) * w).ravel())
    allw = np.unique(np.concatenate(words))
    return allw[(np.bitwise_count(allw) >= 12) & (allw >= np.uint64(1 << 32))]


def _found(capture: bytes, needles: np.ndarray) -> int:
    """How many needles occur as 8 consecutive bytes anywhere (any alignment) in ``capture``."""
    hits = 0
    for shift in range(8):
        body = capture[shift:]
        body = body[: len(body) // 8 * 8]
        hits += int(np.isin(np.frombuffer(body, dtype="<u8"), needles).sum())
    return hits


@pytest.mark.slow
def test_no_node_sends_filter_bits_or_segments_in_mpc3(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Instrumented transport: every message every node sends (to peers and the coordinator) is
    recorded; no distinctive word of any filter or segment occurs in it. The same check on a
    segments run of the same deployment does find them (the check can fail)."""
    cluster = make_cluster(3, 150, start=False)
    for name, node in cluster.nodes.items():
        node.env["PPRL_TEST_CAPTURE_FILE"] = str(cluster.root / f"{name}.capture")
    cluster.start()
    needles = _filter_words(cluster)
    assert needles.size > 1000

    status = run_and_wait(cluster, mpc3_parameters(cluster))
    assert status.stage == S.STAGE_DONE, status.reason
    captures = {n: (cluster.root / f"{n}.capture").read_bytes() for n in cluster.parties}
    assert all(len(c) > 100_000 for c in captures.values())
    for name, capture in captures.items():
        assert _found(capture, needles) == 0, f"{name} sent filter or segment words"
        (cluster.root / f"{name}.capture").unlink()

    status = run_and_wait(cluster, parameters(cluster, "p-seg.json", segment_threshold=0.0))
    assert status.stage == S.STAGE_DONE, status.reason
    segments = (cluster.root / "party-a.capture").read_bytes()
    assert _found(segments, needles) > 100  # segments mode does send segments


def test_killed_compute_party_fails_the_run_everywhere(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL of a compute party mid-circuit: the run fails at every party, no results remain,
    the other nodes keep serving, and the next run succeeds once the node is back."""
    import asyncio

    cluster = make_cluster(3, 150, start=False)
    pause = cluster.root / "paused"
    cluster.nodes["party-a"].env.update(
        PPRL_TEST_PAUSE_AT="circuit", PPRL_TEST_PAUSE_FILE=str(pause)
    )
    cluster.start()
    params = mpc3_parameters(cluster)

    async def go() -> object:
        run_id = await cluster.start_run(params, 60)
        deadline = time.monotonic() + 60
        while not pause.exists():  # CP 0 reached the circuit and holds it there
            assert time.monotonic() < deadline, "party-a never reached the circuit"
            await asyncio.sleep(0.05)
        # CP 1 and CP 2 are inside the circuit, each waiting for a round.
        cluster.signal("party-b", signal.SIGKILL)
        return await cluster.wait_run(run_id, 90)

    status = asyncio.run(go())
    assert status.stage == S.STAGE_FAILED  # type: ignore[attr-defined]
    assert "party-b" in status.reason  # type: ignore[attr-defined]
    for name in cluster.parties:
        assert not cluster.result_dir(name, status.run_id).exists()  # type: ignore[attr-defined]
    for name in ("party-a", "party-c"):
        assert cluster.alive(name)
        assert asyncio.run(cluster.health(name)) == "SERVING"
    cluster.restart_party("party-b")
    status = run_and_wait(cluster, mpc3_parameters(cluster, "p-again.json"))
    assert status.stage == S.STAGE_DONE, status.reason
