#!/usr/bin/env python
"""The survivors' row store alone at the 3 x 1M scale: append, spill, merge and read back.

    .venv/bin/python scripts/bench_store.py [--rows 8500000] [--workers 2] [--in-order] [--code DIR]

Target any's survivor rows of one node at 3 x 1M (``--rows``, default 8.5 M: the lead's networked
run kept 8,499,368): a third per pair of parties (a, b), each row the pseudonyms of a random record
of a and of b (1 M sorted random pseudonyms per party), 0 in the third party's column, and a count
c; ``--in-order``: each pair of parties' rows in key order, as the pair kernel yields them since
b3a6a92; appended in pieces of 700,000 rows (as the pair kernel's pieces come) to a sorted store whose
gauge grants 390 MiB (what a node's stores get while it compares at 3 x 1M), so it spills; then
``finish`` with 768 MiB (what they get after the comparison frees its inputs) and one read back.
Prints the process CPU of the appends (their spills), of ``finish`` (the merge) and of the read,
and a checksum of the rows read. ``--code DIR``: the code of another checkout (e.g. a ``git
archive`` of main) for a same-minute A/B; its store may not know ``repeats``.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8_500_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--code", type=Path, default=ROOT)
    ap.add_argument("--in-order", action="store_true", help="each party pair's rows in key order")
    args = ap.parse_args()
    if args.rows < 3 or args.workers < 1:
        ap.error("--rows must be at least 3 and --workers at least 1")
    sys.path.insert(0, str(args.code.resolve()))
    import numpy as np

    from party.protocol.spill import LocalGauge, RowStore, SpillFolder

    rng = np.random.default_rng(1)
    n = 1_000_000
    keys = [np.sort(rng.integers(1, 2**64, n, dtype=np.uint64)) for _ in range(3)]
    pieces = []
    per = args.rows // 3
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        rows = np.zeros((per, 4), np.uint64)
        rows[:, a] = keys[a][rng.integers(0, n, per)]
        rows[:, b] = keys[b][rng.integers(0, n, per)]
        rows[:, 3] = rng.integers(0, 300, per).astype(np.uint64)
        if args.in_order:
            rows = rows[np.lexsort((rows[:, b], rows[:, a]))]
        pieces += [rows[s : s + 700_000] for s in range(0, per, 700_000)]
    known = RowStore.__init__.__code__.co_varnames
    kw = {"repeats": False} if "repeats" in known else {}  # as PairEngine's survivors
    opts = dict(key_columns=3, workers=args.workers, **kw)
    with tempfile.TemporaryDirectory(prefix="bench-store-") as d:
        folder = SpillFolder(d)
        warm = RowStore(4, gauge=LocalGauge(1 << 16), folder=folder, **opts)  # type: ignore[arg-type]
        for p in pieces[:3]:  # compiles (or loads) the kernels
            warm.append(p[:50_000])
        warm.finish()
        warm.close()
        gauge = LocalGauge(390 * 2**20)
        store = RowStore(4, gauge=gauge, folder=folder, merge_bytes=3 * 2**30 // 8, **opts)  # type: ignore[arg-type]
        c0, t0 = cpu(), time.perf_counter()
        for p in pieces:
            store.append(p)
        c1 = cpu()
        gauge.limit_bytes = 768 * 2**20
        store.finish()
        c2, t2 = cpu(), time.perf_counter()
        total = check = 0
        for chunk in store.chunks(1 << 16):
            total += chunk.shape[0]
            check ^= int(np.bitwise_xor.reduce(chunk[:, 0] ^ chunk[:, 1] * 3 ^ chunk[:, 3]))
        c3 = cpu()
        spilled = folder.bytes_written
        store.close()
        folder.close()
    print(
        f"{args.code}: {args.workers} workers{', in order' if args.in_order else ''}: appends (spills) {c1 - c0:.2f} CPU-s, finish "
        f"{c2 - c1:.2f} CPU-s, read back {c3 - c2:.2f} CPU-s, total {c3 - c0:.2f} CPU-s (wall to "
        f"finish {t2 - t0:.2f} s); {total:,} rows, checksum {check:#x}, {spilled:,} bytes "
        f"spilled; load {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
