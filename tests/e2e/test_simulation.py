"""End-to-end harness tests: in-process and networked simulations, and the scripts' command lines."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from party.synthetic import read_matches_csv
from party.synthetic.network_sim import canonical_sets, run_networked_simulation
from party.synthetic.simulation import SimulationConfig, run_in_process_simulation

ROOT = Path(__file__).resolve().parents[2]


def _sets(result):
    return canonical_sets([read_matches_csv(p) for p in result.matches_paths()])


def test_in_process_simulation_writes_report_and_matches_oracle_at_sm0(tmp_path):
    cfg = SimulationConfig(
        parties=3,
        records=300,
        corruption=0.2,
        seed=3,
        segment_threshold=0.0,
        oracle="full",
        out_dir=tmp_path / "sim",
    )
    r = run_in_process_simulation(cfg)
    # With s_m = 0 the protocol reproduces the plaintext oracle exactly.
    assert r.oracle_quality == r.quality
    assert r.quality.true_sets == 150
    assert 0.8 < r.quality.recall <= 1.0 and r.quality.precision > 0.9
    summary = json.loads(r.summary_path.read_text())
    assert summary["quality"]["f1"] == pytest.approx(r.quality.f1)
    assert len(summary["parties"]) == 3 and summary["parties"][0]["candidate_sets"] > 0
    assert "plaintext oracle" in r.report_path.read_text()
    lost = summary["totals"]["true_sets_lost_to_blocking"]
    kept = [b["true_sets_kept"] for b in summary["totals"]["blocking_passes"]]
    assert 0 <= lost < 150 and max(kept) <= 150 - lost and len(kept) > 1
    assert "## Blocking passes" in r.report_path.read_text()
    for path in r.matches_paths():
        with path.open() as fh:
            assert next(csv.reader(fh)) == ["linkage_id", "similarity", "record_id"]


def test_networked_and_in_process_give_identical_matches(tmp_path):
    # one_to_one off: its tie-breaks follow each run's random pseudonyms
    common: dict[str, Any] = dict(
        parties=3, records=150, corruption=0.2, seed=5, oracle="full", one_to_one=False
    )
    net = run_networked_simulation(
        SimulationConfig(**common, out_dir=tmp_path / "net"), timeout=120.0
    )
    inproc = run_in_process_simulation(SimulationConfig(**common, out_dir=tmp_path / "inproc"))
    assert net.totals["identical_to_in_process"] is True
    assert _sets(net) == _sets(inproc)
    assert len(_sets(net)) > 0
    assert net.quality == inproc.quality
    assert net.oracle_quality == inproc.oracle_quality
    # The nodes report their traffic and memory.
    for p in net.parties:
        assert p["bytes_sent"] > 0 and p["peak_memory_bytes"] > 0
    # The nodes' own comparison counts equal the in-process run's on the same inputs.
    keys = ("candidate_sets", "evaluated_per_stage", "survived_per_stage", "survivors", "rr_f")
    for p_net, p_in in zip(net.parties, inproc.parties, strict=True):
        assert p_net["candidate_sets"] > 0
        assert {k: p_net[k] for k in keys} == {k: p_in[k] for k in keys}, p_net["name"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=240
    )


def test_scripts_command_lines(tmp_path):
    out = tmp_path / "data"
    r = _run("scripts/gen_data.py", "--parties", "4", "--records", "50", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert (out / "party-3.csv").exists() and (out / "truth.csv").exists()
    # An external dataset folder runs through the simulation (in-process; P inferred: 4).
    r = _run(
        "scripts/simulate.py",
        "--in-process",
        "--target",
        "all",
        "--data",
        str(out),
        "--out",
        str(tmp_path / "s"),
    )
    assert r.returncode == 0, r.stderr
    assert "plaintext oracle" in r.stdout and "RR_f" in r.stdout
    assert "target all" in r.stdout and "P=4" in r.stdout
    assert (tmp_path / "s" / "report.md").exists()
    # The default (networked) mode with a relative --out, as scripts/demo.sh runs it.
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "simulate.py"), "--records", "80", "--out", "rel"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "target any (min_parties 2, solver guarded)" in r.stdout  # the shipped default
    assert "identical_to_in_process: True" in r.stdout
    with (tmp_path / "rel" / "results" / "party-2" / "matches.csv").open() as fh:
        assert next(csv.reader(fh))[-2:] == ["group_size", "parties"]
    r = _run("scripts/simulate.py", "--in-process", "--parties", "1", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "parties" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    # mpc3 has no segment filter: an explicit s_m is refused, not silently replaced by 0.
    r = _run("scripts/simulate.py", "--in-process", "--mode", "mpc3", "--s-m", "0.5")
    assert r.returncode == 2 and "--s-m does not apply in mode mpc3" in r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    r = _run("scripts/simulate.py", "--in-process", "--cluster", "local")
    assert r.returncode == 2 and "--cluster needs party nodes" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr


def test_sweep_tiny_grid(tmp_path):
    r = _run(
        "scripts/sweep.py",
        "--out",
        str(tmp_path / "sw"),
        "--parties",
        "3",
        "--records",
        "120",
        "--scale-records",
        "60",
        "120",
        "--corruption",
        "0.2",
        "--s-t",
        "0.75",
        "0.85",
        "--s-m",
        "0.6",
        "0.8",
        "--filter-records",
        "80",
    )
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader((tmp_path / "sw" / "sweep.csv").open()))
    assert {row["sweep"] for row in rows} == {"quality", "filter", "scale"}
    assert all(row["error"] == "" for row in rows)
    for png in ("f1_vs_st.png", "rrf_vs_sm.png", "runtime_vs_records.png"):
        assert (tmp_path / "sw" / png).stat().st_size > 1000
    assert "f1_vs_st.png" in (tmp_path / "sw" / "report.md").read_text()


@pytest.mark.parametrize("cluster", [[], ["--cluster", "local"]], ids=["threads", "dask"])
def test_simulate_target_any_networked_prints_scores_and_equals_the_oracle(tmp_path, cluster):
    """The nodes compare on their kernel threads, or (``--cluster local``) each on an embedded
    Dask cluster of its own: the oracle's groups either way."""
    r = _run(
        "scripts/simulate.py",
        *cluster,
        "--target",
        "any",
        "--parties",
        "3",
        "--records",
        "120",
        "--s-m",
        "0",
        "--seed",
        "2",
        "--out",
        str(tmp_path / "any"),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "pairwise" in r.stdout and "exact-group" in r.stdout and "F1" in r.stdout
    assert "oracle groups equal: True" in r.stdout
    assert "networked run" in r.stdout
    with (tmp_path / "any" / "results" / "party-0" / "matches.csv").open() as fh:
        header = next(csv.reader(fh))
    assert header == ["linkage_id", "similarity", "record_id", "group_size", "parties"]
    summary = json.loads((tmp_path / "any" / "summary.json").read_text())
    assert summary["pairwise"]["f1"] > 0.8
    assert all(n["candidate_pairs"] > 0 for n in summary["stats"]["nodes"].values())
    assert "identical_to_in_process: True" in r.stdout and "plaintext oracle" in r.stdout
    assert summary["oracle_groups"] == summary["groups"]
    assert summary["oracle_pairwise"] == summary["pairwise"]
    logs = [p.read_text() for p in sorted((tmp_path / "any" / "network").glob("party-*.log"))]
    assert len(logs) == 3
    assert all(("compared on 2 Dask workers" in text) == bool(cluster) for text in logs)


def test_simulate_mpc3_with_the_circuit_on_dask_workers_equals_the_oracle(tmp_path):
    """Mode mpc3, target any: each compute party evaluates its batches on an embedded Dask
    cluster of its own (``--cluster local``): the oracle's groups, as in process."""
    r = _run(
        "scripts/simulate.py",
        "--cluster",
        "local",
        "--mode",
        "mpc3",
        "--parties",
        "3",
        "--records",
        "150",
        "--seed",
        "4",
        "--out",
        str(tmp_path / "mpc"),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "mode mpc3" in r.stdout and "oracle groups equal: True" in r.stdout
    assert "identical_to_in_process: True" in r.stdout
    logs = [p.read_text() for p in sorted((tmp_path / "mpc" / "network").glob("party-*.log"))]
    assert len(logs) == 3 and all("circuit on 2 Dask workers" in text for text in logs)


@pytest.mark.parametrize(
    ("where", "parties"),
    [([], "3"), (["--in-process"], "3"), ([], "2")],
    ids=["net", "inproc", "net-p2"],
)
def test_simulate_target_any_in_mode_mpc3_equals_the_oracle(tmp_path, where, parties):
    """Target any in mode mpc3 (party.mpc.pairs), over real processes and in process; at P = 2 the
    helper compute node joins the networked run."""
    r = _run(
        "scripts/simulate.py",
        "--target",
        "any",
        "--mode",
        "mpc3",
        "--parties",
        parties,
        "--records",
        "120",
        "--seed",
        "2",
        *where,
        "--out",
        str(tmp_path / "any"),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "oracle groups equal: True" in r.stdout
    summary = json.loads((tmp_path / "any" / "summary.json").read_text())
    assert summary["pairwise"]["f1"] > 0.8
    assert summary["oracle_groups"] == summary["groups"]  # scores equal the oracle's
    if not where:
        assert "identical_to_in_process: True" in r.stdout
        assert "networked run" in r.stdout
        assert all(n["candidate_pairs"] > 0 for n in summary["stats"]["nodes"].values())
