"""Critical-path CPU of the comparison and the mpc3 circuit on W kernel threads: their 1 -> W
speedup on idle cores, measured from CPU seconds (which a loaded machine inflates far less than it
stretches wall-clock).

Every piece of work the kernels hand to the pool threads (``run_split`` / ``run_ranges`` ranges,
``run_tasks`` tasks such as the pair kernel's block ranges, the many-blocks kernel's block ranges)
is timed with ``time.thread_time`` and grouped by parallel region (one call of ``run_split``,
``run_ranges``, ``run_tasks`` or ``compare_block_batch`` from the calling thread). Then

    critical = CPU of the calling thread outside regions + sum over regions of the busiest
               thread's CPU in the region

is the wall-clock the work needs when every thread has a core of its own (memory contention
aside), and ``T1 / critical`` (T1 = process CPU of the one-thread run) the speedup two idle cores
would give. Under load a thread that is descheduled takes fewer of a region's pieces from the pool
(the other takes more), which makes the as-run busiest thread look busier than the code makes it;
so the script also prints the regions' pieces list-scheduled on W idle threads (each piece, in the
order the pieces started, to the thread that is free first: what the pool does on idle cores).
The wrappers replace the pool entry points of the kernel modules for the measurement
only (results are unchanged: the script checks them).

    .venv/bin/python scripts/thread_critical_path.py compare [--records 100000] [--workers 2] [--target any|all]
    .venv/bin/python scripts/thread_critical_path.py mpc3    [--records 200000] [--workers 2]

``compare``: the three parties' ``compare()`` on generated people with the shipped schema (as
``bench_scaling.py cores``); ``mpc3``: the three compute parties' circuit (as ``bench_mpc.py``
part 5, schema_large). Runs 1, W, 1, W; prints each run and the best-of-two ratio.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import party.protocol.kernel as kernel_module  # noqa: E402
import party.protocol.threads as threads_module  # noqa: E402

_MODULES = (
    "party.protocol.kernel",
    "party.protocol.blocks",
    "party.protocol.engine",
    "party.protocol.pairwise",
    "party.protocol.pair_engine",
    "party.protocol.row_sort",
    "party.mpc.gates",
    "party.mpc.keys",
    "party.mpc.compute",
    "party.mpc.candidates",
)


class Tally:
    """Thread CPU of every pooled piece, by region, and the wrappers that record it."""

    def __init__(self) -> None:
        self.main = threading.get_ident()
        self.region = 0
        self.cpu: dict[tuple[int, int], float] = collections.defaultdict(float)
        self.tasks: list[tuple[int, float]] = []  # (region, CPU) of every pooled piece, by start
        self._lock = threading.Lock()
        self._inside = False

    def timed(self, fn: Callable[..., Any], region: int) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with self._lock:
                task = len(self.tasks)
                self.tasks.append((region, 0.0))
            c0 = time.thread_time()
            try:
                return fn(*args)
            finally:
                cpu = time.thread_time() - c0
                with self._lock:
                    self.cpu[(region, threading.get_ident())] += cpu
                    self.tasks[task] = (region, cpu)

        return run

    def install(self) -> None:
        split, ranges, tasks, pool, batch = (
            threads_module.run_split,
            threads_module.run_ranges,
            threads_module.run_tasks,
            threads_module.thread_pool,
            kernel_module.compare_block_batch,
        )
        tally = self

        def region(inner: Callable[..., Any]) -> Callable[..., Any]:
            """``inner(workers, what, fn, **kw)`` (run_split / run_ranges / run_tasks) timed as one
            region when the calling thread starts it (nested calls run inside that region)."""

            def run(workers: int, what: Any, fn: Callable[..., Any], **kw: Any) -> Any:
                if threading.get_ident() != tally.main or tally._inside:
                    return inner(workers, what, fn, **kw)
                tally.region += 1
                tally._inside = True
                try:
                    return inner(workers, what, tally.timed(fn, tally.region), **kw)
                finally:
                    tally._inside = False

            return run

        run_split, run_ranges = region(split), region(ranges)

        class Pool:
            def __init__(self, inner: ThreadPoolExecutor) -> None:
                self.inner = inner

            def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
                return self.inner.submit(tally.timed(fn, tally.region), *args)

            def map(self, fn: Callable[..., Any], *its: Any) -> Any:
                return self.inner.map(tally.timed(fn, tally.region), *its)

        def thread_pool(workers: int) -> Pool:
            return Pool(pool(workers))

        def compare_block_batch(*args: Any, **kw: Any) -> Any:
            if threading.get_ident() == tally.main:
                tally.region += 1
            return batch(*args, **kw)

        run_tasks = region(tasks)

        for name in _MODULES:
            mod = importlib.import_module(name)
            for attr, fn in (
                ("run_split", run_split),
                ("run_ranges", run_ranges),
                ("run_tasks", run_tasks),
                ("thread_pool", thread_pool),
                ("compare_block_batch", compare_block_batch),
            ):
                if hasattr(mod, attr):
                    setattr(mod, attr, fn)

    def measure(self, fn: Callable[[], Any], workers: int = 1) -> tuple[Any, dict[str, float]]:
        """Run ``fn``: (its output, wall, process CPU, serial CPU, critical path, and the pooled
        regions' CPU and its busiest threads' excess over an even share of ``workers``)."""
        self.cpu.clear()
        self.tasks.clear()
        c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
        out = fn()
        main, proc = time.thread_time() - c0, time.process_time() - p0
        wall = time.perf_counter() - t0
        regions: dict[int, dict[int, float]] = collections.defaultdict(dict)
        for (r, t), c in self.cpu.items():
            regions[r][t] = c
        in_main = sum(d.get(self.main, 0.0) for d in regions.values())
        serial = main - in_main
        busiest = sum(max(d.values()) for d in regions.values())
        pooled = sum(sum(d.values()) for d in regions.values())
        # on idle cores the pool's threads take the pieces in order as each becomes free: a
        # region then lasts the makespan of that list schedule (under load a descheduled thread
        # takes fewer pieces, which the as-run busiest thread shows, not the code)
        finish: dict[int, list[float]] = collections.defaultdict(lambda: [0.0] * workers)
        for r, cpu in self.tasks:
            free = finish[r]
            free[free.index(min(free))] += cpu
        scheduled = sum(max(free) for free in finish.values())
        return out, {
            "wall": wall,
            "cpu": proc,
            "serial": serial,
            "critical": serial + busiest,
            "pooled": pooled,
            "imbalance": busiest - pooled / workers,
            "scheduled": serial + scheduled,
        }


def compare_runs(records: int, target: str = "any") -> Callable[[int], Callable[[], Any]]:
    """A factory: workers -> a thunk running the three parties' compare() on fresh engines
    (target any: PairEngines, the candidate pairs of every two parties)."""
    import dataclasses

    import bench_scaling as bs

    from party.protocol.driver import exchange_in_process
    from party.protocol.engine import PartyEngine
    from party.protocol.pair_engine import PairEngine

    with tempfile.TemporaryDirectory(prefix="critical-path-") as d:
        tables = [bs.encode(p, 1)[0] for p in bs.make_data(Path(d), records)]
    params = dataclasses.replace(bs.params(target), one_to_one=target == "all")
    engine_class = PairEngine if target == "any" else PartyEngine

    def prepare(workers: int) -> Callable[[], Any]:
        engines = [engine_class(i, params, tables[i], workers=workers) for i in range(3)]
        exchange_in_process(engines)  # steps 4-5 up to the comparison, as run_in_process

        def run() -> Any:
            # pseudonyms are fresh per engine: compare the counts (bench_scaling checks the sets)
            return [
                (s.candidate_sets, s.survivors, s.evaluated_per_stage, s.survived_per_stage)
                for s in (e.compare() for e in engines)
            ]

        return run

    return prepare


def mpc3_runs(records: int) -> Callable[[int], Callable[[], Any]]:
    from bench_mpc import SimulationConfig, prepare_encoded

    from party.mpc.compute import ComputeParty
    from party.mpc.driver import drive, run_keys
    from party.mpc.inputs import input_shares
    from party.protocol.blocks import common_blocks
    from party.protocol.engine import PartyEngine
    from party.protocol.params import ProtocolParameters

    schema = ROOT / "party" / "synthetic" / "data" / "schema_large.json"
    with tempfile.TemporaryDirectory() as tmp:
        cfg = SimulationConfig(
            parties=3, records=records, seed=3, schema_path=schema, out_dir=Path(tmp)
        )
        enc = prepare_encoded(cfg)
    l_bits = enc.tables[0].filter_bits
    params = ProtocolParameters(
        ("p0", "p1", "p2"),
        l_bits,
        0.8,
        0.0,
        True,
        mode="mpc3",
        memory_budget_bytes=2**32,
        target="all",
    )
    engines = [PartyEngine(i, params, enc.tables[i]) for i in range(3)]
    common = common_blocks([e.block_digests() for e in engines])
    for e in engines:
        e.set_common_blocks(common)
    shares = [s for e in engines for s in input_shares(e)]
    keys = run_keys()

    def prepare(workers: int) -> Callable[[], Any]:
        cps = [ComputeParty(i, params, keys[i], workers=workers) for i in range(3)]
        for sh in shares:
            cps[sh.target].receive_input(sh)

        def run() -> Any:
            out = drive([cp.run() for cp in cps])
            cls = out[0].classification
            return cls.candidates.tobytes(), cls.similarities.tobytes()

        return run

    return prepare


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("compare", "mpc3"))
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--target",
        choices=("any", "all"),
        default="any",
        help="compare: the linkage target (default any, the shipped default)",
    )
    args = ap.parse_args()
    if args.records is not None and args.records < 1:
        ap.error("--records must be at least 1")
    if args.workers < 2:
        ap.error("--workers must be at least 2 (it is compared with one thread)")
    w = args.workers
    records = args.records or (100_000 if args.what == "compare" else 200_000)
    prepare = compare_runs(records, args.target) if args.what == "compare" else mpc3_runs(records)
    tally = Tally()
    tally.install()
    prepare(1)()  # compile and warm every kernel once, for both paths
    prepare(w)()
    best: dict[int, dict[str, float]] = {}
    outputs = {}
    what = f"{args.what} (target {args.target})" if args.what == "compare" else args.what
    print(f"{what}: {records:,} records per party, 3 parties; load {os.getloadavg()[0]:.1f}")
    for k in (1, w, 1, w):
        run = prepare(k)
        outputs[k], m = tally.measure(run, k)
        print(
            f"  {k} thread(s): wall {m['wall']:.2f}s, CPU {m['cpu']:.2f}s, serial (calling "
            f"thread outside pooled work) {m['serial']:.2f}s, critical path {m['critical']:.2f}s "
            f"(pooled {m['pooled']:.2f} CPU-s, busiest threads {m['imbalance']:.2f}s over an even "
            f"share), pieces list-scheduled on idle threads {m['scheduled']:.2f}s; "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        if k not in best or m["cpu"] < best[k]["cpu"]:
            best[k] = m
    t1, crit, sched = best[1]["cpu"], best[w]["critical"], best[w]["scheduled"]
    what = "stage counts" if args.what == "compare" else "classification"
    print(
        f"{args.what}: speedup 1 -> {w} threads on idle cores, from CPU (best of 2): "
        f"{t1:.2f} / {crit:.2f} = {t1 / crit:.2f}x (pieces list-scheduled: {t1 / sched:.2f}x); "
        f"CPU with {w} threads {best[w]['cpu']:.2f} "
        f"({best[w]['cpu'] / t1:.2f}x of one thread); identical {what}: "
        f"{outputs[1] == outputs[w]}; load {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
