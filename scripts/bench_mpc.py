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
   truth, with the check that mpc3's matches equal the oracle's (s_m = 0 run) exactly.

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
from party.protocol.driver import run_in_process  # noqa: E402
from party.protocol.params import ProtocolParameters  # noqa: E402
from party.synthetic.metrics import evaluate  # noqa: E402
from party.synthetic.simulation import SimulationConfig, prepare_encoded  # noqa: E402

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
            tuple(f"p{j}" for j in range(p)), 1024, 0.8, 0.0, mode="mpc3", memory_budget_bytes=2**30
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
        params = ProtocolParameters(names, l_bits, 0.8, s_m, memory_budget_bytes=budget)
        t0 = time.perf_counter()
        run = run_in_process(enc.tables, params)
        return run, time.perf_counter() - t0

    seg_default, t_default = seg(0.7)
    seg_zero, t_zero = seg(0.0)
    params = ProtocolParameters(names, l_bits, 0.8, 0.0, mode="mpc3", memory_budget_bytes=budget)
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
        title=f"Generated people, P = {parties}, {records:,} records per party, l = {l_bits}, s_t = 0.8"
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


def _sets(run) -> set[tuple[tuple[int, ...], float]]:  # type: ignore[no-untyped-def]
    cls = run.classification
    inv = [{int(v): i for i, v in enumerate(ps)} for ps in run.pseudonyms]
    return {
        (tuple(inv[j][int(r[j])] for j in range(len(r))), float(s))
        for r, s in zip(cls.candidates, cls.similarities, strict=True)
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer-words", type=int, default=1 << 22)
    ap.add_argument("--records", type=int, default=20000, help="records per party (part 3)")
    ap.add_argument("--parties", type=int, default=3, help="P of part 3")
    ap.add_argument("--bytes-parties", default="3,5,7", help="P values of part 2")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: gates,bytes,segments")
    args = ap.parse_args()
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
    console.print(
        f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"
    )


if __name__ == "__main__":
    main()
