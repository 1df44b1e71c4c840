#!/usr/bin/env python3
"""Time target "any" against target "all" over the network on one data set (issue 14's 3x goal).

Generates one data set (``party.synthetic.generator.generate``: people with many distinct names and
addresses, the share ``--overlap`` at every party), then runs two networked linkages on the same
CSVs, schema, secret and thresholds, each with fresh party processes (mutual TLS, loopback): mode
segments (or ``--mode mpc3``) with target "all", then target "any" (``--min-parties``,
``--solver``). Prints each run's wall time (start of the run to done, as the coordinator reports
it), the nodes' stage seconds (max over parties), candidate sets / pairs, matches, in mode mpc3 the
round bytes a compute party sent per candidate, and the ratio any / all. Writes ``bench.json``.

Example: python scripts/bench_any_net.py --records 100000 --schema party/synthetic/data/schema_large.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from party.errors import PprlError  # noqa: E402
from party.protocol.solver import SOLVERS  # noqa: E402
from party.synthetic.generator import generate, write_dataset  # noqa: E402
from party.synthetic.network_sim import parameters_object, run_on_cluster  # noqa: E402
from party.synthetic.simulation import SimulationConfig, load_schema_for  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--records", type=int, default=100_000, help="records per party")
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--corruption", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--s-t", type=float, default=0.8)
    ap.add_argument("--s-m", type=float, default=None, help="default s_t - 0.1")
    ap.add_argument("--max-block-size", type=int, default=None)
    ap.add_argument("--schema", type=Path, default=None, help="default: the shipped schema")
    ap.add_argument("--min-parties", type=int, default=2)
    ap.add_argument("--solver", choices=list(SOLVERS), default=SOLVERS[0])
    ap.add_argument("--memory-budget-mib", type=int, default=1024)
    ap.add_argument(
        "--mode", choices=["segments", "mpc3"], default="segments", help="both runs in this mode"
    )
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--out", type=Path, default=Path("results/bench/any-net"))
    return ap


def one_run(
    cfg: SimulationConfig,
    paths: list[Path],
    schema_obj: dict[str, Any],
    extra: dict[str, Any],
    timeout: float,
) -> dict[str, Any]:
    """One networked linkage on ``paths``; its timings and counts from the nodes' summaries."""
    obj = parameters_object(cfg, schema_obj) | extra
    t0 = time.perf_counter()
    _, run_id, final, steps = run_on_cluster(cfg, paths, "rec_id", schema_obj, obj, timeout=timeout)
    stages: dict[str, float] = {}
    for s in final.summaries:
        for name, secs in s.stage_seconds.items():
            stages[name] = max(stages.get(name, 0.0), secs)
    return {
        "run_id": run_id,
        "networked_run_seconds": round(steps["networked run"], 2),
        "wall_seconds_with_startup": round(time.perf_counter() - t0, 2),
        "stage_seconds_max": {k: round(v, 2) for k, v in stages.items()},
        # stages after the prepare step ("audited"); keys with a dot are breakdowns (cpu., wait.)
        "protocol_seconds": round(
            sum(v for k, v in stages.items() if k != "audited" and "." not in k), 2
        ),
        "candidates": max(int(s.candidate_sets) for s in final.summaries),
        "kept": max(int(s.survivors) for s in final.summaries),
        "matches_rows": {s.party: int(s.matches) for s in final.summaries},
        "peak_rss_mib": max(int(s.peak_rss_bytes) for s in final.summaries) / 2**20,
        "bytes_sent_mib": max(int(s.bytes_sent) for s in final.summaries) / 2**20,
        # mode mpc3: round payload bytes a compute party sent per candidate set / pair
        "round_bytes_per_candidate": max(
            (s.mpc_round_bytes / s.candidate_sets for s in final.summaries if s.candidate_sets),
            default=0.0,
        ),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    try:
        schema, schema_obj, _ = load_schema_for(args.schema, args.parties)
        ds = generate(
            args.parties,
            args.records,
            overlap=args.overlap,
            corruption=args.corruption,
            seed=args.seed,
        )
        paths = write_dataset(ds, out / "data")
        report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
        report["load_before"] = os.getloadavg()
        for target in ("all", "any"):
            cfg = SimulationConfig(
                parties=args.parties,
                records=args.records,
                seed=args.seed,
                match_threshold=args.s_t,
                segment_threshold=args.s_m,
                max_block_size=args.max_block_size,
                schema_path=args.schema,
                out_dir=out / target,
                memory_budget_mib=args.memory_budget_mib,
                mode=args.mode,
            )
            extra: dict[str, Any] = {}
            if target == "any":
                extra = {"target": "any", "min_parties": args.min_parties, "solver": args.solver}
            report[target] = one_run(cfg, paths, schema_obj, extra, args.timeout)
            report[target]["load_after"] = os.getloadavg()
            print(f"{target}: {json.dumps(report[target])}", flush=True)
    except PprlError as exc:
        print(f"bench_any_net: error: {exc}", file=sys.stderr)
        return 2
    ratio = report["any"]["networked_run_seconds"] / report["all"]["networked_run_seconds"]
    proto = report["any"]["protocol_seconds"] / max(report["all"]["protocol_seconds"], 1e-9)
    report["ratio_any_over_all"] = {"networked_run": round(ratio, 3), "protocol": round(proto, 3)}
    print(
        f"ratio any / all: networked run {ratio:.2f}, protocol stages (exchanging + comparing "
        f"+ summing) {proto:.2f}; load {report['all']['load_after'][0]:.1f} / "
        f"{report['any']['load_after'][0]:.1f}"
    )
    (out / "bench.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
