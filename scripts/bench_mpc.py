"""Benchmark the mpc3 engine (gate level, in process): AND gates/s, sets/s, bytes per set, vs segments.

    .venv/bin/python scripts/bench_mpc.py [--records 20000] [--layer-words 4194304] [--parties 3]

Everything runs in ONE process on one core: the three compute parties of a run take turns in one
thread (``party.mpc.driver.drive``), so "per CP" figures are the run's figures times 3. Printed:

1. AND-gate evaluations per second per core, bit-sliced (64 gates per word): the numba AND-share
   kernel alone, and kernel + the AES-CTR zero-share keystreams (what a compute party does per AND),
   against the same formula in numpy measured in the same run (ratio).
2. Bytes sent per candidate set per compute party (and AND gates, rounds per batch) for l = 1024 at
   P = 3, 5, 7 on random filters (data-independent except the tiny output opening).
3. Generated people (``party.synthetic``), encoded with the shipped schema (l = 1024): the segment
   protocol (in process, its default s_m and s_m = 0) and mpc3 on the same encodings: wall time of
   the comparison steps, the ratio mpc3 / segments, candidate sets per second, and F1 against the
   truth (one-to-one on, as in the shipped parameters), with the check that mpc3's matches equal the oracle's (s_m = 0 run) exactly.
4. Target any (``party.mpc.pairs``) against target all, mpc3 both, on the same generated people
   (``--any-records`` per party, ``--parties``): wall time and ratio any / all, candidate pairs vs
   sets, round bytes sent per candidate pair (set) per compute party, AND gates and rounds per
   batch, pairs (sets) per second for the 3 CPs, and quality (all: F1 one-to-one; any: pairwise and
   exact-group F1 of the default solver):

    .venv/bin/python scripts/bench_mpc.py --skip gates,bytes,segments --any-records 20000

5. Every core: the circuit of the three compute parties with 1 and ``--threads`` threads per
   compute party (``ComputeParty(workers=...)``), on the same input shares and keys, interleaved
   1, N, 1, N, best of two each: whole circuit seconds (candidate enumeration, gate layers,
   classification) and the gate layers alone (``MpcStats.gate_seconds``), the speedups, and the
   check that both classifications are identical (generated people, ``--threads-schema``), and
   before and after them the ceiling of ``scripts/thread_ceiling.py`` (what 1 -> N threads of
   perfectly parallel work give on this machine at the moment):

    .venv/bin/python scripts/bench_mpc.py --skip gates,bytes,segments,any --threads-records 200000

``--networked`` instead (the transport half): the same generated data set linked by real node
processes on loopback with mutual TLS (party/synthetic/network_sim.py), once in mode segments (the
reference: its default s_m, or ``--segments-s-m``) and once in mode mpc3. Prints the time ratio
mpc3 / segments (whole networked run, and the protocol stages after prepare), F1 of both next to
the plaintext oracle's, whether mpc3's matches equal the oracle's, and per compute party: candidate
sets, batches, rounds, AND gates, round bytes per candidate set, candidate sets per second of the
circuit stage and peak RSS, all as the nodes report them. ``--mpc3-only`` skips the segments run:

    .venv/bin/python scripts/bench_mpc.py --networked --records 100000
    .venv/bin/python scripts/bench_mpc.py --networked --mpc3-only --records 1000000 --no-reference \\
        --schema party/synthetic/data/schema_large.json --memory-budget-mib 3072 --timeout 3000

No asserts on time: benchmarks are noisy on a shared machine; the script prints ``uptime``.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from party.encoding.records import EncodedRecords  # noqa: E402
from party.mpc._numba_gates import and_share  # noqa: E402
from party.mpc.driver import run_keys, run_mpc3_in_process  # noqa: E402
from party.mpc.keys import ZeroShares  # noqa: E402
from party.mpc.pairs import run_mpc3_any_in_process  # noqa: E402
from party.protocol.driver import run_in_process  # noqa: E402
from party.protocol.params import ProtocolParameters  # noqa: E402
from party.synthetic.metrics import evaluate  # noqa: E402
from party.synthetic.metrics_any import evaluate_groups  # noqa: E402
from party.synthetic.simulation import (  # noqa: E402
    SimulationConfig,
    SimulationResult,
    prepare_encoded,
)

console = Console(width=150)


def _best(fn, repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bench_gates(words: int) -> None:
    rng = np.random.default_rng(0)
    x0, x1, y0, y1 = (rng.integers(0, 2**64, size=(1, 1, words), dtype=np.uint64) for _ in range(4))
    out = np.empty((1, 1, words), dtype=np.uint64)
    zero = ZeroShares(run_keys()[0])
    ka, kb = (k.copy() for k in zero.streams(0, 0, words))
    alpha = ka ^ kb
    and_share(x0, x1, y0, y1, ka, kb, out)  # compile
    t_kernel = _best(lambda: and_share(x0, x1, y0, y1, ka, kb, out))
    rounds = iter(range(1, 1000))
    t_alpha = _best(lambda: zero.streams(0, next(rounds), words))

    def numpy_and() -> None:
        np.bitwise_xor(
            np.bitwise_xor(x0 & (y0 ^ y1), x1 & y0, out=out),
            alpha[:words].reshape(out.shape),
            out=out,
        )

    t_numpy = _best(numpy_and)
    gates = 64 * words
    table = Table(title=f"AND gates per second per core (bit-sliced, a layer of {words:,} words)")
    for col in ("what", "gates/s", "vs numpy"):
        table.add_column(col, justify="right" if col != "what" else "left")
    table.add_row("numpy formula (reference)", f"{gates / t_numpy:.3g}", "1.00")
    table.add_row("numba AND-share kernel", f"{gates / t_kernel:.3g}", f"{t_numpy / t_kernel:.2f}")
    table.add_row("AES-CTR zero shares alone", f"{gates / t_alpha:.3g}", f"{t_numpy / t_alpha:.2f}")
    both = t_kernel + t_alpha
    table.add_row(
        "kernel + zero shares (a CP's AND)", f"{gates / both:.3g}", f"{t_numpy / both:.2f}"
    )
    console.print(table)


def _random_tables(p: int, per_block: int, blocks: int, l_bits: int) -> list[EncodedRecords]:
    rng = np.random.default_rng(p)
    n = per_block * blocks
    out = []
    for j in range(p):
        bits = rng.random((n, l_bits)) < 0.25
        packed = np.packbits(bits, axis=1, bitorder="little")
        words = packed.view("<u8").astype(np.uint64)
        digests = (np.arange(n, dtype=np.uint64) % np.uint64(blocks) + np.uint64(1)).reshape(n, 1)
        out.append(EncodedRecords(tuple(f"r{j}-{i}" for i in range(n)), words, l_bits, digests))
    return out


def bench_bytes(parties: list[int]) -> None:
    table = Table(title="Per candidate set and compute party, l = 1024, s_t = 0.8 (random filters)")
    for col in (
        "P",
        "sets",
        "bytes sent/set/CP",
        "goal",
        "AND gates/set",
        "rounds/batch",
        "sets/s (3 CPs, 1 core)",
    ):
        table.add_column(col, justify="right")
    for p in parties:
        per_block = {3: 12, 5: 4, 7: 3}.get(p, 3)
        blocks = max(1, 150_000 // per_block**p)
        tables = _random_tables(p, per_block, blocks, 1024)
        params = ProtocolParameters(
            tuple(f"p{j}" for j in range(p)),
            1024,
            0.8,
            0.0,
            mode="mpc3",
            memory_budget_bytes=2**30,
            target="all",
        )
        t0 = time.perf_counter()
        run = run_mpc3_in_process(tables, params)
        dt = time.perf_counter() - t0
        s = run.mpc_stats[0]
        sets = max(1, s.candidate_sets)
        table.add_row(
            str(p),
            f"{s.candidate_sets:,}",
            f"{s.bytes_sent / sets:.0f}",
            "<= 600" if p == 3 else "",
            f"{s.and_gates / sets:.0f}",
            f"{s.rounds / max(1, s.batches):.0f}",
            f"{s.candidate_sets / dt:,.0f}",
        )
    console.print(table)


def bench_vs_segments(records: int, parties: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SimulationConfig(parties=parties, records=records, seed=3, out_dir=Path(tmp))
        enc = prepare_encoded(cfg)
    l_bits = enc.tables[0].filter_bits
    names = tuple(f"p{j}" for j in range(parties))
    budget = 2**31
    rows = []

    def seg(s_m: float):  # type: ignore[no-untyped-def]
        params = ProtocolParameters(names, l_bits, 0.8, s_m, True, memory_budget_bytes=budget)
        t0 = time.perf_counter()
        run = run_in_process(enc.tables, params)
        return run, time.perf_counter() - t0

    seg_default, t_default = seg(0.7)
    seg_zero, t_zero = seg(0.0)
    params = ProtocolParameters(
        names, l_bits, 0.8, 0.0, True, mode="mpc3", memory_budget_bytes=budget
    )
    t0 = time.perf_counter()
    mpc = run_mpc3_in_process(enc.tables, params)
    t_mpc = time.perf_counter() - t0
    same = _sets(mpc) == _sets(seg_zero)
    truth = enc.data.truth
    for name, run, dt in (
        ("segments, s_m = 0.7 (default)", seg_default, t_default),
        ("segments, s_m = 0 (= oracle)", seg_zero, t_zero),
        ("mpc3 (3 CPs in this process)", mpc, t_mpc),
    ):
        q = evaluate(run.matches, truth)
        rows.append((name, dt, run.classification.sets_summed, q.f1, run.classification.matches))
    cand = mpc.classification.sets_summed
    table = Table(
        title=f"Generated people, P = {parties}, {records:,} records per party, l = {l_bits}, "
        "s_t = 0.8, one-to-one"
    )
    for col in ("run", "seconds", "sets compared", "F1", "matches", "time / segments default"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for name, dt, sets, f1, m in rows:
        table.add_row(name, f"{dt:.2f}", f"{sets:,}", f"{f1:.4f}", str(m), f"{dt / t_default:.2f}")
    console.print(table)
    console.print(
        f"mpc3 candidate sets: {cand:,}; {cand / t_mpc:,.0f} sets/s for the 3 CPs on one core "
        f"(~{3 * cand / t_mpc:,.0f} per CP); mpc3 matches equal the s_m = 0 (oracle) run: {same}"
    )


def bench_any(records: int, parties: int) -> None:
    """Part 4: mpc3 target any vs target all on one generated data set (module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SimulationConfig(parties=parties, records=records, seed=3, out_dir=Path(tmp))
        enc = prepare_encoded(cfg)
    l_bits = enc.tables[0].filter_bits
    common = dict(
        parties=tuple(f"p{j}" for j in range(parties)),
        filter_bits=l_bits,
        match_threshold=0.8,
        segment_threshold=0.0,
        memory_budget_bytes=2**33,  # the solver of many matched pairs
        mode="mpc3",
    )
    t0 = time.perf_counter()
    run_all = run_mpc3_in_process(
        enc.tables, ProtocolParameters(**common, one_to_one=True, target="all")
    )
    t_all = time.perf_counter() - t0
    t0 = time.perf_counter()
    run_any = run_mpc3_any_in_process(enc.tables, ProtocolParameters(**common, target="any"))
    t_any = time.perf_counter() - t0
    truth = enc.data.truth
    f1_all = evaluate(run_all.matches, truth).f1
    groups: dict[str, list[tuple[int, str]]] = {}
    for q, rows in enumerate(run_any.matches):
        for r in rows:
            groups.setdefault(r.linkage_id, []).append((q, r.record_id))
    quality = evaluate_groups(list(groups.values()), truth, 2)
    table = Table(
        title=f"mpc3, target any vs all: generated people, P = {parties}, {records:,} records per "
        f"party, l = {l_bits}, s_t = 0.8 (3 CPs in this process, one core)"
    )
    for col in (
        "target",
        "seconds",
        "candidates",
        "round bytes/candidate/CP",
        "AND gates/candidate",
        "rounds/batch",
        "candidates/s",
        "quality",
        "time / all",
    ):
        table.add_column(col, justify="left" if col in ("target", "quality") else "right")
    for name, stats, dt, q in (
        ("all (sets, one-to-one)", run_all.mpc_stats[0], t_all, f"F1 {f1_all:.4f}"),
        (
            "any (pairs, weakest-link)",
            run_any.mpc_stats[0],
            t_any,
            f"pairwise F1 {quality.pairwise.f1:.4f}, exact-group F1 {quality.groups.f1:.4f}",
        ),
    ):
        n = max(1, stats.candidate_sets)
        table.add_row(
            name,
            f"{dt:.2f}",
            f"{stats.candidate_sets:,}",
            f"{stats.bytes_sent / n:.0f}",
            f"{stats.and_gates / n:.0f}",
            f"{stats.rounds / max(1, stats.batches):.0f}",
            f"{stats.candidate_sets / dt:,.0f}",
            q,
            f"{dt / t_all:.2f}",
        )
    console.print(table)
    steps = run_any.step_seconds
    console.print(
        f"target any: {run_any.stats.matched_pairs:,} matched pairs, {run_any.stats.groups:,} groups"
        f" (circuit {steps['compute']:.2f} s, solver {steps['solve']:.2f} s, input shares "
        f"{steps['input_shares']:.2f} s); target all: {run_all.classification.matches:,} matched "
        f"sets (circuit {run_all.metrics.step_seconds['compute']:.2f} s)"
    )


def bench_threads(records: int, parties: int, schema: Path | None, workers: int) -> None:
    """The three compute parties' circuit with 1 and ``workers`` threads each, same inputs/keys."""
    from thread_ceiling import thread_ceiling

    from party.mpc.compute import ComputeParty
    from party.mpc.driver import drive
    from party.mpc.inputs import input_shares
    from party.protocol.blocks import common_blocks
    from party.protocol.engine import PartyEngine

    with tempfile.TemporaryDirectory() as tmp:
        cfg = SimulationConfig(
            parties=parties, records=records, seed=3, schema_path=schema, out_dir=Path(tmp)
        )
        enc = prepare_encoded(cfg)
    names = tuple(f"p{j}" for j in range(parties))
    l_bits = enc.tables[0].filter_bits
    params = ProtocolParameters(
        names, l_bits, 0.8, 0.0, True, mode="mpc3", memory_budget_bytes=2**32, target="all"
    )
    engines = [PartyEngine(i, params, enc.tables[i]) for i in range(parties)]
    common = common_blocks([e.block_digests() for e in engines])
    for e in engines:
        e.set_common_blocks(common)
    shares = [s for e in engines for s in input_shares(e)]
    keys = run_keys()
    seconds: dict[int, list[float]] = {}
    gates: dict[int, list[float]] = {}
    cpu: dict[int, list[float]] = {}  # process CPU seconds (all threads) of the circuit
    outcomes = {}
    console.print(f"threads: {records:,} records per party, P = {parties}; {_load()}")
    ceiling_before = thread_ceiling(workers)[1]
    for w in (1, workers, 1, workers):
        cps = [ComputeParty(i, params, keys[i], workers=w) for i in range(3)]
        for sh in shares:
            cps[sh.target].receive_input(sh)
        c0, t0 = time.process_time(), time.perf_counter()
        out = drive([cp.run() for cp in cps])
        seconds.setdefault(w, []).append(time.perf_counter() - t0)
        cpu.setdefault(w, []).append(time.process_time() - c0)
        gates.setdefault(w, []).append(sum(o.stats.gate_seconds for o in out))
        outcomes[w] = out[0]
    one, many = outcomes[1], outcomes[workers]
    same = np.array_equal(
        one.classification.candidates, many.classification.candidates
    ) and np.array_equal(one.classification.similarities, many.classification.similarities)
    sets = one.stats.candidate_sets
    t1, tw = min(seconds[1]), min(seconds[workers])
    g1, gw = min(gates[1]), min(gates[workers])
    table = Table(
        title=f"mpc3 circuit of 3 compute parties in one process (take turns), {sets:,} sets, "
        f"{one.stats.and_gates:,} AND gates per CP"
    )
    for col in (
        "threads per CP",
        "circuit s (3 CPs)",
        "of which gate layers s",
        "CPU s",
        "sets/s per CP",
    ):
        table.add_column(col, justify="right")
    for k, t, g in ((1, t1, g1), (workers, tw, gw)):
        table.add_row(str(k), f"{t:.2f}", f"{g:.2f}", f"{min(cpu[k]):.2f}", f"{3 * sets / t:,.0f}")
    console.print(table)
    console.print(
        f"speedup 1 -> {workers} threads (best of 2, interleaved): circuit {t1 / tw:.2f}x, gate "
        f"layers {g1 / gw:.2f}x; identical classification: {same}; {_load()}"
    )
    console.print(f"before: {ceiling_before}\nafter:  {thread_ceiling(workers)[1]}")


def _sets(run) -> set[tuple[tuple[int, ...], float]]:  # type: ignore[no-untyped-def]
    cls = run.classification
    inv = [{int(v): i for i, v in enumerate(ps)} for ps in run.pseudonyms]
    return {
        (tuple(inv[j][int(r[j])] for j in range(len(r))), float(s))
        for r, s in zip(cls.candidates, cls.similarities, strict=True)
    }


# -- networked: mpc3 vs segments over real nodes (the transport half) ----------------------------

PROTOCOL_STAGES = ("exchanging", "comparing", "summing")


def _stage_max(result: SimulationResult, stage: str) -> float:
    return float(result.steps.get(f"nodes.{stage} (max over parties)", 0.0))


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) {five:.1f} (5 min) on {os.cpu_count()} cores"


def _summary_line(name: str, r: SimulationResult) -> str:
    q, o = r.quality, r.oracle_quality
    oracle = "n/a" if o is None else f"{o.f1:.4f}"
    protocol = sum(_stage_max(r, s) for s in PROTOCOL_STAGES)
    return (
        f"{name:9s} networked run {r.steps.get('networked run', 0.0):8.2f} s | prepare "
        f"{_stage_max(r, 'audited'):7.2f} s | protocol stages {protocol:8.2f} s "
        f"(exchanging {_stage_max(r, 'exchanging'):.2f}, comparing {_stage_max(r, 'comparing'):.2f}"
        f", summing {_stage_max(r, 'summing'):.2f}) | F1 {q.f1:.4f} (oracle {oracle}) | "
        f"matched sets {q.matched_sets}"
    )


def _compute_party_lines(r: SimulationResult) -> list[str]:
    """Per compute party: the figures its node reported (PartySummary mpc fields)."""
    lines = []
    comparing = _stage_max(r, "comparing")
    for info in r.mpc_summaries:
        sets = info["candidate_sets"]
        per_set = info["round_bytes"] / sets if sets else 0.0
        rate = sets / comparing if comparing else 0.0
        lines.append(
            f"  {info['party']}: {sets} candidate sets, {info['batches']} batches, "
            f"{info['rounds']} rounds, {info['and_gates']} AND gates, {per_set:.0f} round bytes "
            f"sent per candidate set, {rate:,.0f} candidate sets/s in the circuit stage, peak RSS "
            f"{info['peak_rss_bytes'] / 2**20:.0f} MiB"
        )
    return lines


def networked(args: argparse.Namespace) -> None:
    """mpc3 vs segments over real processes on one data set (see the module docstring)."""
    from dataclasses import replace

    from party.synthetic.network_sim import run_networked_simulation

    out = args.out or Path("results") / time.strftime("bench-mpc-net-%Y%m%d-%H%M%S")
    base = SimulationConfig(
        parties=args.parties,
        records=args.records,
        seed=args.seed,
        schema_path=args.schema,
        memory_budget_mib=args.memory_budget_mib,
        oracle=args.oracle,
        segment_threshold=args.segments_s_m,
    )
    print(f"networked mpc3 benchmark: P = {args.parties}, {args.records} records per party")
    print(f"before: {_load()}")
    results: dict[str, SimulationResult] = {}
    modes = ["mpc3"] if args.mpc3_only else ["segments", "mpc3"]
    for mode in modes:
        cfg = replace(base, mode=mode, out_dir=out / mode)
        t0 = time.perf_counter()
        results[mode] = run_networked_simulation(
            cfg, None, timeout=args.timeout, reference=not args.no_reference
        )
        print(f"{mode}: whole command {time.perf_counter() - t0:.1f} s; after: {_load()}")
    print()
    for mode, r in results.items():
        print(_summary_line(mode, r))
    m = results["mpc3"]
    print("mpc3 compute parties (as their nodes report):")
    for line in _compute_party_lines(m):
        print(line)
    if m.oracle_quality is not None:
        same = m.totals.get("identical_to_in_process")
        print(
            f"mpc3 matches equal the in-process mpc3 run: {same}; F1 equal to the oracle's: "
            f"{m.quality.f1 == m.oracle_quality.f1} "
            f"(matched sets {m.quality.matched_sets} vs {m.oracle_quality.matched_sets})"
        )
    if "segments" in results:
        s = results["segments"]
        whole = m.steps["networked run"] / s.steps["networked run"]
        proto_m = sum(_stage_max(m, st) for st in PROTOCOL_STAGES)
        proto_s = sum(_stage_max(s, st) for st in PROTOCOL_STAGES)
        print(
            f"ratio mpc3 / segments: networked run {whole:.2f}x, protocol stages "
            f"{proto_m / proto_s if proto_s else float('inf'):.2f}x (goal <= 3); "
            f"segments s_m = {s.config.s_m}"
        )
    print(f"reports: {out}/<mode>/report.md")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer-words", type=int, default=1 << 22)
    ap.add_argument("--records", type=int, default=20000, help="records per party (part 3)")
    ap.add_argument("--parties", type=int, default=3, help="P of part 3")
    ap.add_argument("--bytes-parties", default="3,5,7", help="P values of part 2")
    ap.add_argument("--any-records", type=int, default=20000, help="records per party (part 4)")
    ap.add_argument(
        "--skip",
        default="",
        help="comma list of parts to skip: gates,bytes,segments,any,threads",
    )
    ap.add_argument("--threads", type=int, default=2, help="threads per CP in part 5")
    ap.add_argument("--threads-records", type=int, default=50000, help="records per party, part 5")
    ap.add_argument(
        "--threads-schema",
        type=Path,
        default=Path("party/synthetic/data/schema_large.json"),
        help="linkage schema of part 5",
    )
    net = ap.add_argument_group(
        "networked (--networked): mpc3 vs segments over real node processes"
    )
    net.add_argument("--networked", action="store_true", help="run the networked benchmark only")
    net.add_argument("--mpc3-only", action="store_true", help="skip the segments reference run")
    net.add_argument("--seed", type=int, default=1)
    net.add_argument("--schema", type=Path, default=None, help="linkage schema (default: shipped)")
    net.add_argument("--memory-budget-mib", type=int, default=1024, help="per node")
    net.add_argument(
        "--segments-s-m", type=float, default=None, help="s_m of the segments run (default s_t-0.1)"
    )
    net.add_argument("--oracle", choices=["auto", "full", "sm0", "none"], default="auto")
    net.add_argument("--no-reference", action="store_true", help="skip local reference and oracle")
    net.add_argument("--timeout", type=float, default=1800.0)
    net.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.networked:
        networked(args)
        return
    skip = set(filter(None, args.skip.split(",")))
    console.print(
        f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"
    )
    if "gates" not in skip:
        bench_gates(args.layer_words)
    if "bytes" not in skip:
        bench_bytes([int(p) for p in args.bytes_parties.split(",")])
    if "segments" not in skip:
        bench_vs_segments(args.records, args.parties)
    if "any" not in skip:
        bench_any(args.any_records, args.parties)
    if "threads" not in skip:
        bench_threads(args.threads_records, args.parties, args.threads_schema, args.threads)
    console.print(
        f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"
    )


if __name__ == "__main__":
    main()
