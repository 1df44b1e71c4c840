"""What 1 -> W kernel threads can give on this machine right now: the reference for thread speedups.

A compiled loop without the GIL and without memory traffic (xorshift rounds per element), cut into
one range per thread by ``party.protocol.threads.run_split`` exactly as the kernels are, timed with
1 and W threads, alternated, best of ``repeats`` each. On idle cores it gives ~W x; on a shared
machine it shows how much of a second core this process gets at the moment (the kernel's own 1 -> W
ratio cannot beat it). Used by ``bench_scaling.py cores`` and ``bench_mpc.py`` (part 5).

    .venv/bin/python scripts/thread_ceiling.py [--workers 2]
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


@njit(nogil=True, cache=False)
def _spin(out, lo, hi, rounds):  # type: ignore[no-untyped-def]
    for i in range(lo, hi):
        x = np.uint64(i + 1)
        for _ in range(rounds):
            x ^= x << np.uint64(13)
            x ^= x >> np.uint64(7)
            x ^= x << np.uint64(17)
        out[i] = x


def thread_ceiling(workers: int, repeats: int = 2, items: int = 1 << 18) -> tuple[float, str]:
    """(best 1-thread seconds / best ``workers``-thread seconds, one printable line)."""
    out = np.zeros(items, dtype=np.uint64)
    rounds = 2000
    _spin(out, 0, 1, 1)  # compile
    best: dict[int, float] = {}
    cpu: dict[int, float] = {}
    for w in [1, workers] * repeats:
        c0, t0 = time.process_time(), time.perf_counter()
        run_split(w, items, lambda lo, hi: _spin(out, lo, hi, rounds), words=1 << 30)
        dt = time.perf_counter() - t0
        if dt < best.get(w, float("inf")):
            best[w], cpu[w] = dt, time.process_time() - c0
    ratio = best[1] / best[workers]
    line = (
        f"ceiling (perfectly parallel compiled loop, same pool): 1 thread {best[1]:.2f}s "
        f"({cpu[1]:.2f} CPU-s), {workers} threads {best[workers]:.2f}s ({cpu[workers]:.2f} CPU-s): "
        f"{ratio:.2f}x; load {os.getloadavg()[0]:.1f}"
    )
    return ratio, line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    print(thread_ceiling(ap.parse_args().workers)[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
