#!/usr/bin/env python
"""Scaling benchmark: speedup from 1 to all cores, time and memory exponents in N, and a 4-worker
Dask cluster's CPU per worker against the ideal quarter.

    .venv/bin/python scripts/bench_scaling.py cores   [--records 200000] [--encoding-only | --comparison-only] [--target any|all]
    .venv/bin/python scripts/bench_scaling.py sizes   [--sizes 25000,50000,100000,200000,400000,1000000]
    .venv/bin/python scripts/bench_scaling.py cluster [--records 200000] [--cluster-workers 4] [--comparison-only | --mpc3]

All on generated people (``party.synthetic.generate``: many distinct names and addresses, 20%
corruption, 50% overlap) with the shipped schema (``party/synthetic/data/schema.json``: six
features, two blocking keys; l = 1020 so that P = 3 divides it), three parties, s_t = 0.8, s_m = 0.7.

- ``cores``: the same work with 1 and with all cores, measured in the same run: encoding one
  party's CSV (``encode_csv_parallel`` with 1 process (the plain encoder), then with W worker
  processes reading and encoding their own ranges with first sight of a value several meet
  routed to one of them per wave (the default, ``routed_sight``), then reading their own
  ranges each computing first sight itself (``routed_sight=False``), then given batches the
  parent reads, alternated ``--repeat`` times (default 3): the best of each is the headline,
  and every run is printed with the speedup of its round and the median of those; the persistent workers are started once before, as a node starts them, and
  that start-up is printed; CPU seconds = this process + the workers' tasks, with the parent's
  share, each worker's, the first-sight and CSV-reading parts, and the speedup that CPU allows
  on idle cores: one process's CPU over the larger of the busiest process and all CPU / cores)
  and the comparison step of the three parties (``run_in_process`` with 1 and W kernel threads,
  alternated ``--repeat`` times, best of each and every pair printed;
  ``--target any``, the shipped default, or ``--target all``; ``--budget-mib``, default 2048,
  the node's default 3072). Checks that the outputs are identical.
  Prints wall-clock speedups and the CPU ratio, and before and after the comparison runs the
  ceiling of ``scripts/thread_ceiling.py`` (a perfectly parallel loop, 1 vs W threads, same
  pool): on a shared machine a process may get one core however many threads it runs; after
  them also its throughput- and memory-bound ceilings (two hyperthreads of one physical core, or
  shared caches, give those loops less than W x however idle the machine is).
- ``sizes``: for each N (records per party) a fresh subprocess generates the data, encodes the
  three parties (all cores) and runs the protocol in process; it reports encode and protocol
  wall-clock and CPU seconds (CPU is the figure that survives a loaded machine) and its peak RSS (all three parties in one process). The exponents are
  least-squares slopes of log(time) and log(peak RSS) against log(N).
- ``cluster``: encodes one CSV on an embedded Dask LocalCluster of 4 worker processes (TLS) and
  reports each worker's CPU seconds against the ideal: a quarter of the CPU one process needs
  for the same CSV (measured in the same run, output checked identical; the one-process
  reference and the cluster alternated ``--repeat`` times, the best reference taken for every
  cluster run, each run's ratios and their median printed). Two measures per
  worker: the CPU of its tasks (``time.process_time`` around each first-sight and batch task:
  every thread of the process while the task runs) and the CPU of the whole worker process from
  before to after the encoding (``os.times`` through ``client.run``: also Dask's event loop,
  receiving arguments and sending results between tasks), with its task threads' share
  (``/proc/self/task``). The worst worker's ratio is the figure of merit. Also printed: each
  worker process's CPU from its start to the encoding (start-up: the embedded cluster is
  started for each encoding; its workers are forked from a forkserver that has Dask and the
  encoder loaded, whose CPU is printed too: paid once per node process) and from its start to
  the end of the encoding (the nannies that start and watch the workers run in this process,
  counted in its CPU). With ``--comparison-only``: party 0's comparison (target any) on the
  cluster's workers (``party.cluster_pairs``: every pair of parties in ranges of blocks and
  buckets of a's rows), each worker's task CPU against a k-th of the pair kernel's CPU on one
  thread for the same pairs (measured before each cluster run), the node's CPU and wall, the
  bytes sent, moved from task to task and received, and whether the survivors equal the
  threads' (the engine's comparison on 2 threads, once). With ``--mpc3``: compute party 0's
  mpc3 circuit (target any, s_t 0.8) with its batches on the cluster's workers
  (``party.cluster_mpc``: one actor per worker, a window's batches side by side). The three
  compute parties first run once in this process, recording what compute parties 1 and 2 send
  compute party 0 and what it sends (``record_peers``: 2 x 466 MB at 3 x 400k, held in
  memory); then compute party 0 runs alone, on one thread and on the cluster, given those
  payloads (``replay_peers``, which checks each payload it sends against the recording), as if
  the other two ran on machines of their own: this process does only its node part while the
  workers compute. Each worker's CPU
  in its actor's steps (Dask's calls and its round channel's thread) against a k-th of the same
  batches' thread CPU on one thread (``LocalCircuits``, measured before each cluster run), and
  its whole process's; the steps, the shares sent, and whether the matched pairs are
  identical.
  For the comparison and the circuit the one-thread reference is also measured beside busy
  processes (``busy_neighbours``): on a core it shares with one (both pinned to it, as a
  worker's core is time-shared with the node and the other workers when there are more workers
  than cores), and with every other core busy (as in a k-worker run); the busiest worker is
  printed against a k-th of each too. The ideal stays the quiet thread's; the other figures
  tell what the split costs beyond sharing a core, or beyond a fully busy machine.

Load matters (seven jobs may share this machine): the 1-minute load average is printed with
every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SCHEMA = ROOT / "party" / "synthetic" / "data" / "schema.json"
SECRET = bytes.fromhex("5ca1ab1e" * 8)


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


#: a process that keeps a core busy (hashing a 1 MiB block in a loop)
NEIGHBOUR = (
    "import hashlib\nblock = bytes(1 << 20)\nwhile True:\n    hashlib.sha256(block).digest()\n"
)


@contextlib.contextmanager
def busy_neighbours(where: str) -> Iterator[bool]:
    """While the block runs, this thread is pinned to one core with busy processes
    (``NEIGHBOUR``) beside it: ``where`` "core": one on that core, time-shared with this thread,
    as an embedded worker's core is with the node and the other workers when there are more of
    them than cores; "others": one on each of the machine's other cores, every core busy, as
    in a k-worker run on this machine (whether that alone makes the work dearer per
    CPU-second). Yields False, doing nothing, where a thread cannot be pinned (not Linux) or
    there is no other core."""
    if not hasattr(os, "sched_setaffinity"):
        yield False
        return
    before = os.sched_getaffinity(0)
    core = min(before)
    cores = [core] if where == "core" else sorted(before - {core})
    if not cores:
        yield False
        return
    neighbours = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR]) for _ in cores]
    try:
        for n, at in zip(neighbours, cores, strict=True):
            os.sched_setaffinity(n.pid, {at})
        os.sched_setaffinity(0, {core})  # 0: the calling thread
        time.sleep(0.3)  # the neighbours started and hashing
        yield True
    finally:
        os.sched_setaffinity(0, before)
        for n in neighbours:
            n.kill()
            n.wait()


#: the one-thread references beside busy processes (``busy_neighbours``), as printed
LOADED = {"core": "sharing its core with a busy process", "others": "with the other cores busy"}


def loaded_reference(quiet: list[float], loaded: dict[str, list[float]], k: int) -> str:
    """The one-thread references beside busy processes against the quiet one."""
    parts = []
    for where, label in LOADED.items():
        got = loaded.get(where)
        if not got:
            parts.append(f"the one thread {label}: not measured (threads cannot be pinned here)")
            continue
        parts.append(
            f"the one thread {label} {min(got):.2f} CPU-s (best of "
            f"{', '.join(f'{c:.2f}' for c in got)}: {min(got) / min(quiet):.2f}x the quiet "
            f"thread; a {k}-th: {min(got) / k:.2f} CPU-s)"
        )
    return "; ".join(parts)


def against_loaded(worst: list[float], ideal: float, loaded: dict[str, list[float]], k: int) -> str:
    """The busiest workers' ratios (to ``ideal``) against a k-th of each loaded reference."""
    parts = []
    for where, label in LOADED.items():
        got = loaded.get(where)
        if got:
            ratios = [r * ideal * k / min(got) for r in worst]
            parts.append(
                f"against a {k}-th of the one thread {label}: "
                f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f}); "
            )
    return "".join(parts)


def make_data(folder: Path, n: int, seed: int = 7) -> list[Path]:
    from party.synthetic.generator import generate, write_dataset

    return write_dataset(generate(3, n, seed=seed), folder)


def schema():  # type: ignore[no-untyped-def]
    from party.encoding.schema import parse_schema

    raw = json.loads(SCHEMA.read_text())
    raw["l"] = 1020  # P = 3 must divide l (as scripts/simulate.py does)
    return parse_schema(raw)


def params(target: str = "all", budget_mib: int = 2048):  # type: ignore[no-untyped-def]
    """The run's parameters: s_t 0.8, s_m 0.7, a ``budget_mib`` budget (2 GiB unless asked;
    a node's default is 3 GiB); ``target`` all (one-to-one off) or any (the shipped default:
    groups at two or more parties)."""
    from party.protocol.params import ProtocolParameters

    return ProtocolParameters(
        parties=("a", "b", "c"),
        filter_bits=schema().output_bits,
        match_threshold=0.8,
        segment_threshold=0.7,
        memory_budget_bytes=budget_mib << 20,
        target=target,
    )


def encode(path: Path, workers: int, **how: Any):  # type: ignore[no-untyped-def]
    """(records, wall seconds, CPU seconds in this process + in the workers, worker stats);
    ``how``: ``encode_csv_parallel``'s options (default: the workers read and encode their own
    ranges, first sight routed per wave; ``routed_sight=False``: each computes its own first
    sight; ``own_ranges=False``: they get batches the parent reads)."""
    from party.encoding.encoder import Encoder
    from party.encoding.parallel import ParallelStats, encode_csv_parallel

    stats = ParallelStats()
    c0, t0 = self_cpu(), time.perf_counter()
    records, _ = encode_csv_parallel(
        Encoder(schema(), SECRET),
        path,
        workers=workers,
        id_column="rec_id",
        stats=stats,
        **how,
    )
    return records, time.perf_counter() - t0, self_cpu() - c0 + stats.cpu_seconds, stats


def start_workers(workers: int) -> float:
    """Start the persistent encoding workers (once per process, as a node does); wall seconds."""
    from party.encoding.parallel import start_lanes

    t0 = time.perf_counter()
    start_lanes(workers)
    return time.perf_counter() - t0


def worker_cpu(stats) -> str:  # type: ignore[no-untyped-def]
    per = ", ".join(f"{c:.2f}" for c in sorted(stats.cpu_by_worker.values(), reverse=True))
    sight = "first sight" if not stats.shared_values else "exchanging first sight"
    return (
        f"per worker {per}; {sight} {stats.first_sight_seconds:.2f} and reading "
        f"{stats.reading_seconds:.2f} ({stats.ranges} CSV ranges) of them; "
        f"{stats.shared_values} first-sight entries installed from other workers"
    )


def idle_bound(one: float, parent: float, stats, cores: int) -> float:  # type: ignore[no-untyped-def]
    """The best speedup ``cores`` idle cores allow for this CPU (arithmetic, not a measurement):
    no faster than the busiest process, nor than all the CPU spread evenly over the cores."""
    busiest = max([parent, *stats.cpu_by_worker.values()])
    return one / max(busiest, (parent + stats.cpu_seconds) / cores)


def samples(ones: list[float], alls: list[float]) -> str:
    """Every alternated pair of wall-clock times, its ratio, and the median ratio."""
    ratios = [one / other for one, other in zip(ones, alls, strict=True)]
    pairs = ", ".join(f"{one:.2f}/{other:.2f}s" for one, other in zip(ones, alls, strict=True))
    return f"{pairs}; speedup per pair {', '.join(f'{r:.2f}x' for r in ratios)}, median {statistics.median(ratios):.2f}x"


def matched_sets(run) -> list[tuple[tuple[int, ...], float]]:  # type: ignore[no-untyped-def]
    """The initiator's matched sets (target any: pairs) by record position instead of by the
    run's fresh pseudonyms (-1: no record of that party), with their Dice, sorted: two runs agree
    iff they matched the same sets with the same similarities. (The solved groups are not
    compared: the solver breaks ties by pseudonym, which differ between runs.)"""
    import numpy as np

    cls = run.classification
    cols = []
    for j, pseudonyms in enumerate(run.pseudonyms):
        order = np.argsort(pseudonyms, kind="stable")
        col = cls.candidates[:, j]
        at = order[np.minimum(np.searchsorted(pseudonyms[order], col), order.size - 1)]
        cols.append(np.where(col == 0, -1, at))
    rows = np.stack(cols, axis=1).tolist() if cols else []
    return sorted(zip(map(tuple, rows), cls.similarities.tolist(), strict=True))


def cmd_cores(args: argparse.Namespace) -> None:
    import numpy as np
    from thread_ceiling import thread_ceiling

    from party.encoding.parallel import available_cores
    from party.protocol.driver import run_in_process
    from party.protocol.kernel import warm_up

    w = args.workers or available_cores()
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as d:
        csvs = make_data(Path(d), args.records)
        print(f"{args.records} records per party, {w} cores; {load()}")
        startup = start_workers(w)
        best: dict[str, tuple[float, float, Any]] = {}
        outputs = {}
        # 1 process; W workers reading and encoding their own ranges, first sight of a value
        # several meet routed to one of them per wave (the default); the same, each worker
        # computing first sight of every value it meets; W workers given batches the parent
        # reads: best of 2 each
        runs: dict[str, tuple[int, dict[str, bool]]] = {
            "1": (1, {}),
            "routed first sight, the default": (w, {}),
            "own ranges": (w, {"routed_sight": False}),
            "parent reads": (w, {"own_ranges": False}),
        }
        walls: dict[str, list[float]] = {}
        for k in () if args.comparison_only else [*runs] * args.repeat:
            records, t, c, stats = encode(csvs[0], runs[k][0], **runs[k][1])
            outputs[k] = records
            walls.setdefault(k, []).append(t)
            if k not in best or t < best[k][0]:
                best[k] = (t, c, stats)
        for k in () if args.comparison_only else list(runs)[1:]:
            r1, rw = outputs["1"], outputs[k]
            same = r1.record_ids == rw.record_ids and np.array_equal(r1.filters, rw.filters)
            same = same and np.array_equal(r1.block_digests, rw.block_digests)
            (t1, c1, _), (tw, cw, sw) = best["1"], best[k]
            parent = cw - sw.cpu_seconds
            print(
                f"encoding 1 party (best of {args.repeat}): 1 process {t1:.2f}s ({c1:.2f} CPU-s), {w} worker "
                f"processes ({k}) {tw:.2f}s ({cw:.2f} CPU-s: parent {parent:.2f}, "
                f"{worker_cpu(sw)}): speedup {t1 / tw:.2f}x, CPU {cw / c1:.2f}x of one process "
                f"(bound on {w} idle cores: {idle_bound(c1, parent, sw, w):.2f}x); "
                f"identical: {same}; workers started once before: {startup:.2f}s; {load()}\n"
                f"  every run: {samples(walls['1'], walls[k])}"
            )
        if args.encoding_only:
            return
        tables = [encode(p, w)[0] for p in csvs]
        warm_up()
        ceiling_before = thread_ceiling(w)[1]
        times: dict[int | str, list[float]] = {}
        sets = {}
        cpu: dict[int, list[float]] = {}
        for k in (1, w) * args.repeat:
            c0, t0 = self_cpu(), time.perf_counter()
            run = run_in_process(tables, params(args.target, args.budget_mib), workers=k)
            times.setdefault(k, []).append(time.perf_counter() - t0)
            cpu.setdefault(k, []).append(self_cpu() - c0)
            compare = run.metrics.step_seconds["compare"]
            times.setdefault(f"compare{k}", []).append(compare)
            sets[k] = (run.classification.sets_summed, matched_sets(run))
        c_1, c_w = min(times["compare1"]), min(times[f"compare{w}"])
        print(
            f"comparison of 3 parties (target {args.target}): 1 thread {c_1:.2f}s, {w} threads {c_w:.2f}s: speedup "
            f"{c_1 / c_w:.2f}x (best of {args.repeat}); whole protocol {min(times[1]):.2f}s vs "
            f"{min(times[w]):.2f}s ({min(cpu[1]):.2f} vs {min(cpu[w]):.2f} CPU-s); identical "
            f"summed sets and matched sets: {sets[1] == sets[w]} ({sets[w][0]:,} sets summed, "
            f"{len(sets[w][1]):,} matched); {load()}\n"
            f"  every run: {samples(times['compare1'], times[f'compare{w}'])}"
        )
        print(f"before: {ceiling_before}\nafter:  {thread_ceiling(w)[1]}")
        for kind in ("throughput", "memory"):  # what the cores give ALU- and cache-bound loops
            print(f"        {thread_ceiling(w, kind=kind)[1]}")


def run_one(n: int, workers: int) -> dict[str, float]:
    """One size in this process (called in a fresh subprocess)."""
    from party.encoding.parallel import resolve_workers
    from party.protocol.driver import run_in_process
    from party.protocol.kernel import warm_up

    warm_up()
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as d:
        t0 = time.perf_counter()
        csvs = make_data(Path(d), n)
        t_gen = time.perf_counter() - t0
        t0 = time.perf_counter()
        encoded = [encode(p, workers) for p in csvs]
        tables = [e[0] for e in encoded]
        t_enc = time.perf_counter() - t0
        cpu_enc = sum(e[2] for e in encoded)
        t0, c0 = time.perf_counter(), self_cpu()
        run = run_in_process(tables, params(), workers=resolve_workers(workers))
        t_proto, cpu_proto = time.perf_counter() - t0, self_cpu() - c0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "n": n,
        "generate_s": t_gen,
        "encode_s": t_enc,
        "encode_cpu_s": cpu_enc,
        "protocol_s": t_proto,
        "protocol_cpu_s": cpu_proto,
        "compare_s": run.metrics.step_seconds["compare"],
        "candidate_sets": sum(c.candidate_sets for c in run.metrics.comparison),
        "peak_rss_bytes": rss,
        "load": os.getloadavg()[0],
    }


def slope(xs: list[float], ys: list[float]) -> float:
    lx = [math.log(x) for x in xs]
    ly = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )


def cmd_sizes(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "one", "--records", str(n), "--workers", str(args.workers)],
            check=True,
            capture_output=True,
            text=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(
            f"N={n:>8}: encode {row['encode_s']:7.2f}s ({row['encode_cpu_s']:.1f} CPU-s)  "
            f"protocol {row['protocol_s']:6.2f}s ({row['protocol_cpu_s']:.1f} CPU-s) "
            f"(compare {row['compare_s']:.2f}s, {row['candidate_sets']:,} candidate sets)  "
            f"peak RSS {row['peak_rss_bytes'] / 2**30:.2f} GiB  load {row['load']:.1f}",
            flush=True,
        )
    ns = [r["n"] for r in rows]
    for key in (
        "encode_s",
        "encode_cpu_s",
        "protocol_s",
        "protocol_cpu_s",
        "compare_s",
        "candidate_sets",
        "peak_rss_bytes",
    ):
        print(f"exponent of {key} in N: {slope(ns, [r[key] for r in rows]):.2f}")


def cmd_cluster(args: argparse.Namespace) -> None:
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as d:
        path = make_data(Path(d), args.records)[0]
        # the reference (one process) alternated with the cluster, args.repeat times each; the
        # first reference also pays this process's lazy start-up (imports, numba loops), which
        # the workers pay before they are measured
        k = args.cluster_workers
        ones, clustered = [], []
        for _ in range(args.repeat):
            ones.append(encode(path, 1))
            clustered.append(encode_on_cluster(path, k))
        ref = ones[0][0]
        c1 = min(one[2] for one in ones)
        ideal = c1 / k
        print(
            f"one process: {min(one[1] for one in ones):.2f}s wall, {c1:.2f} CPU-s (best of "
            f"{', '.join(f'{one[2]:.2f}' for one in ones)}); ideal per worker of {k}: "
            f"{ideal:.2f} CPU-s; {load()}"
        )
        worst = []
        for n, (got, wall, parent, stats, whole, at_end) in enumerate(clustered, 1):
            same = got.record_ids == ref.record_ids and np.array_equal(got.filters, ref.filters)
            same = same and np.array_equal(got.block_digests, ref.block_digests)
            per = sorted(stats.cpu_by_worker.values(), reverse=True)
            proc = sorted(whole.values(), key=lambda c: -c.process)
            worst.append((per[0] / ideal, proc[0].process / ideal))
            records = stats.cpu_seconds - stats.first_sight_seconds - stats.reading_seconds
            print(
                f"run {n}: {k}-worker LocalCluster: {wall:.2f}s wall (with cluster start), "
                f"{stats.batches} batches; identical output: {same}; this process (the node: "
                f"client, cluster start, planning, assembly) {parent:.2f} CPU-s\n"
                f"  CPU per worker in its tasks {', '.join(f'{c:.2f}' for c in per)} s: worst / "
                f"ideal {per[0] / ideal:.2f}, worst / mean {per[0] * len(per) / sum(per):.2f}, "
                f"total / one process {sum(per) / c1:.2f} (all workers: reading "
                f"{stats.reading_seconds:.2f} ({stats.ranges} CSV ranges), first sight "
                f"{stats.first_sight_seconds:.2f}, records {records:.2f})\n"
                f"  whole worker process during the encoding {', '.join(f'{c.process:.2f}' for c in proc)}"
                f" s (task threads {', '.join(f'{c.tasks:.2f}' for c in proc)}; the rest is Dask's "
                f"event loop): worst / ideal {proc[0].process / ideal:.2f}, total / one process "
                f"{sum(c.process for c in proc) / c1:.2f}; peak RSS per worker "
                f"{', '.join(f'{c.peak_rss / 2**20:.0f}' for c in proc)} MiB; {at_end}"
            )
            born = sorted(whole.values(), key=lambda c: -(c.start + c.process))
            server = forkserver_cpu()
            print(
                f"  from each worker process's start: start-up before the encoding (interpreter, "
                f"imports, numba loops, joining) {', '.join(f'{c.start:.2f}' for c in born)} s; "
                f"start to the end of the encoding {', '.join(f'{c.start + c.process:.2f}' for c in born)}"
                f" s: worst / ideal {(born[0].start + born[0].process) / ideal:.2f}; the "
                f"forkserver they are forked from (once per node process: Dask and the encoder "
                f"imported, numba loops loaded) "
                f"{'-' if server is None else f'{server:.2f}'} CPU-s"
            )
        tasks, processes = zip(*worst, strict=True)
        print(
            f"busiest worker / ideal over the {len(worst)} runs: in its tasks "
            f"{', '.join(f'{r:.2f}' for r in tasks)} (median {statistics.median(tasks):.2f}); "
            f"whole process {', '.join(f'{r:.2f}' for r in processes)} (median "
            f"{statistics.median(processes):.2f}); {load()}"
        )


def cmd_cluster_comparison(args: argparse.Namespace) -> None:
    """The comparison (target any) of party 0 on a LocalCluster of k workers against the pair
    kernel on one thread (the ideal: a k-th of its CPU), alternated ``args.repeat`` times."""
    import random

    from party.cluster import _forkserver, dask_client, worker_usage
    from party.cluster_pairs import ClusterPairs
    from party.cluster_tasks import cluster_tasks
    from party.config import ClusterConfig
    from party.protocol.blocks import row_block_indexes
    from party.protocol.driver import exchange_in_process
    from party.protocol.kernel import threshold_table
    from party.protocol.pair_engine import PairEngine, party_pairs
    from party.protocol.pairwise import PairPlan, pair_sides

    k = args.cluster_workers
    _forkserver()  # started with the cluster's preload, as a node with [cluster] starts it
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as d:
        tables = [encode(p, 2)[0] for p in make_data(Path(d), args.records)]
    prm = params("any")

    def exchanged() -> PairEngine:
        """Party 0's engine after the segment exchange (the same pseudonyms every time)."""
        rng = random.Random(5)
        engines = [
            PairEngine(i, prm, t, random_bytes=rng.randbytes, workers=2)
            for i, t in enumerate(tables)
        ]
        exchange_in_process(engines)
        for e in engines[1:]:
            e.close()
        return engines[0]

    def kernel_one_thread() -> tuple[float, dict[str, float]]:
        """Thread CPU of the pair kernel of every pair of parties on one thread (the work the
        workers take over), with the engine's inputs: alone, then beside busy processes
        (``busy_neighbours``: on its core, on the other cores; left out where they cannot be),
        the inputs made once."""
        e = exchanged()
        common = e._ready_to_compare()
        pseud, _, segs = e._party_columns()
        sides = pair_sides(pseud, segs, [e._positions[j] for j in range(3)], 2)
        indexes = row_block_indexes([sd.positions for sd in sides], int(common.size), 2)
        every = party_pairs(3)
        plans = PairPlan.from_index_pairs([(indexes[a], indexes[b]) for a, b in every], None, 2)
        table = threshold_table(2, float(prm.segment_threshold), 2 * e.segment_bits)

        def kernel() -> float:
            t = time.thread_time()
            for (a, b), plan in zip(every, plans, strict=True):
                for _ in plan.kept_pairs(sides[a], sides[b], 3, table, 10**12, 1):
                    pass
            return time.thread_time() - t

        alone = kernel()
        loaded = {}
        for where in LOADED:
            with busy_neighbours(where) as pinned:
                if pinned:
                    loaded[where] = kernel()
        e.close()
        return alone, loaded

    def survivors(e: PairEngine) -> bytes:
        assert e._survivors is not None
        return b"".join(x.tobytes() for x in e._survivors.chunks(1 << 16))

    ref = exchanged()
    c0, t0 = self_cpu(), time.perf_counter()
    ref.compare()
    threads = (time.perf_counter() - t0, self_cpu() - c0)
    want = survivors(ref)
    ref.close()
    kernels: list[float] = []
    loaded: dict[str, list[float]] = {}
    runs = []
    with dask_client(ClusterConfig("local"), k) as client:
        for _ in range(args.repeat):
            alone, beside = kernel_one_thread()
            kernels.append(alone)
            for where, cpu in beside.items():
                loaded.setdefault(where, []).append(cpu)
            e = exchanged()
            before = client.run(worker_usage)
            c0, t0 = self_cpu(), time.perf_counter()
            with cluster_tasks(ClusterPairs, client, True, None) as remote:
                e.compare(remote=remote)
            wall, node = time.perf_counter() - t0, self_cpu() - c0
            after = client.run(worker_usage)
            usage = sorted((after[w] - before[w] for w in after), key=lambda u: -u.tasks)
            runs.append((wall, node, usage, remote, survivors(e) == want, load()))
            e.close()
    one = min(kernels)
    ideal = one / k
    print(
        f"comparison of party 0 (target any, {args.records} records per party): pair kernel on "
        f"one thread {one:.2f} CPU-s (best of {', '.join(f'{c:.2f}' for c in kernels)}); ideal "
        f"per worker of {k}: {ideal:.2f} CPU-s; {loaded_reference(kernels, loaded, k)}; the whole "
        f"comparison on the node's 2 threads {threads[0]:.2f}s wall, {threads[1]:.2f} CPU-s"
    )
    worst = []
    for n, (wall, node, usage, remote, same, at) in enumerate(runs, 1):
        tasks = [u.tasks for u in usage]
        how = "files on tmpfs the workers map" if remote.folder else "through Dask"
        worst.append(tasks[0] / ideal)
        print(
            f"run {n}: {k}-worker LocalCluster: {wall:.2f}s wall, node (this process: indexes, "
            f"plans, sending, receiving, merge, store) {node:.2f} CPU-s; {remote.tasks} tasks, "
            f"{remote.sent_bytes / 1e6:.0f} MB sent ({how}), {remote.shuffled_bytes / 1e6:.0f} "
            f"MB of keys from task to task, {remote.received_bytes / 1e6:.0f} MB received; survivors identical to the threads: {same}\n"
            f"  CPU per worker in its tasks {', '.join(f'{c:.2f}' for c in tasks)} s: worst / "
            f"ideal {tasks[0] / ideal:.2f}, worst / mean {tasks[0] * len(tasks) / sum(tasks):.2f},"
            f" total / one thread {sum(tasks) / one:.2f}; whole worker processes "
            f"{', '.join(f'{u.process:.2f}' for u in usage)} s; {at}"
        )
    print(
        f"busiest worker's tasks / ideal over the {len(worst)} runs: "
        f"{', '.join(f'{r:.2f}' for r in worst)} (median {statistics.median(worst):.2f}); "
        f"{against_loaded(worst, ideal, loaded, k)}{load()}"
    )


def keeping(generator: Any, kept: list[bytes]) -> Any:
    """A compute party's generator passed through, keeping the payload of each round it sends."""
    incoming = None
    while True:
        try:
            rnd = generator.send(incoming)
        except StopIteration as stop:
            return stop.value
        kept.append(rnd.payload)
        incoming = yield rnd


def record_peers(generators: list[Any]) -> tuple[list[Any], list[bytes], list[bytes]]:
    """``party.mpc.driver.drive`` of the three compute parties' generators, recording what CP 0
    receives at each step (CP 1's payload) and what it sends: (outcomes, received, sent)."""
    from party.mpc.driver import drive

    sent: list[bytes] = []
    received: list[bytes] = []
    first, second, third = generators
    outcomes = drive([keeping(first, sent), keeping(second, received), third])
    return outcomes, received, sent


def replay_peers(generator: Any, received: list[bytes], sent: list[bytes]) -> Any:
    """CP 0's generator alone, given at each step what CPs 1 and 2 sent it in ``record_peers``
    (as if they ran on machines of their own); its outcome. ValueError if CP 0 sends anything
    other than it did in the recording (compared byte for byte: a digest would cost this
    process CPU while the workers compute)."""
    incoming = None
    for step, (reply, payload) in enumerate(zip(received, sent, strict=True)):
        rnd = generator.send(incoming)
        if rnd.payload != payload:
            raise ValueError(f"compute party 0 sent another payload than recorded at step {step}")
        incoming = reply
    try:
        generator.send(incoming)
    except StopIteration as stop:
        return stop.value
    raise ValueError("compute party 0 took more steps than recorded")


def cmd_cluster_mpc(args: argparse.Namespace) -> None:
    """The mpc3 circuit (target any) of compute party 0 on a LocalCluster of k workers against
    its batches on one thread (the ideal: a k-th of their CPU), alternated ``args.repeat``
    times. Compute parties 1 and 2 run once, with CP 0, in this process (``record_peers``);
    then CP 0 runs alone, both ways, given their recorded payloads (``replay_peers``), so this
    process does only CP 0's node part while the workers compute, as on a deployment where
    each compute party is its own machine."""
    import dataclasses

    from party.cluster import _forkserver, dask_client, worker_usage
    from party.cluster_mpc import ClusterCircuits
    from party.config import ClusterConfig
    from party.encoding.parallel import scratch_folder
    from party.mpc.driver import run_keys
    from party.mpc.flight import LocalCircuits, Step
    from party.mpc.pairs import PairComputeParty, pair_input_shares

    class Timed(LocalCircuits):
        """LocalCircuits that add up the thread CPU of their batches' steps (every round of a
        batch, its first included, is an ``advance``)."""

        cpu = 0.0

        def advance(self, batch: int, payload: bytes | memoryview | None) -> Step:
            t = time.thread_time()
            try:
                return super().advance(batch, payload)
            finally:
                Timed.cpu += time.thread_time() - t

    k = args.cluster_workers
    _forkserver()  # started with the cluster's preload, as a node with [cluster] starts it
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as d:
        tables = [encode(p, 2)[0] for p in make_data(Path(d), args.records)]
    prm = dataclasses.replace(params("any", args.budget_mib), mode="mpc3", segment_threshold=0.0)
    shares = pair_input_shares(tables, prm)
    keys = run_keys()

    def compute_party(i: int, factory: Any) -> Any:
        cp = PairComputeParty(i, prm, keys[i], circuits=factory)
        for share in shares:
            if share.target == i:
                cp.receive_input(share)
        return cp

    Timed.cpu = 0.0
    t0 = time.perf_counter()
    outcomes, received, sent = record_peers(
        [compute_party(i, Timed if i == 0 else None).run() for i in range(3)]
    )
    together = (time.perf_counter() - t0, Timed.cpu)
    want = outcomes[0]

    def alone(factory: Any) -> tuple[Any, float, float]:
        """(CP 0's outcome, wall, this process's CPU) of CP 0 alone, its batches on
        ``factory``, CPs 1 and 2 replayed."""
        cp = compute_party(0, factory)
        c0, t0 = self_cpu(), time.perf_counter()
        outcome = replay_peers(cp.run(), received, sent)
        return outcome, time.perf_counter() - t0, self_cpu() - c0

    ones: list[float] = []
    loaded: dict[str, list[float]] = {}
    runs = []
    with dask_client(ClusterConfig("local"), k) as client:
        for _ in range(args.repeat):
            Timed.cpu = 0.0
            _, ref_wall, _ = alone(Timed)
            ones.append(Timed.cpu)
            for where in LOADED:
                Timed.cpu = 0.0
                with busy_neighbours(where) as pinned:
                    if pinned:
                        alone(Timed)
                        loaded.setdefault(where, []).append(Timed.cpu)
            with scratch_folder(1 << 26, "bench-mpc-") as folder:
                before = client.run(worker_usage)
                with ClusterCircuits(client, folder=folder) as remote:
                    got, wall, node = alone(remote)
                after = client.run(worker_usage)
            usage = sorted((after[w] - before[w] for w in after), key=lambda u: -u.tasks)
            same = (got.ends.tobytes(), got.similarities.tobytes()) == (
                want.ends.tobytes(),
                want.similarities.tobytes(),
            )
            runs.append((wall, node, ref_wall, usage, remote, same, load()))
    one = min(ones)
    ideal = one / k
    stats = want.stats
    print(
        f"mpc3 circuit of compute party 0 (target any, {args.records} records per party): "
        f"{stats.candidate_sets} candidate pairs in {stats.batches} batches, {stats.rounds} "
        f"rounds; the three compute parties in this process {together[0]:.2f}s wall, CP 0's "
        f"batches among theirs {together[1]:.2f} CPU-s; CPs 1 and 2 replayed from that run "
        f"({len(received)} steps, {sum(map(len, received)) / 1e6:.0f} MB to CP 0); CP 0's "
        f"batches alone on one thread {one:.2f} CPU-s (best of "
        f"{', '.join(f'{c:.2f}' for c in ones)}); ideal per worker of {k}: {ideal:.2f} CPU-s; "
        f"{loaded_reference(ones, loaded, k)}"
    )
    worst = []
    for n, (wall, node, ref_wall, usage, remote, same, at) in enumerate(runs, 1):
        tasks = [u.tasks for u in usage]
        worst.append(tasks[0] / ideal)
        how = "files on tmpfs the workers map" if remote.mapped_bytes else "through Dask"
        print(
            f"run {n}: CP 0 alone on one thread {ref_wall:.2f}s wall; on the {k}-worker "
            f"LocalCluster {wall:.2f}s wall, this process (CP 0's node part) {node:.2f} CPU-s; "
            f"{remote.calls} steps asked of the actors ({remote.channel_steps} over round "
            f"channels, the rest Dask calls), {remote.sent_bytes / 1e6:.0f} MB of shares sent "
            f"({how}); every payload as recorded, outcome identical to one thread: {same}\n"
            f"  CPU per worker in its actor's steps {', '.join(f'{c:.2f}' for c in tasks)} s: "
            f"worst / ideal {tasks[0] / ideal:.2f}, worst / mean "
            f"{tasks[0] * len(tasks) / sum(tasks):.2f}, total / one thread {sum(tasks) / one:.2f}; "
            f"whole worker processes {', '.join(f'{u.process:.2f}' for u in usage)} s; {at}"
        )
    print(
        f"busiest worker's steps / ideal over the {len(worst)} runs: "
        f"{', '.join(f'{r:.2f}' for r in worst)} (median {statistics.median(worst):.2f}); "
        f"{against_loaded(worst, ideal, loaded, k)}{load()}"
    )


def encode_on_cluster(path: Path, workers: int):  # type: ignore[no-untyped-def]
    """One encoding of ``path`` on an embedded LocalCluster, with what it cost where."""
    from party.cluster import WorkerUsage, encode_csv_on_workers
    from party.config import ClusterConfig
    from party.encoding.encoder import Encoder
    from party.encoding.parallel import ParallelStats

    stats = ParallelStats()
    whole: dict[str, WorkerUsage] = {}
    t0, p0 = time.perf_counter(), self_cpu()
    got, _ = encode_csv_on_workers(
        Encoder(schema(), SECRET),
        path,
        workers=workers,
        cluster=ClusterConfig("local"),
        id_column="rec_id",
        stats=stats,
        usage_by_worker=whole,
    )
    return got, time.perf_counter() - t0, self_cpu() - p0, stats, whole, load()


def forkserver_cpu() -> float | None:
    """CPU seconds of this process's multiprocessing forkserver so far (Linux), None if none."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["cores", "sizes", "cluster", "one"])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=0, help="0: every core")
    ap.add_argument(
        "--comparison-only",
        action="store_true",
        help="cores: skip the encoding speedup; cluster: the comparison on the workers",
    )
    ap.add_argument(
        "--target",
        choices=("any", "all"),
        default="any",
        help="cores: the comparison's linkage target (default any, the shipped default)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="cores, cluster: alternated runs of each side; the best is the headline, every run printed",
    )
    ap.add_argument("--sizes", default="25000,50000,100000,200000,400000,1000000")
    ap.add_argument("--cluster-workers", type=int, default=4)
    ap.add_argument(
        "--budget-mib",
        type=int,
        default=2048,
        help="cores: the comparison's memory budget (a node's default is 3072; at 1M per party "
        "2048 is too little for the kept pairs' merge in memory, and the survivors spill)",
    )
    ap.add_argument(
        "--mpc3",
        action="store_true",
        help="cluster: compute party 0's mpc3 circuit (target any) on the workers",
    )
    ap.add_argument(
        "--encoding-only",
        action="store_true",
        help="cores: measure the encoding, not the comparison",
    )
    args = ap.parse_args()
    if args.budget_mib < 64:
        ap.error(f"--budget-mib must be at least 64 (got {args.budget_mib})")
    if args.what == "one":
        print(json.dumps(run_one(args.records, args.workers)))
    elif args.what == "cluster" and args.mpc3:
        cmd_cluster_mpc(args)
    elif args.what == "cluster" and args.comparison_only:
        cmd_cluster_comparison(args)
    else:
        {"cores": cmd_cores, "sizes": cmd_sizes, "cluster": cmd_cluster}[args.what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
