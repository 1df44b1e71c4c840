#!/usr/bin/env python3
"""Target "any" quality against clkhash + anonlink greedy_solve on the same generated data.

Data: ``party.synthetic.subsets.generate_subsets`` (entities at random subsets of the P parties, a
share at one party only, corruption of some copies of multi-party entities, households). Ours: the
in-process segment-mode protocol of target any (s_m = 0, the default simulation schema), run once
at the lowest threshold; the matched pairs at each higher threshold are those with Dice >= it (the
same pairs a run at that threshold finds with s_m = 0), solved with every solver. The comparator:
``scripts/reference_linkage.py`` in ``.venv-ref`` (scripts/setup_reference.sh), all pairs of every
two parties without blocking, anonlink's greedy solver. Both are scored by
``party.synthetic.metrics_any`` (pairwise and exact-group P/R/F1) and the best threshold of each is
reported. Usage: ``python scripts/bench_any.py [--parties 5 --records 2000 ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from party.protocol.any_driver import run_any_in_process  # noqa: E402
from party.protocol.params import ProtocolParameters  # noqa: E402
from party.protocol.solver import SOLVERS, solve_groups  # noqa: E402
from party.synthetic.generator import write_dataset  # noqa: E402
from party.synthetic.metrics_any import AnyQuality, evaluate_groups  # noqa: E402
from party.synthetic.simulation import (  # noqa: E402
    encode_parties,
    load_schema_for,
    party_name,
    simulation_secret,
)
from party.synthetic.subsets import generate_subsets  # noqa: E402

SECRET = "quality-comparison-secret"


def _row(q: AnyQuality) -> dict[str, float]:
    return {
        "pair_p": round(q.pairwise.precision, 4),
        "pair_r": round(q.pairwise.recall, 4),
        "pair_f1": round(q.pairwise.f1, 4),
        "group_f1": round(q.groups.f1, 4),
    }


def all_party_data(args: argparse.Namespace) -> tuple[Any, Any, list[Any]]:
    """(dataset, schema, encoded tables) of generated data where every match is at all parties."""
    from party.synthetic.generator import generate

    p = args.parties
    ds = generate(p, args.records, 0.5, args.corruption, args.seed, households=args.households)
    with tempfile.TemporaryDirectory() as tmp:
        files = write_dataset(ds, Path(tmp) / "data")
        schema, _, _ = load_schema_for(None, p)
        tables, _ = encode_parties(schema, simulation_secret(args.seed), files, "rec_id")
    return ds, schema, tables


def timing(args: argparse.Namespace) -> int:
    """Seconds of the in-process protocol, target all vs target any, on the same encoded data."""
    from party.protocol.driver import run_in_process

    p = args.parties
    _, schema, tables = all_party_data(args)
    names = tuple(party_name(i) for i in range(p))
    all_p = ProtocolParameters(names, schema.output_bits, 0.8, 0.7, one_to_one=True, target="all")
    any_p = ProtocolParameters(names, schema.output_bits, 0.8, 0.7, target="any")
    t0 = time.perf_counter()
    run_all = run_in_process(tables, all_p)
    s_all = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_any = run_any_in_process(tables, any_p)
    s_any = time.perf_counter() - t0
    print(
        f"P={p} n={args.records}: all {s_all:.1f} s ({run_all.metrics.matches} sets), "
        f"any {s_any:.1f} s ({run_any.stats.groups} groups, {run_any.stats.candidate_pairs} "
        f"candidate pairs), ratio any/all {s_any / s_all:.2f}"
    )
    return 0


def compare_with_all(args: argparse.Namespace) -> int:
    """Target all vs target any (m = P, every solver) on data where every match is at all P."""
    from party.protocol.driver import run_in_process
    from party.synthetic.metrics import evaluate, evaluate_sets

    p = args.parties
    ds, schema, tables = all_party_data(args)
    names = tuple(party_name(i) for i in range(p))
    for t in args.thresholds:
        base = ProtocolParameters(names, schema.output_bits, t, 0.0, one_to_one=True, target="all")
        t0 = time.perf_counter()
        q_all = evaluate(run_in_process(tables, base).matches, ds.truth)
        s_all = time.perf_counter() - t0
        line = f"t={t}: all F1 {q_all.f1:.4f} ({s_all:.1f} s)"
        for solver in SOLVERS:
            prm = ProtocolParameters(
                names, schema.output_bits, t, 0.0, target="any", min_parties=p, solver=solver
            )
            t0 = time.perf_counter()
            run = run_any_in_process(tables, prm)
            s_any = time.perf_counter() - t0
            sets: dict[str, list[tuple[int, str]]] = {}
            for q, rows in enumerate(run.matches):
                for r in rows:
                    sets.setdefault(r.linkage_id, []).append((q, r.record_id))
            q_any = evaluate_sets(list(sets.values()), ds.truth)
            line += f" | any/{solver} F1 {q_any.f1:.4f} ({s_any:.1f} s)"
        print(line, flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, default=5)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--single", type=float, default=0.3)
    ap.add_argument("--corruption", type=float, default=0.4)
    ap.add_argument("--households", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--thresholds", type=float, nargs="+", default=[0.7, 0.75, 0.8, 0.85, 0.9])
    ap.add_argument("--ref-python", type=Path, default=ROOT / ".venv-ref" / "bin" / "python")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON results here")
    ap.add_argument(
        "--all-data",
        action="store_true",
        help="instead: data where every match is at all parties (party.synthetic.generate), "
        "target all against target any with m = P, both scored as complete sets",
    )
    ap.add_argument(
        "--timing",
        action="store_true",
        help="instead: run time of target any (m = 2) against target all on the same generated "
        "all-party data (--parties x --records, s_t 0.8, s_m 0.7), same process and core",
    )
    args = ap.parse_args(argv)
    if args.timing:
        return timing(args)
    if args.all_data:
        return compare_with_all(args)
    p = args.parties
    ds = generate_subsets(
        p, args.records, args.single, args.corruption, args.seed, households=args.households
    )
    truth = ds.truth
    results: dict[str, Any] = {"data": ds.parameters, "ours": {}, "anonlink": {}}
    with tempfile.TemporaryDirectory() as tmp:
        files = write_dataset(ds, Path(tmp) / "data")
        schema, _, _ = load_schema_for(None, p)
        tables, _ = encode_parties(schema, simulation_secret(args.seed), files, "rec_id")
        low = min(args.thresholds)
        params = ProtocolParameters(
            parties=tuple(party_name(i) for i in range(p)),
            filter_bits=schema.output_bits,
            match_threshold=low,
            segment_threshold=0.0,
            target="any",
        )
        t0 = time.perf_counter()
        run = run_any_in_process(tables, params)
        results["ours_seconds"] = round(time.perf_counter() - t0, 1)
        lookup = [
            dict(zip(ps.tolist(), t.record_ids, strict=True))
            for ps, t in zip(run.pseudonyms, tables, strict=True)
        ]
        for solver in SOLVERS:
            for t in args.thresholds:
                kept = [m for m in run.matched_pairs if m[4] >= t]
                groups = solve_groups(kept, 2, solver, t)
                named = [[(q, lookup[q][k]) for q, k in g.members] for g in groups]
                results["ours"].setdefault(solver, {})[repr(t)] = _row(
                    evaluate_groups(named, truth)
                )
        if args.ref_python.exists():
            out = Path(tmp) / "ref.json"
            cmd = [str(args.ref_python), str(ROOT / "scripts" / "reference_linkage.py"), "link"]
            cmd += ["--schema", str(ROOT / "scripts" / "reference" / "clkhash-generated.json")]
            cmd += ["--secret", SECRET, "--out", str(out), "--thresholds"]
            cmd += [repr(t) for t in args.thresholds] + ["--"] + [str(f) for f in files]
            subprocess.run(cmd, check=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
            ref = json.loads(out.read_text())
            results["anonlink_seconds"] = ref["seconds"]
            for t in args.thresholds:
                named = [
                    [(q, truth.record_ids[q][r]) for q, r in g] for g in ref["thresholds"][repr(t)]
                ]
                results["anonlink"][repr(t)] = _row(evaluate_groups(named, truth))
        else:
            print(f"no comparator: {args.ref_python} missing (scripts/setup_reference.sh)")
    for name, by_t in [
        *((f"ours/{s}", results["ours"][s]) for s in SOLVERS),
        ("anonlink", results["anonlink"]),
    ]:
        for t, row in by_t.items():
            print(f"{name:20s} t={t:5s} " + " ".join(f"{k}={v:.4f}" for k, v in row.items()))
        if by_t:
            best_pair = max(by_t.items(), key=lambda kv: kv[1]["pair_f1"])
            best_group = max(by_t.items(), key=lambda kv: kv[1]["group_f1"])
            print(
                f"{name:20s} BEST pairwise F1 {best_pair[1]['pair_f1']:.4f} (t={best_pair[0]}), "
                f"exact-group F1 {best_group[1]['group_f1']:.4f} (t={best_group[0]})"
            )
    print(
        f"seconds: ours {results['ours_seconds']} (protocol, in-process), anonlink {results.get('anonlink_seconds')}"
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
