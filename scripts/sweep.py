#!/usr/bin/env python3
"""Parameter sweeps of the in-process simulation: CSV of results plus a Markdown report with figures.

Three sweeps (each point is one in-process linkage on generated data; data and encodings are made
once per (P, records, corruption) and reused across thresholds):
  quality: for every P and corruption, F1 (protocol and plaintext oracle) against s_t, s_m = s_t - 0.1
  filter:  for every P, RR_f and F1 against s_m at a fixed s_t
  scale:   for every P, runtime (encode + protocol) against records per party

Example: python scripts/sweep.py --out results/sweep            (defaults: P 3 5 7, a few minutes)
         python scripts/sweep.py --quick --out results/sweep-q  (small grid, ~1 minute)
Writes OUT/sweep.csv, OUT/report.md and OUT/*.png.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: E402

from party.errors import PprlError  # noqa: E402
from party.protocol.solver import SOLVERS  # noqa: E402
from party.synthetic.metrics import LinkageQuality, evaluate_sets  # noqa: E402
from party.synthetic.simulation import (  # noqa: E402
    EncodedData,
    SimulationConfig,
    add_data_arguments,
    coarse_schema_path,
    count_parties,
    data_config,
    prepare_encoded,
    protocol_parameters,
    run_in_process_simulation,
)
from party.synthetic.simulation_any import AnyTarget, run_any_simulation  # noqa: E402

FIELDS = [
    "sweep",
    "mode",
    "parties",
    "records",
    "corruption",
    "s_t",
    "s_m",
    "precision",
    "recall",
    "f1",
    "oracle_f1",
    "matched_sets",
    "true_sets",
    "candidate_sets",
    "sets_summed",
    "rr_f_mean",
    "encode_seconds",
    "protocol_seconds",
    "compare_seconds",
    "peak_rss_mib",
    "error",
]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--parties", type=int, nargs="+", default=[3, 5, 7])
    ap.add_argument("--records", type=int, default=5000, help="records per party (quality sweep)")
    ap.add_argument("--scale-records", type=int, nargs="+", default=[1000, 4000, 16000, 64000])
    ap.add_argument("--corruption", type=float, nargs="+", default=[0.0, 0.2, 0.4])
    ap.add_argument("--s-t", type=float, nargs="+", default=[0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9])
    ap.add_argument("--s-m", type=float, nargs="+", default=[0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8])
    ap.add_argument(
        "--filter-records", type=int, default=600, help="records per party of the filter sweep"
    )
    ap.add_argument(
        "--filter-schema",
        type=Path,
        default=None,
        help="schema of the filter sweep (default: shipped coarse blocking, year of birth + state)",
    )
    ap.add_argument("--memory-budget-mib", type=int, default=256)
    ap.add_argument("--fixed-s-t", type=float, default=0.8, help="s_t of the filter/scale sweeps")
    ap.add_argument("--filter-corruption", type=float, default=0.2)
    ap.add_argument("--schema", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--sweeps",
        nargs="+",
        default=["quality", "filter", "scale"],
        help="quality, filter, scale, any (target any: pairwise and exact-group F1)",
    )
    ap.add_argument("--quick", action="store_true", help="small grid for a smoke run")
    ap.add_argument(
        "--solvers", nargs="+", choices=list(SOLVERS), default=list(SOLVERS), help="sweep any"
    )
    ap.add_argument("--min-parties", type=int, default=2, help="sweep any: smallest group m")
    ap.add_argument("--single", type=float, default=0.3, help="sweep any: entities at one party")
    add_data_arguments(ap)  # --data folder: quality and filter sweeps on that dataset
    ap.add_argument(
        "--mode",
        choices=["segments", "mpc3"],
        default="segments",
        help="protocol mode of every point (mpc3 has no s_m: the filter sweep is skipped)",
    )
    return ap


class OracleCurve:
    """The plaintext oracle's candidate sets and Dice on one dataset, thresholded per s_t."""

    def __init__(self, enc: EncodedData, cfg: SimulationConfig) -> None:
        from party.protocol.oracle import oracle_candidates

        params = protocol_parameters(cfg, enc.schema)
        # No sub-blocking and no one-to-one in sweeps, so the record index is a valid key.
        self.cand, self.sim = oracle_candidates(enc.tables, params)
        self.ids = [t.record_ids for t in enc.tables]
        self.truth = enc.data.truth

    def quality(self, s_t: float) -> LinkageQuality:
        rows = self.cand[self.sim >= s_t]
        ids = self.ids
        return evaluate_sets(
            ([(p, ids[p][int(i)]) for p, i in enumerate(r)] for r in rows), self.truth
        )


def point(
    sweep: str, cfg: SimulationConfig, enc: EncodedData, oracle: OracleCurve | None
) -> dict[str, Any]:
    try:
        r = run_in_process_simulation(cfg, encoded=enc, write_matches=False)
    except PprlError as exc:
        # E.g. the engine's memory budget refusing a point: record it and go on.
        row: dict[str, Any] = dict.fromkeys(FIELDS, "")
        row.update(
            sweep=sweep,
            mode=cfg.mode,
            parties=cfg.parties,
            records=cfg.records,
            corruption=cfg.corruption,
            s_t=cfg.match_threshold,
            s_m=cfg.s_m,
            error=f"{type(exc).__name__}: {exc}",
        )
        return row
    oq = oracle.quality(cfg.match_threshold) if oracle is not None else None
    rr_f = [p["rr_f"] for p in r.parties]
    return {
        "sweep": sweep,
        "mode": cfg.mode,
        "parties": cfg.parties,
        "records": cfg.records,
        "corruption": cfg.corruption,
        "s_t": cfg.match_threshold,
        "s_m": cfg.s_m,
        "precision": round(r.quality.precision, 6),
        "recall": round(r.quality.recall, 6),
        "f1": round(r.quality.f1, 6),
        "oracle_f1": "" if oq is None else round(oq.f1, 6),
        "matched_sets": r.quality.matched_sets,
        "true_sets": r.quality.true_sets,
        # mode mpc3 has no per-party comparison ("n/a"): its candidate sets are the sets summed
        "candidate_sets": max(
            (p["candidate_sets"] for p in r.parties if isinstance(p["candidate_sets"], int)),
            default=r.totals["sets_summed"],
        ),
        "sets_summed": r.totals["sets_summed"],
        "rr_f_mean": "" if cfg.mode == "mpc3" else round(float(np.mean(rr_f)), 6),
        "encode_seconds": round(enc.encode_seconds, 3),
        "protocol_seconds": round(r.steps["protocol"], 3),
        "compare_seconds": round(r.steps.get("protocol.compare", 0.0), 3),
        "peak_rss_mib": round(r.totals["process_peak_rss_bytes"] / 2**20, 1),
        "error": "",
    }


def figures(rows: list[dict[str, Any]], out: Path) -> list[tuple[str, str]]:
    made = []
    rows = [r for r in rows if not r["error"]]
    q = [r for r in rows if r["sweep"] == "quality"]
    if q:
        corrs = sorted({r["corruption"] for r in q})
        fig, axes = plt.subplots(1, len(corrs), figsize=(4.2 * len(corrs), 3.6), squeeze=False)
        for ax, c in zip(axes[0], corrs, strict=True):
            for p in sorted({r["parties"] for r in q}):
                pts = sorted(
                    (r["s_t"], r["f1"], r["oracle_f1"])
                    for r in q
                    if r["parties"] == p and r["corruption"] == c
                )
                (line,) = ax.plot(
                    [x[0] for x in pts], [x[1] for x in pts], marker="o", label=f"P={p}"
                )
                if all(x[2] != "" for x in pts):
                    ax.plot(
                        [x[0] for x in pts],
                        [x[2] for x in pts],
                        ls="--",
                        color=line.get_color(),
                        alpha=0.6,
                    )
            ax.set_title(f"corruption {c:.0%}")
            ax.set_xlabel("s_t")
            ax.set_ylabel("F1 (solid: protocol, dashed: oracle)")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "f1_vs_st.png", dpi=110)
        plt.close(fig)
        made.append(("F1 against s_t per P (s_m = s_t - 0.1)", "f1_vs_st.png"))
    f = [r for r in rows if r["sweep"] == "filter"]
    if f:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for p in sorted({r["parties"] for r in f}):
            pts = sorted((r["s_m"], r["rr_f_mean"], r["f1"]) for r in f if r["parties"] == p)
            axes[0].plot([x[0] for x in pts], [x[1] for x in pts], marker="o", label=f"P={p}")
            axes[1].plot([x[0] for x in pts], [x[2] for x in pts], marker="o", label=f"P={p}")
        axes[0].set_ylabel("RR_f (mean over parties)")
        axes[1].set_ylabel("F1")
        for ax in axes:
            ax.set_xlabel("s_m")
            ax.grid(alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(out / "rrf_vs_sm.png", dpi=110)
        plt.close(fig)
        made.append(("RR_f and F1 against s_m per P", "rrf_vs_sm.png"))
    s = [r for r in rows if r["sweep"] == "scale"]
    if s:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for p in sorted({r["parties"] for r in s}):
            pts = sorted(
                (r["records"], r["encode_seconds"] + r["protocol_seconds"], r["protocol_seconds"])
                for r in s
                if r["parties"] == p
            )
            (line,) = ax.plot(
                [x[0] for x in pts], [x[1] for x in pts], marker="o", label=f"P={p} total"
            )
            ax.plot(
                [x[0] for x in pts],
                [x[2] for x in pts],
                ls="--",
                color=line.get_color(),
                label=f"P={p} protocol",
            )
        ax.set_xlabel("records per party")
        ax.set_ylabel("seconds (in-process, all parties)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "runtime_vs_records.png", dpi=110)
        plt.close(fig)
        made.append(("Runtime against records per party", "runtime_vs_records.png"))
    return made


def write_report(
    rows: list[dict[str, Any]],
    out: Path,
    figs: list[tuple[str, str]],
    argv: list[str],
    seconds: float,
) -> Path:
    lines = [
        "# Simulation sweep",
        "",
        f"Command: `python scripts/sweep.py {' '.join(argv)}` ({seconds:.0f} s wall; the machine is "
        "shared, so timings are noisy). In-process mode; data from `party.synthetic.generate`.",
        "",
    ]
    for title, name in figs:
        lines += [f"## {title}", "", f"![{title}]({name})", ""]
    lines += ["## All points", "", "| " + " | ".join(FIELDS) + " |", "|" + "---|" * len(FIELDS)]
    lines += ["| " + " | ".join(str(r[k]) for k in FIELDS) + " |" for r in rows]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


ANY_FIELDS = ["parties", "records", "corruption", "s_t", "solver", "min_parties"]
ANY_FIELDS += ["pair_precision", "pair_recall", "pair_f1", "group_precision", "group_recall"]
ANY_FIELDS += ["group_f1", "oracle_equal", "protocol_seconds"]


def any_sweep(console: Console, base: SimulationConfig, args: argparse.Namespace) -> None:
    """Target any (in-process, s_m = 0): pairwise and exact-group scores per P, c, s_t and solver;
    writes any.csv and prints one line per point."""
    rows = []
    for p in args.parties:
        for c in args.corruption:
            for t in args.s_t:
                for solver in args.solvers:
                    cfg = replace(
                        base,
                        parties=p,
                        records=args.records,
                        corruption=c,
                        match_threshold=t,
                        segment_threshold=0.0,
                        out_dir=args.out / "runs" / f"any-p{p}-c{c}-t{t}-{solver}",
                    )
                    r = run_any_simulation(cfg, AnyTarget(args.min_parties, solver, args.single))
                    pw, gr = r.quality.pairwise, r.quality.groups
                    row = [p, args.records, c, t, solver, args.min_parties]
                    row += [round(v, 6) for v in (pw.precision, pw.recall, pw.f1)]
                    row += [round(v, 6) for v in (gr.precision, gr.recall, gr.f1)]
                    row += [r.oracle_equal, round(r.seconds["protocol"], 3)]
                    rows.append(dict(zip(ANY_FIELDS, row, strict=True)))
                    console.print(
                        f"any P={p} c={c} s_t={t} {solver}: pairwise F1 {pw.f1:.4f} "
                        f"exact-group F1 {gr.f1:.4f} (oracle equal: {r.oracle_equal})",
                        highlight=False,
                    )
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "any.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=ANY_FIELDS)
        w.writeheader()
        w.writerows(rows)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if args.quick:
        args.parties = [3, 5]
        args.records = 500
        args.scale_records = [250, 500, 1000]
        args.corruption = [0.2]
        args.s_t = [0.7, 0.8, 0.9]
        args.s_m = [0.5, 0.65, 0.8]
        args.filter_records = 300
    console = Console()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    plan: list[tuple[str, SimulationConfig, list[SimulationConfig]]] = []
    base = SimulationConfig(
        seed=args.seed,
        schema_path=args.schema,
        oracle="none",
        memory_budget_mib=args.memory_budget_mib,
        **data_config(args),
        mode=args.mode,
    )
    if args.data is not None:  # one external dataset: its P, no generated grid
        try:
            args.parties = [count_parties(args)]
        except PprlError as exc:
            console.print(f"sweep: error: {exc}", style="red", markup=False, highlight=False)
            return 2
        args.corruption = [0.0]
        args.sweeps = [s for s in args.sweeps if s != "scale"]
    if args.mode == "mpc3" and "filter" in args.sweeps:
        console.print("mode mpc3 has no segment filter s_m: skipping the filter sweep")
        args.sweeps = [s for s in args.sweeps if s != "filter"]
    if "any" in args.sweeps:
        any_sweep(console, base, args)
        args.sweeps = [s for s in args.sweeps if s != "any"]
        if not args.sweeps:
            return 0
    filter_schema = args.filter_schema or coarse_schema_path()
    for p in args.parties:
        if "quality" in args.sweeps:
            for c in args.corruption:
                d = replace(
                    base,
                    parties=p,
                    records=args.records,
                    corruption=c,
                    out_dir=out / "runs" / f"q-p{p}-n{args.records}-c{c}",
                )
                plan.append(
                    (
                        "quality",
                        d,
                        [
                            replace(
                                d, match_threshold=t, segment_threshold=max(0.0, round(t - 0.1, 6))
                            )
                            for t in args.s_t
                        ],
                    )
                )
        if "filter" in args.sweeps:
            d = replace(
                base,
                parties=p,
                records=args.filter_records,
                corruption=args.filter_corruption,
                match_threshold=args.fixed_s_t,
                schema_path=filter_schema,
                out_dir=out / "runs" / f"f-p{p}-n{args.filter_records}",
            )
            plan.append(("filter", d, [replace(d, segment_threshold=m) for m in args.s_m]))
        if "scale" in args.sweeps:
            for n in args.scale_records:
                d = replace(
                    base,
                    parties=p,
                    records=n,
                    corruption=args.filter_corruption,
                    match_threshold=args.fixed_s_t,
                    out_dir=out / "runs" / f"s-p{p}-n{n}",
                )
                plan.append(("scale", d, [d]))
    total = sum(len(pts) for _, _, pts in plan)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    try:
        with Progress(
            "{task.description}",
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        ) as prog:
            task = prog.add_task("sweep points", total=total)
            for sweep, data_cfg, points in plan:
                prog.update(
                    task,
                    description=f"{sweep}: P={data_cfg.parties} n={data_cfg.records} c={data_cfg.corruption}",
                )
                enc = prepare_encoded(data_cfg)
                # The oracle curve thresholds all candidate sets (no one-to-one resolution).
                oracle = (
                    OracleCurve(enc, data_cfg)
                    if sweep == "quality" and not data_cfg.one_to_one
                    else None
                )
                for cfg in points:
                    rows.append(point(sweep, cfg, enc, oracle))
                    prog.advance(task)
                with (out / "sweep.csv").open("w", newline="") as fh:
                    w = csv.DictWriter(fh, fieldnames=FIELDS)
                    w.writeheader()
                    w.writerows(rows)
    except PprlError as exc:
        console.print(f"sweep: error: {exc}", style="red", markup=False, highlight=False)
        return 2
    figs = figures(rows, out)
    report = write_report(rows, out, figs, argv, time.perf_counter() - t0)
    console.print(f"results: {out / 'sweep.csv'}  report: {report}", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
