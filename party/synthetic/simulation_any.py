"""Simulations of target "any" (in-process): subset data, the protocol, the oracle, matches.csv, scores.

``run_any_simulation(cfg, ...)`` generates entities at random subsets of the parties
(``party.synthetic.subsets``; ``single`` = share at one party only) or loads ``cfg.data_dir``,
encodes them with the simulation schema, runs the protocol of target any in-process (segments,
or mpc3: ``party.mpc.pairs``), writes each party's matches.csv with the columns of
MATCHES_ANY_HEADER, and scores the groups (pairwise and exact-group P/R/F1). With s_m = 0 it also checks the groups against the independent
plaintext oracle (``party.protocol.oracle_any``) and reports whether they are equal.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from party.encoding.schema import LinkageSchema
from party.protocol.any_driver import AnyRun, AnyRunStats, GroupRow
from party.protocol.driver import run_in_process
from party.protocol.oracle_any import oracle_groups, oracle_pairs
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable
from party.protocol.solver import DEFAULT_SOLVER
from party.synthetic.external import load_folder
from party.synthetic.generator import write_dataset
from party.synthetic.metrics_any import AnyQuality, evaluate_groups
from party.synthetic.simulation import (
    SimulationConfig,
    encode_parties,
    load_schema_for,
    matches_path,
    protocol_parameters,
    simulation_secret,
)
from party.synthetic.subsets import generate_subsets

#: matches.csv of target any: one row per group this party's record is in (parties joined by ';').
MATCHES_ANY_HEADER = ("linkage_id", "similarity", "record_id", "group_size", "parties")


@dataclass
class AnyTarget:
    """The target-any settings of a simulation (the rest is the SimulationConfig)."""

    min_parties: int = 2
    solver: str = DEFAULT_SOLVER
    single: float = 0.3  # generated data: share of entities at one party only


@dataclass
class AnySimulationResult:
    quality: AnyQuality
    oracle_equal: bool | None  # None: not checked (s_m > 0)
    stats: dict[str, Any]
    seconds: dict[str, float]
    out_dir: Path
    oracle_quality: AnyQuality | None = None  # the plaintext oracle's groups, scored (s_m = 0)
    identical_to_in_process: bool | None = None  # networked: groups equal an in-process run's


@dataclass
class AnyOutcome:
    """What a simulation reads from an in-process run of target any: per party its group rows,
    each party's pseudonyms (the run's tie-breaks) and the run's counts."""

    matches: list[list[GroupRow]]
    pseudonyms: list[np.ndarray]
    stats: AnyRunStats


def run_any_protocol(tables: Sequence[EncodedTable], params: ProtocolParameters) -> AnyOutcome:
    """The in-process protocol of target any in the run's mode: mpc3, or segments through the
    party engines and the streamed ring (``party.protocol.driver``: the nodes' code, whose
    survivors, ring rows and matched pairs spill beyond the budget, so all pairs of two parties'
    records in one block fit in memory)."""
    if params.mode == "mpc3":
        from party.mpc.pairs import run_mpc3_any_in_process

        run: AnyRun = run_mpc3_any_in_process(tables, params)
        return AnyOutcome(run.matches, run.pseudonyms, run.stats)
    engines = run_in_process(tables, params)
    m = engines.metrics
    matches = [[r for r in rows if isinstance(r, GroupRow)] for rows in engines.matches]
    stats = AnyRunStats(
        # as party 0's engine counts them: a pair in several blocks once per block
        candidate_pairs=m.comparison[0].candidate_sets if m.comparison else 0,
        pairs_summed=m.sets_summed,
        matched_pairs=m.above_threshold,
        groups=len({r.linkage_id for rows in matches for r in rows}),
    )
    return AnyOutcome(matches, engines.pseudonyms, stats)


def run_oracle_groups(
    tables: Sequence[EncodedTable], params: ProtocolParameters, run: AnyOutcome
) -> list[list[tuple[int, str]]]:
    """The plaintext oracle's groups as (party, record id) lists, ties broken by ``run``'s
    pseudonyms (as the protocol breaks them)."""
    want = oracle_groups(
        oracle_pairs(tables, params),
        params.min_parties,
        params.solver,
        run.pseudonyms,
        params.match_threshold,
        parties=params.party_count,
    )
    return [sorted((p, tables[p].record_ids[row]) for p, row in g.members) for g in want]


def write_any_matches_csv(path: Path, rows: list[GroupRow]) -> None:
    """One party's matches.csv for target any."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(MATCHES_ANY_HEADER)
        w.writerows(
            (r.linkage_id, repr(r.similarity), r.record_id, r.group_size, ";".join(r.parties))
            for r in rows
        )


def any_data(cfg: SimulationConfig, target: AnyTarget) -> tuple[list[Path], Any, str]:
    """(party CSVs, truth, id column): ``cfg.data_dir`` loaded, or subset entities generated."""
    if cfg.data_dir is not None:
        ext = load_folder(cfg.data_dir, party_files=cfg.party_files, truth_file=cfg.truth_file)
        return list(ext.data_files), ext.truth, cfg.id_column
    ds = generate_subsets(
        cfg.parties,
        cfg.records,
        target.single,
        cfg.corruption,
        cfg.seed,
        households=cfg.households,
    )
    return write_dataset(ds, cfg.out_dir / "data"), ds.truth, "rec_id"


def any_parameters(
    cfg: SimulationConfig, schema: LinkageSchema, target: AnyTarget
) -> ProtocolParameters:
    """The protocol parameters of a simulation of target any: those of target all (budget, mode,
    compute parties) with the target's fields; one-to-one does not apply to groups."""
    return replace(
        protocol_parameters(cfg, schema),
        one_to_one=False,
        target="any",
        min_parties=target.min_parties,
        solver=target.solver,
    )


def run_any_simulation(cfg: SimulationConfig, target: AnyTarget) -> AnySimulationResult:
    """One in-process simulation of target any (see the module docstring)."""
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    paths, truth, id_column = any_data(cfg, target)
    seconds["generate"] = time.perf_counter() - t0
    schema, _, _ = load_schema_for(cfg.schema_path, cfg.parties)
    t0 = time.perf_counter()
    tables, _ = encode_parties(schema, simulation_secret(cfg.seed), paths, id_column)
    seconds["encode"] = time.perf_counter() - t0
    params = any_parameters(cfg, schema, target)
    t0 = time.perf_counter()
    run = run_any_protocol(tables, params)
    seconds["protocol"] = time.perf_counter() - t0
    for p, rows in enumerate(run.matches):
        write_any_matches_csv(matches_path(cfg.out_dir, p), rows)
    groups: dict[str, list[tuple[int, str]]] = {}
    for p, rows in enumerate(run.matches):
        for r in rows:
            groups.setdefault(r.linkage_id, []).append((p, r.record_id))
    quality = evaluate_groups(list(groups.values()), truth, target.min_parties)
    oracle_equal = None
    oracle_quality = None
    if params.segment_threshold == 0 and params.max_block_size is None:
        t0 = time.perf_counter()
        want = run_oracle_groups(tables, params, run)
        seconds["oracle"] = time.perf_counter() - t0
        oracle_equal = sorted(want) == sorted(sorted(g) for g in groups.values())
        oracle_quality = evaluate_groups(want, truth, target.min_parties)
    stats = vars(run.stats) | {"group_sizes": _sizes(run.matches)}
    return any_result(
        cfg, target, quality, oracle_equal, stats, seconds, oracle_quality=oracle_quality
    )


def any_result(
    cfg: SimulationConfig,
    target: AnyTarget,
    quality: AnyQuality,
    oracle_equal: bool | None,
    stats: dict[str, Any],
    seconds: dict[str, float],
    *,
    oracle_quality: AnyQuality | None = None,
    identical_to_in_process: bool | None = None,
) -> AnySimulationResult:
    """Write ``summary.json`` of a simulation of target any and return its result."""
    summary = {
        "config": {k: str(v) for k, v in vars(cfg).items()} | vars(target),
        "target": "any",
        "pairwise": vars(quality.pairwise),
        "groups": vars(quality.groups),
        "oracle_equal": oracle_equal,
        "oracle_pairwise": None if oracle_quality is None else vars(oracle_quality.pairwise),
        "oracle_groups": None if oracle_quality is None else vars(oracle_quality.groups),
        "identical_to_in_process": identical_to_in_process,
        "stats": stats,
        "seconds": seconds,
    }
    (cfg.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return AnySimulationResult(
        quality,
        oracle_equal,
        stats,
        seconds,
        cfg.out_dir,
        oracle_quality=oracle_quality,
        identical_to_in_process=identical_to_in_process,
    )


def _sizes(matches: list[list[GroupRow]]) -> dict[int, int]:
    seen: dict[str, int] = {}
    for rows in matches:
        for r in rows:
            seen[r.linkage_id] = r.group_size
    out: dict[int, int] = {}
    for size in seen.values():
        out[size] = out.get(size, 0) + 1
    return dict(sorted(out.items()))
