"""What 1 -> W kernel threads can give on this machine right now: the reference for thread speedups.

A compiled loop without the GIL, cut into one range per thread by
``party.protocol.threads.run_split`` exactly as the kernels are, timed with 1 and W threads,
alternated, best of ``repeats`` each. Three loops (``kind``):

- ``latency`` (the default, what ``bench_scaling.py cores`` and ``bench_mpc.py`` print before and
  after their runs): one dependent xorshift chain per element, no memory traffic. It uses one ALU
  at a time, so two threads on two hyperthreads of one physical core also get ~2x: it shows how
  much of a second core the process gets from the scheduler, not what the core is.
- ``throughput``: eight independent multiply / popcount chains per element (the ALUs kept busy):
  on two cores ~W x, on two hyperthreads of one core much less.
- ``memory``: random 64-byte reads from a 32 MiB table (beyond the L2 caches, as the comparison's
  gathers of segments and block positions are): what the caches and memory give two threads.

On idle cores each gives ~W x; a kernel's own 1 -> W ratio cannot beat the ceiling of the
resource it is bound by.

    .venv/bin/python scripts/thread_ceiling.py [--workers 2] [--kind latency|throughput|memory|all]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from party.protocol.threads import run_split  # noqa: E402

KINDS = ("latency", "throughput", "memory")


@njit(nogil=True, cache=False)
def _spin(out, lo, hi, rounds):  # type: ignore[no-untyped-def]
    for i in range(lo, hi):
        x = np.uint64(i + 1)
        for _ in range(rounds):
            x ^= x << np.uint64(13)
            x ^= x >> np.uint64(7)
            x ^= x << np.uint64(17)
        out[i] = x


@njit(nogil=True, cache=False)
def _alu(out, lo, hi, rounds):  # type: ignore[no-untyped-def]
    m = np.uint64(0x9E3779B97F4A7C15)
    for i in range(lo, hi):
        x0 = np.uint64(i + 1)
        x1, x2, x3 = x0 ^ np.uint64(1), x0 ^ np.uint64(2), x0 ^ np.uint64(3)
        x4, x5, x6, x7 = x0 ^ np.uint64(4), x0 ^ np.uint64(5), x0 ^ np.uint64(6), x0 ^ np.uint64(7)
        for _ in range(rounds):
            x0 = x0 * m + np.uint64(1)
            x1 = x1 * m + np.uint64(3)
            x2 = x2 * m + np.uint64(5)
            x3 = x3 * m + np.uint64(7)
            x4 = x4 * m + np.uint64(9)
            x5 = x5 * m + np.uint64(11)
            x6 = x6 * m + np.uint64(13)
            x7 = x7 * m + np.uint64(15)
        out[i] = x0 ^ x1 ^ x2 ^ x3 ^ x4 ^ x5 ^ x6 ^ x7


@njit(nogil=True, cache=False)
def _gather(out, table, lo, hi, rounds):  # type: ignore[no-untyped-def]
    mask = np.uint64(table.shape[0] - 1)
    for i in range(lo, hi):
        h = np.uint64(i + 1) * np.uint64(0x9E3779B97F4A7C15)
        acc = np.uint64(0)
        for _ in range(rounds):
            h = h * np.uint64(0xBF58476D1CE4E5B9) + np.uint64(1)
            row = (h >> np.uint64(20)) & mask
            acc += table[row, 0] ^ table[row, 7]
        out[i] = acc


def thread_ceiling(
    workers: int, repeats: int = 2, items: int = 1 << 18, kind: str = "latency"
) -> tuple[float, str]:
    """(best 1-thread seconds / best ``workers``-thread seconds, one printable line)."""
    out = np.zeros(items, dtype=np.uint64)
    if kind == "latency":
        rounds = 2000
        _spin(out, 0, 1, 1)  # compile

        def work(lo: int, hi: int) -> None:
            _spin(out, lo, hi, rounds)

        what = "perfectly parallel compiled loop"
    elif kind == "throughput":
        rounds = 3000
        _alu(out, 0, 1, 1)

        def work(lo: int, hi: int) -> None:
            _alu(out, lo, hi, rounds)

        what = "eight independent multiply chains"
    elif kind == "memory":
        rounds = 160
        table = np.random.default_rng(1).integers(0, 2**63, size=(1 << 19, 8), dtype=np.uint64)
        _gather(out, table, 0, 1, 1)

        def work(lo: int, hi: int) -> None:
            _gather(out, table, lo, hi, rounds)

        what = "random 64-byte reads from 32 MiB"
    else:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    best: dict[int, float] = {}
    cpu: dict[int, float] = {}
    for w in [1, workers] * repeats:
        c0, t0 = time.process_time(), time.perf_counter()
        run_split(w, items, work, words=1 << 30)
        dt = time.perf_counter() - t0
        if dt < best.get(w, float("inf")):
            best[w], cpu[w] = dt, time.process_time() - c0
    ratio = best[1] / best[workers]
    line = (
        f"ceiling ({what}, same pool): 1 thread {best[1]:.2f}s "
        f"({cpu[1]:.2f} CPU-s), {workers} threads {best[workers]:.2f}s ({cpu[workers]:.2f} CPU-s): "
        f"{ratio:.2f}x; load {os.getloadavg()[0]:.1f}"
    )
    return ratio, line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kind", choices=(*KINDS, "all"), default="latency")
    args = ap.parse_args()
    for kind in KINDS if args.kind == "all" else (args.kind,):
        print(thread_ceiling(args.workers, kind=kind)[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
