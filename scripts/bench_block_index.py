#!/usr/bin/env python
"""One party's block index alone at the 3 x 1M scale (``blocks.block_index_at``).

    .venv/bin/python scripts/bench_block_index.py [--workers 2] [--code DIR]

1 M rows of 17 block positions each (random among 16 M common blocks, 5% none, each row sorted:
what ``pair_side`` makes of a party's positions at 3 x 1M), pseudonym keys in row order, the
counts given (as the comparison passes them): the process CPU of building the index, 1 and
``--workers`` threads alternated twice, with a checksum of its rows and starts. ``--code DIR``:
another checkout (e.g. a ``git archive`` of main) for a same-minute A/B.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--code", type=Path, default=ROOT)
    args = ap.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    import numpy as np

    from party.protocol.blocks import block_counts, block_index_at

    rng = np.random.default_rng(1)
    n, width, blocks = 1_000_000, 17, 16_000_000
    pos = rng.integers(0, blocks, size=(n, width)).astype(np.int32)
    pos[rng.random((n, width)) < 0.05] = -1
    pos.sort(axis=1)
    keys = np.sort(rng.integers(1, 2**64, n, dtype=np.uint64))
    block_index_at(pos[:100], blocks, keys=keys[:100], rows_sorted=True)  # compiles or loads
    for w in (1, args.workers, 1, args.workers):
        counts = block_counts(pos, blocks, w, rows_sorted=True)
        c0, t0 = cpu(), time.perf_counter()
        ix = block_index_at(pos, blocks, keys=keys, workers=w, rows_sorted=True, counts=counts)
        c1, t1 = cpu(), time.perf_counter()
        check = int(ix.rows[::997].sum()) ^ int(ix.starts[::991].sum())
        print(
            f"{args.code}: {w} workers: index {c1 - c0:.2f} CPU-s, {t1 - t0:.2f} s wall; "
            f"checksum {check}; load {os.getloadavg()[0]:.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
