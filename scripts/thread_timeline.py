"""Where the comparison's wall clock goes on 1 and W kernel threads: a timeline of every hand-off.

The three parties' ``PairEngine.compare()`` (target any, ``bench_scaling.py cores``' data and
parameters, pseudonyms from a fixed seed so that every run's survivor rows are comparable) runs 1,
W, 1, W, ... threads in one process. Every region (a ``run_split`` / ``run_ranges`` / ``run_tasks``
call from the calling thread) and every task in it is stamped (``time.perf_counter_ns``, the
thread's CPU, its native id, its wait on a run queue from ``/proc/thread-self/schedstat``), and
every submit to the pool. Per run it prints:

- wall, process CPU, the calling thread's serial CPU (outside regions), regions, the critical
  path (serial CPU + each region's busiest thread CPU), the process's minor page faults and the
  machine's idle and stolen CPU-seconds (``/proc/stat``: a KVM guest's vCPU not run by its host;
  a thread's CPU time excludes it, so inside a task it shows as off-CPU time not on a run queue);
- each region's wall decomposed along the thread that finished it last: lead-in (region start ->
  its first task: for a pool thread the wake-up), its tasks' CPU, its off-CPU time inside tasks
  (and how much of all tasks' off-CPU time was spent runnable on a run queue, i.e. preempted, not
  blocked), gaps between its tasks (taking the next task), tail (its last task -> region end: the
  calling thread's wake-up and join), and the busiest thread's CPU over an even share;
- the regions' tasks list-scheduled on W idle threads: the code's own imbalance, free of the
  scheduler's (under load a preempted thread takes fewer tasks);
- submit -> start latency of the pool (median, max); with ``--detail`` the same per region kind,
  and the calling thread's serial CPU between regions by the region that follows it.

Last: the best walls, and whether every run gave the same survivor rows (sha256) and stats.

    .venv/bin/python scripts/thread_timeline.py [--records 100000] [--workers 2] [--reps 2] [--detail]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import functools
import hashlib
import importlib
import os
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import party.protocol.threads as threads_module  # noqa: E402

_MODULES = (
    "party.protocol.blocks",
    "party.protocol.engine",
    "party.protocol.pairwise",
    "party.protocol.pair_engine",
    "party.protocol.row_sort",
    "party.protocol.spill",
)


def _machine_idle_steal() -> tuple[float, float]:
    """Seconds the machine's CPUs were idle (idle + iowait) and stolen by the hypervisor (a
    guest's vCPU not run by its host) since boot, summed over the CPUs (0, 0 where unknown)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        hz = os.sysconf("SC_CLK_TCK")
        return (int(fields[4]) + int(fields[5])) / hz, int(fields[8]) / hz
    except (OSError, IndexError, ValueError):
        return 0.0, 0.0


def _run_queue_ns() -> int:
    """This thread's time runnable on a run queue but not running (0 where not available)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


@dataclasses.dataclass
class Region:
    label: str
    t0: int
    t1: int = 0
    cpu0: int = 0
    cpu1: int = 0
    tasks: list[tuple[int, int, int, int, int]] = dataclasses.field(default_factory=list)
    # (native thread id, start ns, end ns, thread CPU ns, run-queue wait ns)
    submits: list[int] = dataclasses.field(default_factory=list)  # submit -> start ns


class Timeline:
    """The stamps of one run (``install`` wraps the pool entry points of the kernel modules)."""

    def __init__(self) -> None:
        self.main = threading.get_native_id()
        self.on = False
        self.inside = False
        self.regions: list[Region] = []
        self.faults = 0  # the process's minor page faults in the last run
        self.idle = 0.0  # the machine's idle CPU-seconds in the last run
        self.steal = 0.0  # the machine's CPU-seconds stolen by the hypervisor in the last run

    def install(self) -> None:
        original_pool = threads_module.thread_pool
        timeline = self

        class Pool:
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            def submit(self, fn: Any, *args: Any) -> Any:
                region = timeline.regions[-1] if timeline.inside else None
                t_submit = time.perf_counter_ns()

                def started(*a: Any) -> Any:
                    if region is not None:
                        region.submits.append(time.perf_counter_ns() - t_submit)
                    return fn(*a)

                return self.inner.submit(started, *args)

        @functools.lru_cache(maxsize=8)
        def thread_pool(workers: int) -> Pool:
            return Pool(original_pool(workers))

        threads_module.thread_pool = thread_pool  # type: ignore[assignment]

        def timed(fn: Any, region: Region) -> Any:
            def run(*args: Any) -> Any:
                q0, c0, t0 = _run_queue_ns(), time.thread_time_ns(), time.perf_counter_ns()
                try:
                    return fn(*args)
                finally:
                    t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
                    wait = _run_queue_ns() - q0
                    region.tasks.append((threading.get_native_id(), t0, t1, c1 - c0, wait))

            return run

        def wrap(inner: Any, kind: str) -> Any:
            def run(workers: int, what: Any, fn: Any, **kw: Any) -> Any:
                if not timeline.on or timeline.inside or threading.get_native_id() != timeline.main:
                    return inner(workers, what, fn, **kw)
                caller = sys._getframe(1).f_code.co_name
                name = getattr(fn, "__qualname__", "?").split(".")[-1]
                region = Region(f"{kind} {caller}:{name}", time.perf_counter_ns())
                region.cpu0 = time.thread_time_ns()
                timeline.regions.append(region)
                timeline.inside = True
                try:
                    return inner(workers, what, timed(fn, region), **kw)
                finally:
                    timeline.inside = False
                    region.t1, region.cpu1 = time.perf_counter_ns(), time.thread_time_ns()

            return run

        wrapped = {
            "run_split": wrap(threads_module.run_split, "split"),
            "run_ranges": wrap(threads_module.run_ranges, "ranges"),
            "run_tasks": wrap(threads_module.run_tasks, "tasks"),
        }
        for name in _MODULES:
            module = importlib.import_module(name)
            for attr, fn in wrapped.items():
                if hasattr(module, attr):
                    setattr(module, attr, fn)


def _tables(records: int) -> list[Any]:
    import bench_scaling as bs

    with tempfile.TemporaryDirectory(prefix="thread-timeline-") as d:
        return [bs.encode(p, 1)[0] for p in bs.make_data(Path(d), records)]


def _engines(tables: list[Any], workers: int) -> list[Any]:
    import bench_scaling as bs

    from party.protocol.driver import exchange_in_process
    from party.protocol.pair_engine import PairEngine

    params = dataclasses.replace(bs.params("any"), one_to_one=False)
    rng = random.Random(7)  # the same pseudonyms in every run: survivor rows comparable
    engines = [
        PairEngine(i, params, t, workers=workers, random_bytes=rng.randbytes)
        for i, t in enumerate(tables)
    ]
    exchange_in_process(engines)
    return engines


def _run(timeline: Timeline, tables: list[Any], workers: int) -> tuple[float, float, Any]:
    engines = _engines(tables, workers)
    timeline.regions = []
    timeline.on = True
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    idle0, steal0 = _machine_idle_steal()
    c0, p0, t0 = time.thread_time(), time.process_time(), time.perf_counter()
    stats = [e.compare() for e in engines]
    wall, cpu = time.perf_counter() - t0, time.process_time() - p0
    main_cpu = time.thread_time() - c0
    idle1, steal1 = _machine_idle_steal()
    timeline.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    timeline.idle, timeline.steal = idle1 - idle0, steal1 - steal0
    timeline.on = False
    same = []
    for e, s in zip(engines, stats, strict=True):
        digest = hashlib.sha256()
        for rows in e._survivors.chunks(1 << 16):
            digest.update(rows.tobytes())
        same.append(
            (s.candidate_sets, s.survivors, s.survivors_with_duplicates, digest.hexdigest())
        )
        e.close()
    return wall, cpu, (main_cpu, same)


def _report(
    timeline: Timeline, workers: int, wall: float, cpu: float, main_cpu: float, detail: bool
) -> None:
    regions = timeline.regions
    in_regions = sum(r.cpu1 - r.cpu0 for r in regions) / 1e9
    serial = main_cpu - in_regions
    busiest = 0.0
    parts: dict[str, float] = collections.defaultdict(float)
    by_kind: dict[str, list[float]] = collections.defaultdict(lambda: [0.0] * 6)
    before: dict[str, float] = collections.defaultdict(float)  # serial CPU before each kind
    latencies: list[int] = []
    off_cpu = queued = 0
    for i, r in enumerate(regions):
        if i:
            before[r.label] += (r.cpu0 - regions[i - 1].cpu1) / 1e9
        latencies += r.submits
        if not r.tasks:
            continue
        per: dict[int, int] = collections.defaultdict(int)
        for tid, a, b, c, q in r.tasks:
            per[tid] += c
            off_cpu += b - a - c
            queued += q
        busiest += max(per.values()) / 1e9
        last = max(r.tasks, key=lambda t: t[2])[0]
        mine = sorted((t for t in r.tasks if t[0] == last), key=lambda t: t[1])
        lead = (mine[0][1] - r.t0) / 1e9
        tail = (r.t1 - mine[-1][2]) / 1e9
        gaps = sum(b[1] - a[2] for a, b in zip(mine, mine[1:], strict=False)) / 1e9
        parts["lead-in"] += lead
        parts["CPU"] += sum(t[3] for t in mine) / 1e9
        parts["off-CPU in tasks"] += sum(t[2] - t[1] - t[3] for t in mine) / 1e9
        parts["gaps"] += gaps
        parts["tail"] += tail
        parts["busiest over even"] += (max(per.values()) - sum(per.values()) / workers) / 1e9
        free = [0] * workers  # list-scheduled on idle threads, in start order
        for t in sorted(r.tasks, key=lambda t: t[1]):
            free[free.index(min(free))] += t[3]
        excess = (max(free) - sum(free) / workers) / 1e9
        parts["list-scheduled excess"] += excess
        k = by_kind[r.label]
        k[0] += 1
        k[1] += (r.t1 - r.t0) / 1e9
        k[2] += max(per.values()) / 1e9
        k[3] += sum(per.values()) / 1e9
        k[4] += lead + tail
        k[5] += excess
    latencies.sort()
    median = latencies[len(latencies) // 2] / 1e3 if latencies else 0.0
    top = latencies[-1] / 1e3 if latencies else 0.0
    print(
        f"  {workers} thread(s): wall {wall:.3f}s, CPU {cpu:.3f}s, serial CPU {serial:.3f}s, "
        f"{len(regions)} regions, critical path {serial + busiest:.3f}s, "
        f"{timeline.faults:,} minor page faults; machine idle {timeline.idle:.2f} and stolen "
        f"{timeline.steal:.2f} CPU-s; load {os.getloadavg()[0]:.1f}"
    )
    print(
        "    regions along the thread finishing last (s): "
        + ", ".join(f"{k} {v:.4f}" for k, v in parts.items())
    )
    print(
        f"    off-CPU inside all tasks {off_cpu / 1e9:.4f}s, of it runnable on a run queue "
        f"{queued / 1e9:.4f}s; submit -> start {median:.0f} us median, {top:.0f} us max "
        f"({len(latencies)} submits)"
    )
    if detail:
        last = (main_cpu - (regions[-1].cpu1 - regions[0].cpu0) / 1e9) if regions else main_cpu
        print(
            "    serial CPU (ms) before the first region and after the last "
            f"{last * 1e3:.1f}, between regions, by the region it precedes: "
            + ", ".join(f"{k.split()[-1]} {v * 1e3:.1f}" for k, v in sorted(before.items()))
        )
        for label, (n, rw, bz, ca, lt, ex) in sorted(by_kind.items()):
            print(
                f"    {label:42s} x{int(n):3d} wall {rw * 1e3:7.1f} ms, busiest CPU {bz * 1e3:7.1f}, "
                f"all CPU {ca * 1e3:7.1f}, lead-in + tail {lt * 1e3:5.1f}, list-scheduled excess {ex * 1e3:5.1f}"
            )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--detail", action="store_true", help="also per kind of region")
    args = ap.parse_args()
    if args.records < 1 or args.workers < 2 or args.reps < 1:
        ap.error("--records >= 1, --workers >= 2 and --reps >= 1")
    from party.protocol.kernel import warm_up

    tables = _tables(args.records)
    warm_up()
    timeline = Timeline()
    timeline.install()
    _run(timeline, tables, 1)  # first runs: numba's caches, the pool's threads
    _run(timeline, tables, args.workers)
    print(
        f"compare (target any): {args.records:,} records per party, 3 parties; load {os.getloadavg()[0]:.1f}"
    )
    best: dict[int, float] = {}
    results = []
    for _ in range(args.reps):
        for w in (1, args.workers):
            wall, cpu, (main_cpu, same) = _run(timeline, tables, w)
            _report(timeline, w, wall, cpu, main_cpu, args.detail)
            best[w] = min(best.get(w, wall), wall)
            results.append(same)
    w = args.workers
    print(
        f"best wall: 1 thread {best[1]:.3f}s, {w} threads {best[w]:.3f}s = {best[1] / best[w]:.2f}x; "
        f"identical survivor rows (sha256) and stats in every run: "
        f"{all(r == results[0] for r in results)}; load {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
