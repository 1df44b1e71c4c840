"""The simulation harness core: data -> encodings -> linkage (in-process or networked) -> quality report.

One simulation: generate a synthetic dataset (or load an external one), encode every party's CSV with
the linkage schema and the shared secret, run the protocol, evaluate every party's matches against
the ground truth, evaluate the plaintext oracle on the same encodings, and write a results folder:

    <out>/data/party-<i>.csv, truth.csv, dataset.json     (generated data; absent for external data)
    <out>/schema.json                                      (the schema used, l adjusted to P if needed)
    <out>/results/party-<i>/matches.csv                    (linkage_id,similarity,record_id)
    <out>/summary.json                                     (every number the harness prints)
    <out>/report.md                                        (the same, for people)

The in-process mode calls `party.protocol.driver.run_in_process`; the networked mode
(`party.synthetic.network_sim`) launches real party and coordinator processes and reuses the data
preparation, oracle and reporting here. The secret of a simulation is derived from its seed
(SHA-256 of a fixed label and the seed) so runs are reproducible; it is a test secret, not one to
protect real data with.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from party.encoding.bits import words_for
from party.encoding.encoder import Encoder, EncodeReport
from party.encoding.records import EncodedRecords
from party.encoding.schema import LinkageSchema, parse_schema
from party.errors import PprlError
from party.protocol.params import DEFAULT_SEGMENT_MARGIN, ProtocolParameters
from party.synthetic.blocking_recall import blocking_recall
from party.synthetic.external import load_folder, party_files_in
from party.synthetic.generator import generate, write_dataset
from party.synthetic.metrics import LinkageQuality, evaluate, evaluate_sets
from party.synthetic.truth import GroundTruth

log = logging.getLogger(__name__)

# Above this many candidate sets, the full plaintext oracle (which materialises every candidate set
# with its full filters) is replaced by a protocol run with s_m = 0, which the engine's property
# tests show equal to the oracle exactly, and which is memory-bounded.
ORACLE_FULL_LIMIT = 3_000_000

Progress = Callable[[str, int, int], None]  # (stage, done, total)


class SimulationError(PprlError):
    """A simulation that cannot run as configured."""


@dataclass
class SimulationConfig:
    parties: int = 3
    records: int = 1000
    overlap: float = 0.5
    corruption: float = 0.2
    seed: int = 0
    match_threshold: float = 0.8
    segment_threshold: float | None = None  # None: s_t - DEFAULT_SEGMENT_MARGIN
    one_to_one: bool = True
    max_block_size: int | None = None
    memory_budget_mib: int = (
        3072  # as PartyConfig's default; the engine's memory budget per party (ProtocolParameters)
    )
    schema_path: Path | None = None  # None: the shipped party/synthetic/data/schema.json
    data_dir: Path | None = None  # external dataset folder (party CSVs + a truth CSV)
    party_files: tuple[str, ...] | None = None  # names in data_dir, in party order (None: found)
    truth_file: str = "truth.csv"
    truth_columns: tuple[str, str, str] = ("entity_id", "party", "rec_id")
    households: float = 0.0  # generated data: share of people living in households
    id_column: str = "rec_id"
    out_dir: Path = Path("results/simulation")
    oracle: str = "auto"  # "auto" | "full" | "sm0" | "none"
    mode: str = "segments"  # "segments" | "mpc3" (three-party computation; s_m is 0 there)
    cluster: str | None = None  # networked: "local" puts every node on an embedded Dask cluster

    @property
    def s_m(self) -> float:
        if self.mode == "mpc3":
            return 0.0
        if self.segment_threshold is not None:
            return self.segment_threshold
        return max(0.0, round(self.match_threshold - DEFAULT_SEGMENT_MARGIN, 6))


@dataclass
class PreparedData:
    paths: list[Path]
    truth: GroundTruth
    id_column: str
    generated: bool
    seconds: float


@dataclass
class SimulationResult:
    mode: str
    config: SimulationConfig
    quality: LinkageQuality
    oracle_quality: LinkageQuality | None
    oracle_method: str
    steps: dict[str, float]  # wall seconds per step
    parties: list[dict[str, Any]]  # per party: records, blocks, candidate sets, RR_f, bytes, memory
    totals: dict[str, Any]
    out_dir: Path
    notes: list[str] = field(default_factory=list)
    # mode mpc3, networked: per compute party what its node reported (PartySummary mpc fields)
    mpc_summaries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def report_path(self) -> Path:
        return self.out_dir / "report.md"

    @property
    def summary_path(self) -> Path:
        return self.out_dir / "summary.json"

    def matches_paths(self) -> list[Path]:
        return [matches_path(self.out_dir, p) for p in range(self.config.parties)]


def add_data_arguments(ap: argparse.ArgumentParser) -> None:
    """The options that choose a simulation's data (shared by scripts/simulate.py and sweep.py)."""
    ap.add_argument(
        "--data",
        type=Path,
        default=None,
        help="external dataset folder (party-<i>.csv and truth.csv, or any CSV names)",
    )
    ap.add_argument(
        "--party-files",
        nargs="+",
        default=None,
        help="party CSV names in --data, in party order (default: party-<i>.csv, else every "
        "CSV but the truth file, by name)",
    )
    ap.add_argument("--truth", default="truth.csv", help="truth file in --data (or a path)")
    ap.add_argument(
        "--truth-columns",
        nargs=3,
        default=["entity_id", "party", "rec_id"],
        metavar=("ENTITY", "PARTY", "RECORD"),
        help="the truth file's entity, party and record-id columns",
    )
    ap.add_argument("--id-column", default="rec_id", help="record id column of the party files")
    ap.add_argument(
        "--households",
        type=float,
        default=0.0,
        help="generated data: share of people living in households (shared surname, address)",
    )
    ap.add_argument(
        "--one-to-one",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="greedy one-to-one resolution (default on)",
    )


def data_config(args: argparse.Namespace) -> dict[str, Any]:
    """SimulationConfig keywords from the options of add_data_arguments."""
    return {
        "data_dir": args.data,
        "party_files": tuple(args.party_files) if args.party_files else None,
        "truth_file": args.truth,
        "truth_columns": tuple(args.truth_columns),
        "id_column": args.id_column,
        "households": args.households,
        "one_to_one": args.one_to_one,
    }


def count_parties(args: argparse.Namespace, default: int = 3) -> int:
    """P of an external dataset (its party files), else ``default``."""
    if args.data is None:
        return default
    return len(party_files_in(args.data, args.party_files, args.truth))


def party_name(index: int) -> str:
    """The name of party `index` in simulations: party-a, party-b, ... (valid certificate names)."""
    if not 0 <= index < 26:
        raise SimulationError("simulations support at most 26 parties")
    return f"party-{chr(ord('a') + index)}"


def matches_path(out_dir: Path, party: int) -> Path:
    return out_dir / "results" / f"party-{party}" / "matches.csv"


def simulation_secret(seed: int) -> bytes:
    """The reproducible test secret of a simulation (not for real data)."""
    return hashlib.sha256(b"pprl-simulation-secret/v1:" + str(seed).encode()).digest()


def default_schema_path() -> Path:
    return Path(str(resources.files("party.synthetic").joinpath("data", "schema.json")))


def load_schema_for(path: Path | None, parties: int) -> tuple[LinkageSchema, dict[str, Any], str]:
    """Load the schema and, if its output length is not divisible by P, raise l to the next l that is.

    Returns (schema, the JSON object actually used, a note ("" when unchanged)).
    """
    path = path or default_schema_path()
    try:
        obj = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise SimulationError(f"cannot read schema {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise SimulationError(f"schema {path} is not valid JSON (line {exc.lineno})") from exc
    schema = parse_schema(obj, str(path))
    if schema.output_bits % parties == 0:
        return schema, obj, ""
    base = int(obj.get("l", schema.filter_bits))
    for l_new in range(base + 1, base + 8 * parties + 8):
        trial = dict(obj, l=l_new)
        try:
            s = parse_schema(trial, str(path))
        except PprlError:
            continue
        if s.output_bits % parties == 0:
            note = (
                f"schema l raised from {base} to {l_new} so that the filter length "
                f"({s.output_bits}) is divisible by P={parties}"
            )
            return s, trial, note
    raise SimulationError(f"no filter length near l={base} is divisible by P={parties}")


def prepare_data(cfg: SimulationConfig, progress: Progress | None = None) -> PreparedData:
    """Generate (and write) the dataset, or load the external one; returns CSV paths + truth."""
    t0 = time.perf_counter()
    if cfg.data_dir is not None:
        ext = load_folder(
            cfg.data_dir,
            party_files=cfg.party_files,
            truth_file=cfg.truth_file,
            id_column=cfg.id_column,
            truth_columns=cfg.truth_columns,
        )
        if ext.parties != cfg.parties:
            raise SimulationError(
                f"{cfg.data_dir} holds {ext.parties} party files, but parties={cfg.parties}"
            )
        return PreparedData(
            list(ext.data_files), ext.truth, cfg.id_column, False, time.perf_counter() - t0
        )
    if progress:
        progress("generate", 0, 1)
    ds = generate(
        cfg.parties,
        cfg.records,
        overlap=cfg.overlap,
        corruption=cfg.corruption,
        seed=cfg.seed,
        households=cfg.households,
    )
    paths = write_dataset(ds, cfg.out_dir / "data")
    if progress:
        progress("generate", 1, 1)
    return PreparedData(paths, ds.truth, "rec_id", True, time.perf_counter() - t0)


def encode_parties(
    schema: LinkageSchema,
    secret: bytes,
    paths: Sequence[Path],
    id_column: str,
    progress: Progress | None = None,
) -> tuple[list[EncodedRecords], list[EncodeReport]]:
    """Encode every party's CSV (as each party node does with the agreed schema and secret)."""
    tables, reports = [], []
    for p, path in enumerate(paths):
        encoder = Encoder(schema, secret)

        def cb(rows: int, p: int = p) -> None:
            if progress:
                progress(f"encode party {p}", rows, 0)

        records, report = encoder.encode_csv(path, id_column=id_column, progress=cb)
        tables.append(records)
        reports.append(report)
    return tables, reports


#: The helper compute node of mpc3 simulations with two parties (it holds no data).
HELPER_NAME = "helper"


def compute_parties(cfg: SimulationConfig) -> tuple[str, ...]:
    """mpc3: the compute parties (the default, first three parties, as ``()``; with two parties
    both parties and the helper); () in mode segments."""
    if cfg.mode != "mpc3" or cfg.parties >= 3:
        return ()
    return (*(party_name(i) for i in range(cfg.parties)), HELPER_NAME)


def protocol_parameters(cfg: SimulationConfig, schema: LinkageSchema) -> ProtocolParameters:
    return ProtocolParameters(
        parties=tuple(party_name(i) for i in range(cfg.parties)),
        filter_bits=schema.output_bits,
        match_threshold=cfg.match_threshold,
        segment_threshold=cfg.s_m,
        one_to_one=cfg.one_to_one,
        max_block_size=cfg.max_block_size,
        memory_budget_bytes=cfg.memory_budget_mib * 2**20,
        mode=cfg.mode,
        compute_parties=compute_parties(cfg),
        target="all",  # this module simulates target all; simulation_any overrides it
    )


def run_protocol_in_process(
    tables: Sequence[EncodedRecords],
    params: ProtocolParameters,
    progress: Callable[[int, int, int], None] | None = None,
) -> Any:
    """The in-process driver of the run's mode (both return party.protocol.driver.InProcessRun)."""
    if params.mode == "mpc3":
        from party.mpc.driver import run_mpc3_in_process

        return run_mpc3_in_process(tables, params)
    from party.protocol.driver import run_in_process

    return run_in_process(tables, params, progress=progress)


def coarse_schema_path() -> Path:
    """A schema whose one blocking key (year of birth + state) makes large blocks (filter sweeps)."""
    return Path(str(resources.files("party.synthetic").joinpath("data", "schema_coarse.json")))


def oracle_quality(
    tables: Sequence[EncodedRecords],
    params: ProtocolParameters,
    truth: GroundTruth,
    method: str,
    keys: Sequence[np.ndarray] | None,
    candidate_sets: int,
) -> tuple[LinkageQuality | None, str]:
    """Quality of the plaintext oracle on the same encodings; method auto/full/sm0/none."""
    from party.protocol.driver import run_in_process
    from party.protocol.oracle import oracle_matches

    if method == "none":
        return None, "not computed (--oracle none)"
    if method == "auto":
        method = "full" if candidate_sets <= ORACLE_FULL_LIMIT else "sm0"
    if method == "full":
        om = oracle_matches(tables, params, keys)
        ids = [t.record_ids for t in tables]
        sets = ([(p, ids[p][i]) for p, i in enumerate(m.records)] for m in om)
        return evaluate_sets(sets, truth), "full plaintext oracle (party.protocol.oracle)"
    if method == "sm0":
        # With s_m = 0 every candidate set survives: give the engine room to keep them all (it
        # keeps at most a quarter of its budget as survivors, 8 * (P + 1) bytes each).
        need = int(4 * 8 * (params.party_count + 1) * candidate_sets * 1.05) + 2**20
        sm0 = ProtocolParameters(
            parties=params.parties,
            filter_bits=params.filter_bits,
            match_threshold=params.match_threshold,
            segment_threshold=0.0,
            one_to_one=params.one_to_one,
            max_block_size=params.max_block_size,
            memory_budget_bytes=max(params.memory_budget_bytes, need),
            target="all",
        )
        run = run_in_process(tables, sm0)
        return (
            evaluate(run.matches, truth),
            "protocol run with s_m = 0 (equal to the plaintext oracle by the engine's tests)",
        )
    raise SimulationError(f"unknown oracle method {method!r} (auto, full, sm0, none)")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def write_matches_csv(path: Path, rows: Sequence[Any]) -> None:
    """Write matches in the node's results format (similarity with repr, atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["linkage_id", "similarity", "record_id"])
        for r in rows:
            w.writerow([r.linkage_id, repr(float(r.similarity)), r.record_id])
    os.replace(tmp, path)


@dataclass
class EncodedData:
    """Everything a run needs that does not depend on the thresholds: schema, data, encodings."""

    schema: LinkageSchema
    schema_obj: dict[str, Any]
    note: str
    data: PreparedData
    tables: list[EncodedRecords]
    reports: list[EncodeReport]
    encode_seconds: float


def prepare_encoded(cfg: SimulationConfig, progress: Progress | None = None) -> EncodedData:
    """Schema, dataset (generated and written, or external) and every party's encodings."""
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    schema, schema_obj, note = load_schema_for(cfg.schema_path, cfg.parties)
    (cfg.out_dir / "schema.json").write_text(json.dumps(schema_obj, indent=2) + "\n")
    data = prepare_data(cfg, progress)
    t0 = time.perf_counter()
    tables, reports = encode_parties(
        schema, simulation_secret(cfg.seed), data.paths, data.id_column, progress
    )
    return EncodedData(schema, schema_obj, note, data, tables, reports, time.perf_counter() - t0)


def party_rows(
    cfg: SimulationConfig, enc: EncodedData, params: ProtocolParameters, metrics: Any
) -> list[dict[str, Any]]:
    """Per-party figures from a run's metrics (RunMetrics of the in-process driver).

    Mode mpc3 has no local comparison per party: its comparison figures are "n/a" and the bytes
    are those of the input shares (two filter shares and two count shares per record and compute
    party, pseudonym and digests; none to the party's own compute-party role when it is one)."""
    blocks = 8 + 8 * len(enc.schema.blocking)
    seg_row_bytes = blocks + 8 * words_for(params.segment_bits)
    share_row_bytes = blocks + 2 * 8 * words_for(params.filter_bits) + 16
    rows = []
    for p in range(cfg.parties):
        bs = metrics.block_stats[p]
        shared = bs.records_in_common_blocks
        row: dict[str, Any] = {
            "name": params.parties[p],
            "records": len(enc.tables[p].record_ids),
            "encode_seconds": enc.reports[p].seconds,
            "fill_mean": enc.reports[p].fill_mean,
            "skipped": enc.reports[p].skipped_total,
            "common_blocks": bs.common_blocks,
            "records_in_common_blocks": shared,
            "largest_block": bs.largest_block,
            "peak_memory_bytes": None,
        }
        if params.mode == "mpc3":
            targets = 3 - (params.parties[p] in params.compute_party_names)
            row.update(
                candidate_sets="n/a",
                evaluated_per_stage=[],
                survived_per_stage=[],
                survivors="n/a",
                rr_f=None,
                compare_seconds=None,
                # Computed payload of the input shares this party sends (not measured on a wire).
                bytes_sent=targets * shared * share_row_bytes,
            )
        else:
            cs = metrics.comparison[p]
            row.update(
                candidate_sets=cs.candidate_sets,
                evaluated_per_stage=list(cs.evaluated_per_stage),
                survived_per_stage=list(cs.survived_per_stage),
                survivors=cs.survivors,
                rr_f=cs.reduction_ratio,
                compare_seconds=cs.seconds,
                # Computed payload of the segment shares this party sends (not measured on a wire).
                bytes_sent=(cfg.parties - 1) * shared * seg_row_bytes,
            )
        rows.append(row)
    return rows


def run_in_process_simulation(
    cfg: SimulationConfig,
    progress: Progress | None = None,
    *,
    encoded: EncodedData | None = None,
    write_matches: bool = True,
) -> SimulationResult:
    """One in-process simulation (see the module docstring); writes the results folder.

    Pass `encoded` (from `prepare_encoded` with the same parties/data/seed/schema) to reuse the
    data and encodings across runs that differ only in thresholds (sweeps).
    """
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    enc = encoded if encoded is not None else prepare_encoded(cfg, progress)
    steps: dict[str, float] = {"generate": enc.data.seconds, "encode": enc.encode_seconds}
    params = protocol_parameters(cfg, enc.schema)

    def cmp_progress(party: int, done: int, total: int) -> None:
        if progress:
            progress(f"compare party {party}", done, total)

    t0 = time.perf_counter()
    run = run_protocol_in_process(enc.tables, params, cmp_progress)
    steps["protocol"] = time.perf_counter() - t0
    steps.update({f"protocol.{k}": v for k, v in run.metrics.step_seconds.items()})
    if write_matches:
        for p, rows in enumerate(run.matches):
            write_matches_csv(matches_path(cfg.out_dir, p), rows)
    quality = evaluate(run.matches, enc.data.truth)

    cand = max((c.candidate_sets for c in run.metrics.comparison), default=0)
    if progress:
        progress("oracle", 0, 1)
    t0 = time.perf_counter()
    oq: LinkageQuality | None
    if params.segment_threshold == 0 and params.mode == "segments" and cfg.oracle == "auto":
        oq, method = quality, "this run itself (s_m = 0 reproduces the plaintext oracle exactly)"
    else:
        oq, method = oracle_quality(
            enc.tables, params, enc.data.truth, cfg.oracle, run.pseudonyms, cand
        )
    steps["oracle"] = time.perf_counter() - t0
    if progress:
        progress("oracle", 1, 1)

    blocking = blocking_recall(enc.tables, enc.data.truth)
    totals = {
        "true_sets_lost_to_blocking": blocking.lost,
        "true_sets_lost_to_blocking_fraction": round(blocking.lost_fraction, 6),
        "blocking_passes": [
            {
                "pass": b.column,
                "records_in_common_blocks": list(b.records_in_common_blocks),
                "candidate_sets": b.candidate_sets,
                "true_sets_kept": b.true_sets_kept,
            }
            for b in blocking.passes
        ],
        "sets_summed": run.metrics.sets_summed,
        "above_threshold": run.metrics.above_threshold,
        "matches": run.metrics.matches,
        "process_peak_rss_bytes": peak_rss_bytes(),
        "filter_bits": params.filter_bits,
        "s_t": params.match_threshold,
        "s_m": params.segment_threshold,
    }
    notes = [n for n in [enc.note] if n]
    notes.append(
        "in-process mode: all parties share one process, so peak memory is the whole process's "
        "(generation, every party and the oracle), not per party; bytes_sent is the computed "
        "payload of the segment shares, not bytes measured on a wire"
    )
    result = SimulationResult(
        mode=f"in-process, {cfg.mode}",
        config=cfg,
        quality=quality,
        oracle_quality=oq,
        oracle_method=method,
        steps=steps,
        parties=party_rows(cfg, enc, params, run.metrics),
        totals=totals,
        out_dir=cfg.out_dir,
        notes=notes,
    )
    write_report(result)
    return result


def _config_dict(cfg: SimulationConfig) -> dict[str, Any]:
    out = {}
    for k, v in vars(cfg).items():
        out[k] = str(v) if isinstance(v, Path) else v
    out["segment_threshold"] = cfg.s_m
    return out


def result_dict(r: SimulationResult) -> dict[str, Any]:
    return {
        "mode": r.mode,
        "config": _config_dict(r.config),
        "quality": r.quality.as_dict(),
        "oracle_quality": None if r.oracle_quality is None else r.oracle_quality.as_dict(),
        "oracle_method": r.oracle_method,
        "steps_seconds": r.steps,
        "parties": r.parties,
        "totals": r.totals,
        "notes": r.notes,
        "matches": [str(p) for p in r.matches_paths()],
    }


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "n/a"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)


def write_report(r: SimulationResult) -> None:
    """Write summary.json and report.md into the result's folder."""
    tmp = r.summary_path.with_name(r.summary_path.name + ".tmp")
    tmp.write_text(json.dumps(result_dict(r), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, r.summary_path)
    c = r.config
    q = r.quality
    lines = [
        f"# Simulation report ({r.mode})",
        "",
        f"P = {c.parties}, records per party = {c.records}, overlap = {c.overlap}, "
        f"corruption = {c.corruption}, seed = {c.seed}, s_t = {c.match_threshold}, "
        f"s_m = {c.s_m}, one-to-one = {c.one_to_one}, l = {r.totals.get('filter_bits')}",
        "",
        "| quality | matched sets | correct | true sets | precision | recall | F1 |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| protocol | {q.matched_sets} | {q.correct_sets} | {q.true_sets} | {q.precision:.4f} | "
        f"{q.recall:.4f} | {q.f1:.4f} |",
    ]
    if r.oracle_quality is not None:
        o = r.oracle_quality
        lines.append(
            f"| plaintext oracle | {o.matched_sets} | {o.correct_sets} | {o.true_sets} | "
            f"{o.precision:.4f} | {o.recall:.4f} | {o.f1:.4f} |"
        )
    lines += ["", f"Oracle: {r.oracle_method}.", "", "## Per party", ""]
    lines += [
        "| party | records | records in common blocks | candidate sets | evaluated per stage | "
        "survived per stage | survivors | RR_f | bytes sent | peak memory |",
        "|---|---:|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for p in r.parties:
        lines.append(
            f"| {p['name']} | {p['records']} | {p['records_in_common_blocks']} | "
            f"{p['candidate_sets']} | {p['evaluated_per_stage']} | {p['survived_per_stage']} | "
            f"{p['survivors']} | {'n/a' if p['rr_f'] is None else format(p['rr_f'], '.4f')} | {_fmt_bytes(p['bytes_sent'])} | "
            f"{_fmt_bytes(p['peak_memory_bytes'])} |"
        )
    lines += ["", "## Time per step (wall seconds)", "", "| step | seconds |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in r.steps.items()]
    lines += ["", "## Totals", ""]
    lines += [f"- {k}: {v}" for k, v in r.totals.items() if k != "blocking_passes"]
    passes = r.totals.get("blocking_passes") or []
    if passes:
        lines += [
            "",
            "## Blocking passes (true sets kept: all P records share that pass's block)",
            "",
            "| pass | records in common blocks (per party) | candidate sets | true sets kept |",
            "|---:|---|---:|---:|",
        ]
        lines += [
            f"| {b['pass']} | {b['records_in_common_blocks']} | {b['candidate_sets']} | "
            f"{b['true_sets_kept']} |"
            for b in passes
        ]
    if r.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    lines += ["", "Matches: " + ", ".join(str(p) for p in r.matches_paths()), ""]
    tmp = r.report_path.with_name(r.report_path.name + ".tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, r.report_path)
