"""Networked simulation of target "any": subset data, real party processes (mutual TLS), scored groups.

``run_any_networked(cfg, target)`` generates entities at random subsets of the parties (or loads
``cfg.data_dir``) like the in-process simulation (``party.synthetic.simulation_any``), starts a
coordinator and P party nodes on loopback (``party.synthetic.network_sim.run_on_cluster``), runs
one linkage of target any (mode segments or mpc3), reads every party's matches.csv, scores the groups
(pairwise and exact-group P/R/F1) and, with s_m = 0, no cap and ``reference``, checks them against
the independent plaintext oracle (``party.protocol.oracle_any``). Output folder as the in-process
simulation (``results/party-<i>/matches.csv``, ``summary.json``) plus ``network/`` (node logs).
"""

from __future__ import annotations

import csv
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from party.protocol.any_driver import GroupRow
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable
from party.synthetic.metrics_any import evaluate_groups
from party.synthetic.network_sim import parameters_object, run_on_cluster
from party.synthetic.simulation import (
    Progress,
    SimulationConfig,
    compute_parties,
    encode_parties,
    load_schema_for,
    matches_path,
    party_name,
    simulation_secret,
)
from party.synthetic.simulation_any import (
    AnySimulationResult,
    AnyTarget,
    any_data,
    any_parameters,
    any_result,
    run_any_protocol,
    run_oracle_groups,
    write_any_matches_csv,
)

GroupSet = set[tuple[tuple[tuple[int, str], ...], float]]


def read_group_rows(path: Path) -> list[GroupRow]:
    """One party's matches.csv of target any as GroupRows."""
    with path.open(encoding="utf-8", newline="") as fh:
        return [
            GroupRow(
                r["linkage_id"],
                float(r["similarity"]),
                r["record_id"],
                int(r["group_size"]),
                tuple(r["parties"].split(";")),
            )
            for r in csv.DictReader(fh)
        ]


def oracle_group_set(
    tables: Sequence[EncodedTable], params: ProtocolParameters, draws: int = 3
) -> GroupSet | None:
    """The oracle's groups as ((party, record id), ...), similarity), or None when they depend on
    how ties of equal Dice are broken (the solver breaks them by the run's secret pseudonyms, so
    the oracle is evaluated with ``draws`` random key assignments)."""
    from party.protocol.oracle_any import oracle_groups, oracle_pairs

    pairs = oracle_pairs(tables, params)
    rng = np.random.default_rng(0)
    found: list[GroupSet] = []
    for _ in range(draws):
        keys = [rng.permutation(len(t.record_ids)) + 1 for t in tables]
        groups = oracle_groups(
            pairs,
            params.min_parties,
            params.solver,
            keys,
            params.match_threshold,
            parties=params.party_count,
        )
        found.append(
            {
                (tuple((q, tables[q].record_ids[row]) for q, row in g.members), g.similarity)
                for g in groups
            }
        )
    return found[0] if all(f == found[0] for f in found) else None


def run_any_networked(
    cfg: SimulationConfig,
    target: AnyTarget,
    progress: Progress | None = None,
    *,
    timeout: float = 1800.0,
    reference: bool = True,
) -> AnySimulationResult:
    """One networked simulation of target any (see the module docstring)."""
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    schema, schema_obj, note = load_schema_for(cfg.schema_path, cfg.parties)
    params = any_parameters(cfg, schema, target)  # validates before any process starts
    t0 = time.perf_counter()
    paths, truth, id_column = any_data(cfg, target)
    seconds["generate"] = time.perf_counter() - t0
    obj = parameters_object(cfg, schema_obj) | {
        "target": "any",
        "min_parties": target.min_parties,
        "solver": target.solver,
    }
    names = [party_name(i) for i in range(cfg.parties)]
    cluster, run_id, final, steps = run_on_cluster(
        cfg,
        paths,
        id_column,
        schema_obj,
        obj,
        progress,
        timeout=timeout,
        helpers=[c for c in compute_parties(cfg) if c not in names],  # mpc3 at P = 2: the helper
    )
    seconds.update(steps)
    groups: dict[str, list[tuple[int, str]]] = {}
    sims: dict[str, float] = {}
    for p in range(cfg.parties):
        rows = read_group_rows(cluster.result_dir(party_name(p), run_id) / "matches.csv")
        write_any_matches_csv(matches_path(cfg.out_dir, p), rows)
        for r in rows:
            groups.setdefault(r.linkage_id, []).append((p, r.record_id))
            sims[r.linkage_id] = r.similarity
    quality = evaluate_groups(list(groups.values()), truth, target.min_parties)
    oracle_equal: bool | None = None
    oracle_quality = None
    identical: bool | None = None
    if reference:
        # The same CSVs, schema and secret encoded here and run in process: the networked groups
        # (members and similarity) must be the same.
        t0 = time.perf_counter()
        tables, _ = encode_parties(schema, simulation_secret(cfg.seed), paths, id_column)
        local = run_any_protocol(tables, params)
        got = {(tuple(sorted(ms)), sims[lid]) for lid, ms in groups.items()}
        identical = got == _group_set(local.matches)
        seconds["reference: in-process protocol"] = time.perf_counter() - t0
        if params.segment_threshold == 0 and params.max_block_size is None:
            t0 = time.perf_counter()
            want = oracle_group_set(tables, params)
            if want is not None:
                oracle_equal = got == want
            oracle_quality = evaluate_groups(
                run_oracle_groups(tables, params, local), truth, target.min_parties
            )
            seconds["oracle"] = time.perf_counter() - t0
    nodes: dict[str, Any] = {
        s.party: {
            "candidate_pairs": int(s.candidate_sets),
            "pairs_kept": int(s.survivors),
            "bytes_sent": int(s.bytes_sent),
            "peak_rss_bytes": int(s.peak_rss_bytes),
            "stage_seconds": dict(s.stage_seconds),
        }
        for s in final.summaries
    }
    stats: dict[str, Any] = {
        "run_id": run_id,
        "groups": len(groups),
        "group_sizes": dict(sorted(Counter(len(ms) for ms in groups.values()).items())),
        "nodes": nodes,
        "note": note,
    }
    return any_result(
        cfg,
        target,
        quality,
        oracle_equal,
        stats,
        seconds,
        oracle_quality=oracle_quality,
        identical_to_in_process=identical,
    )


def _group_set(matches: Sequence[Sequence[GroupRow]]) -> GroupSet:
    """Groups of per-party rows as ((party, record id), ...), similarity), ids ignored."""
    groups: dict[str, list[tuple[int, str]]] = {}
    sims: dict[str, float] = {}
    for p, rows in enumerate(matches):
        for r in rows:
            groups.setdefault(r.linkage_id, []).append((p, r.record_id))
            sims[r.linkage_id] = r.similarity
    return {(tuple(sorted(ms)), sims[lid]) for lid, ms in groups.items()}
