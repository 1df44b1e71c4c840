#!/usr/bin/env python3
"""Run one multi-party linkage simulation and print its quality, costs and where the results are.

Default mode: real party processes and a coordinator on loopback with mutual TLS (certificates are
made for the run). `--in-process` runs every party in this process (fast; for sweeps).

Default target: any (groups at two or more parties, pairwise Dice + the group solver);
`--target all` for sets at every party.

Example: python scripts/simulate.py --parties 3 --records 2000 --corruption 0.2 --seed 1
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import (  # noqa: E402
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table  # noqa: E402

from party.config import PartyConfig  # noqa: E402
from party.errors import PprlError  # noqa: E402
from party.protocol.params import DEFAULT_MIN_PARTIES, DEFAULT_TARGET, TARGETS  # noqa: E402
from party.protocol.solver import SOLVERS  # noqa: E402
from party.synthetic.simulation import (  # noqa: E402
    SimulationConfig,
    SimulationResult,
    add_data_arguments,
    count_parties,
    data_config,
    run_in_process_simulation,
)
from party.synthetic.simulation_any import AnyTarget, run_any_simulation  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--parties",
        type=int,
        default=None,
        help="number of parties P (default 3, or the number of party-<i>.csv files with --data)",
    )
    ap.add_argument("--records", type=int, default=2000, help="records per party (default 2000)")
    ap.add_argument("--overlap", type=float, default=0.5, help="share present at every party")
    ap.add_argument(
        "--corruption", type=float, default=0.2, help="share of common entities corrupted"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--s-t", type=float, default=0.8, help="match threshold s_t (default 0.8)")
    ap.add_argument(
        "--s-m", type=float, default=None, help="segment threshold s_m (default s_t-0.1)"
    )
    ap.add_argument(
        "--mode",
        choices=["segments", "mpc3"],
        default="segments",
        help="protocol mode: segment exchange + ring summation, or three-party computation "
        "(mpc3: s_m is 0; with --parties 2 a helper compute node joins the run)",
    )
    ap.add_argument("--max-block-size", type=int, default=None, help="cap with sub-blocking")
    ap.add_argument(
        "--target",
        choices=list(TARGETS),
        default=DEFAULT_TARGET,
        help=f"linkage target (default {DEFAULT_TARGET}). any: groups at --min-parties..P "
        "parties (generated data then has entities at random subsets of the parties); all: sets "
        "at every party (both modes)",
    )
    ap.add_argument(
        "--min-parties",
        type=int,
        default=DEFAULT_MIN_PARTIES,
        help=f"target any: smallest group m, 2..P (default {DEFAULT_MIN_PARTIES})",
    )
    ap.add_argument(
        "--solver",
        choices=list(SOLVERS),
        default=SOLVERS[0],
        help="target any: group solver (docs/protocol.md section 15)",
    )
    ap.add_argument(
        "--single", type=float, default=0.3, help="target any: share of entities at one party only"
    )
    ap.add_argument(
        "--schema", type=Path, default=None, help="linkage schema JSON (default: shipped)"
    )
    add_data_arguments(ap)
    ap.add_argument("--out", type=Path, default=None, help="results folder (default results/sim-*)")
    ap.add_argument(
        "--oracle",
        choices=["auto", "full", "sm0", "none"],
        default="auto",
        help="plaintext oracle: full enumeration, an s_m=0 protocol run, or none (auto: by size)",
    )
    ap.add_argument("--in-process", action="store_true", help="run all parties in this process")
    ap.add_argument(
        "--cluster",
        choices=("local",),
        help="networked: every node encodes (and, target any, compares) on an embedded Dask "
        'cluster of its own ([cluster] scheduler = "local"; docs/scaling.md)',
    )
    ap.add_argument(
        "--memory-budget-mib",
        type=int,
        default=PartyConfig.memory_budget_mib,
        help="the engine's memory budget per party (default: the node's, [limits] memory_budget_mib) (in-process engines, the party nodes via "
        "PPRL_MEMORY_BUDGET_MIB, and the networked mode's local reference and oracle)",
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="networked run timeout (s)")
    ap.add_argument(
        "--no-reference",
        action="store_true",
        help="networked mode: skip the local in-process reference run and oracle (large runs)",
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    return ap


class ProgressView:
    """Maps the harness's (stage, done, total) callbacks onto rich progress bars."""

    def __init__(self, progress: Progress, default_total: int) -> None:
        self.progress = progress
        self.default_total = default_total
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        # "party-a: comparing" and "party-a: summing" share one bar (the key before the colon).
        key = stage.split(":", 1)[0]
        total = total or self.default_total
        task = self.tasks.get(key)
        if task is None:
            task = self.progress.add_task(stage, total=total)
            self.tasks[key] = task
        self.progress.update(task, description=stage, completed=min(done, total), total=total)


def print_result(console: Console, r: SimulationResult) -> None:
    q, o = r.quality, r.oracle_quality
    t = Table(title=f"linkage quality (target all, {r.mode}, P={r.config.parties})")
    for col in ("", "matched sets", "correct", "true sets", "precision", "recall", "F1"):
        t.add_column(col, justify="right" if col else "left")
    t.add_row(
        "protocol",
        str(q.matched_sets),
        str(q.correct_sets),
        str(q.true_sets),
        f"{q.precision:.4f}",
        f"{q.recall:.4f}",
        f"{q.f1:.4f}",
    )
    if o is not None:
        t.add_row(
            "plaintext oracle",
            str(o.matched_sets),
            str(o.correct_sets),
            str(o.true_sets),
            f"{o.precision:.4f}",
            f"{o.recall:.4f}",
            f"{o.f1:.4f}",
        )
    console.print(t)
    console.print(f"oracle: {r.oracle_method}")

    pt = Table(title="per party")
    cols = (
        "party",
        "records",
        "in common blocks",
        "candidate sets",
        "per stage: evaluated>kept",
        "survivors",
        "RR_f",
        "bytes sent",
        "peak memory",
    )
    for col in cols:
        pt.add_column(col, justify="left" if col == "party" else "right")
    for p in r.parties:
        pt.add_row(
            p["name"],
            str(p["records"]),
            str(p["records_in_common_blocks"]),
            str(p["candidate_sets"]),
            stages(p["evaluated_per_stage"], p["survived_per_stage"]),
            str(p["survivors"]),
            "n/a" if p["rr_f"] is None else f"{p['rr_f']:.4f}",
            _mib(p["bytes_sent"]),
            _mib(p["peak_memory_bytes"]),
        )
    console.print(pt)

    st = Table(title="time per step")
    st.add_column("step")
    st.add_column("seconds", justify="right")
    for k, v in r.steps.items():
        st.add_row(k, f"{v:.2f}")
    console.print(st)
    for k, v in r.totals.items():
        console.print(f"{k}: {v}", highlight=False)
    for n in r.notes:
        console.print(f"note: {n}", style="yellow", highlight=False)
    console.print(f"results: {r.out_dir / 'results'} (matches.csv per party)", highlight=False)
    console.print(f"report:  {r.report_path}   summary: {r.summary_path}", highlight=False)


def stages(evaluated: list[int], survived: list[int]) -> str:
    """Stage j (party j joins the partial sets; stage 0 starts them) as evaluated>kept."""
    return " ".join(f"{e}>{s}" for e, s in zip(evaluated[1:], survived[1:], strict=False))


def _mib(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def run_target_any(console: Console, cfg: SimulationConfig, args: argparse.Namespace) -> int:
    """Target any: networked (or in-process) run, matches.csv with group columns, pairwise and
    exact-group scores, and at s_m = 0 whether the groups equal the plaintext oracle's."""
    t0 = time.perf_counter()
    target = AnyTarget(args.min_parties, args.solver, args.single)
    try:
        if args.in_process:
            r = run_any_simulation(cfg, target)
        else:
            from party.synthetic.network_any import run_any_networked

            r = run_any_networked(
                cfg, target, timeout=args.timeout, reference=not args.no_reference
            )
    except PprlError as exc:
        console.print(f"simulate: error: {exc}", style="red", markup=False, highlight=False)
        return 2
    where = "in-process" if args.in_process else "networked"
    console.print(
        f"target any (min_parties {target.min_parties}, solver {target.solver}), mode {cfg.mode}, "
        f"P={cfg.parties}, {where}",
        highlight=False,
    )
    scored = [("protocol", r.quality)]
    if r.oracle_quality is not None:
        scored.append(("plaintext oracle", r.oracle_quality))
    for who, q in scored:
        for name, sc in (("pairwise", q.pairwise), ("exact-group", q.groups)):
            console.print(
                f"{who:16s} {name:12s} predicted {sc.predicted} correct {sc.correct} "
                f"true {sc.true}  precision {sc.precision:.4f} recall {sc.recall:.4f} "
                f"F1 {sc.f1:.4f}",
                highlight=False,
            )
    console.print(f"groups by size: {r.stats['group_sizes']}", highlight=False)
    console.print(f"oracle groups equal: {r.oracle_equal}  results: {r.out_dir}", highlight=False)
    if not args.in_process:
        console.print(f"identical_to_in_process: {r.identical_to_in_process}", highlight=False)
    for name, secs in r.seconds.items():
        console.print(f"  {name}: {secs:.1f} s", highlight=False)
    console.print(f"total wall time: {time.perf_counter() - t0:.1f} s", highlight=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cluster and args.in_process:
        parser.error("--cluster needs party nodes: it does not apply with --in-process")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # Wide tables: do not squeeze them into 80 columns when output is not a terminal.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    if args.parties is None:
        try:
            args.parties = count_parties(args)
        except PprlError as exc:
            console.print(f"simulate: error: {exc}", style="red", markup=False, highlight=False)
            return 2
    if args.mode == "mpc3" and args.s_m:
        console.print(
            "simulate: error: --s-m does not apply in mode mpc3 (it has no segment filter; s_m is 0)",
            style="red",
            markup=False,
            highlight=False,
        )
        return 2
    out = args.out or Path("results") / time.strftime(
        f"sim-{'inproc' if args.in_process else 'net'}-{args.mode}-p{args.parties}-%Y%m%d-%H%M%S"
    )
    cfg = SimulationConfig(
        parties=args.parties,
        records=args.records,
        overlap=args.overlap,
        corruption=args.corruption,
        seed=args.seed,
        match_threshold=args.s_t,
        segment_threshold=args.s_m,
        max_block_size=args.max_block_size,
        schema_path=args.schema,
        out_dir=out,
        oracle=args.oracle,
        memory_budget_mib=args.memory_budget_mib,
        **data_config(args),
        mode=args.mode,
        cluster=args.cluster,
    )
    if args.target == "any":
        return run_target_any(console, cfg, args)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    t0 = time.perf_counter()
    try:
        with Progress(*columns, console=console, transient=False) as progress:
            view = ProgressView(progress, args.records)
            if args.in_process:
                result = run_in_process_simulation(cfg, view)
            else:
                from party.synthetic.network_sim import run_networked_simulation

                result = run_networked_simulation(
                    cfg, view, timeout=args.timeout, reference=not args.no_reference
                )
    except PprlError as exc:
        console.print(f"simulate: error: {exc}", style="red", markup=False, highlight=False)
        return 2
    except KeyboardInterrupt:
        console.print("simulate: interrupted", style="red")
        return 130
    print_result(console, result)
    console.print(f"total wall time: {time.perf_counter() - t0:.1f} s", highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
