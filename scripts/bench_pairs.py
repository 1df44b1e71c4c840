#!/usr/bin/env python3
"""CPU per visited candidate pair of the compiled pair kernel (target any) alone, on real 1M-scale inputs.

Builds party 0's comparison inputs of a generated run once (P x N people from
``party.synthetic.generate``, encoded with the shipped schema, blocks, shares: what a node has when
its comparison starts; ``scripts/profile_segments.py`` makes and caches the encodings) and caches
them under ``--out`` (pseudonyms, segments and sorted block positions of every party, as ``.npy``).
Then, for every pair of parties, it times the kernel on one thread over the blocks the two share
(``PairPlan.kept_pairs``, ``--max-pairs`` per piece), and with ``--base FILE`` (an earlier
``party/protocol/_numba_pairs.py``, e.g. ``git show a3aa59f:party/protocol/_numba_pairs.py >
/tmp/base.py``) the same blocks through that file's ``pair_blocks`` (the kernel that walked blocks)
in the same process, checking that the kept rows sorted by their keys (bytes), c and duplicate
counts are identical, that this tree's rows come in key order, and printing the ratio.

Example: python scripts/bench_pairs.py --records 300000 --out /tmp/kp300k --base /tmp/base.py
(above 300,000 records: ``flock /tmp/pprl-big.lock``; the first run encodes, ~15 CPU-s per 1M).
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def build_inputs(records: int, parties: int, seed: int, out: Path) -> Path:
    """Party 0's comparison inputs (per party: keys, segments, sorted positions), cached in ``out``."""
    folder = out / f"pair-inputs-p{parties}-n{records}-s{seed}"
    if (folder / "done").exists():
        return folder
    from profile_segments import encoded_tables  # type: ignore[import-not-found]

    from party.protocol.pair_engine import PairEngine
    from party.protocol.params import ProtocolParameters

    tables, bits = encoded_tables(records, parties, seed, out)
    params = ProtocolParameters(
        parties=tuple(f"party-{i}" for i in range(parties)),
        filter_bits=bits,
        match_threshold=0.8,
        segment_threshold=0.7,
        one_to_one=False,
        memory_budget_bytes=4096 * 2**20,
        target="any",
    )
    engines = [PairEngine(i, params, tables[i]) for i in range(parties)]
    del tables
    digests = [e.block_digests() for e in engines]
    for e in engines:
        e.set_common_blocks(e.common_of(digests))
    shares = [s for e in engines for s in e.outgoing_shares() if s.target == 0]
    for s in shares:
        engines[0].receive_share(s)
    e0 = engines[0]
    for e in engines[1:]:
        e.close()
    pseud, _, segs = e0._party_columns()
    folder.mkdir(parents=True, exist_ok=True)
    for j in range(parties):
        np.save(folder / f"keys{j}.npy", np.ascontiguousarray(pseud[j], np.uint64))
        np.save(folder / f"segs{j}.npy", np.ascontiguousarray(segs[j], np.uint64))
        np.save(folder / f"pos{j}.npy", np.ascontiguousarray(e0._positions[j], np.int32))
    np.save(
        folder / "meta.npy", np.array([e0.segment_bits, int(e0._ready_to_compare().size)], np.int64)
    )
    (folder / "done").write_text("ok\n")
    e0.close()
    return folder


def load_base(path: Path) -> Any:
    """An earlier ``_numba_pairs.py`` as a module of its own (its imports resolve to this tree),
    from a fresh copy (numba's cache of the file is keyed by its path and module)."""
    copy = Path(tempfile.mkdtemp(prefix="bench-pairs-")) / "base_numba_pairs.py"
    shutil.copyfile(path, copy)
    spec = importlib.util.spec_from_file_location("base_numba_pairs", copy)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu() -> float:
    return time.thread_time()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=300_000, help="records per party")
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="folder for the data and inputs")
    ap.add_argument("--base", type=Path, default=None, help="an earlier _numba_pairs.py to A/B")
    ap.add_argument("--max-pairs", type=int, default=4_000_000, help="candidate pairs per piece")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each kernel (best kept)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    folder = build_inputs(args.records, args.parties, args.seed, args.out)
    gc.collect()

    from party.protocol.blocks import block_counts, block_index_at
    from party.protocol.kernel import threshold_table
    from party.protocol.pair_engine import party_pairs
    from party.protocol.pairwise import PairPlan, pair_side

    p = args.parties
    segment_bits, blocks = (int(x) for x in np.load(folder / "meta.npy"))
    sides = [
        pair_side(
            j,
            np.load(folder / f"keys{j}.npy"),
            np.load(folder / f"segs{j}.npy"),
            np.load(folder / f"pos{j}.npy"),
        )
        for j in range(p)
    ]
    table = threshold_table(2, 0.7, 2 * segment_bits)
    base: Any = load_base(args.base) if args.base else None
    print(f"inputs: {folder} ({blocks} common blocks, segment bits {segment_bits})")

    def measure(use: list[Any], a: int, b: int, show: bool) -> tuple[int, dict[str, float]]:
        """Visited pairs of parties a and b, and each kernel's CPU seconds (identical results)."""
        ia, ib = (
            block_index_at(
                use[j].positions,
                blocks,
                keys=use[j].keys,
                rows_sorted=True,
                counts=block_counts(use[j].positions, blocks, rows_sorted=True),
            )
            for j in (a, b)
        )
        plan = PairPlan.from_indexes(ia, ib, None)
        na, nb = np.diff(ia.starts), np.diff(ib.starts)
        ids = np.flatnonzero(plan.whole & (na > 0) & (nb > 0))  # the base kernel's live blocks
        cum = np.cumsum(na[ids] * nb[ids])
        visited = int(cum[-1]) if cum.size else 0

        def run_new() -> tuple[list[np.ndarray], int]:
            rows: list[np.ndarray] = []
            dup = 0
            for found, _, kept in plan.kept_pairs(use[a], use[b], p, table, args.max_pairs, 1):
                rows.extend(found)
                dup += kept
            return rows, dup

        def run_base() -> tuple[list[np.ndarray], int]:
            fixed: tuple[Any, ...] = (ia.starts, ia.rows, ib.starts, ib.rows)
            fixed += (use[a].positions, use[b].positions)
            segs = [np.ascontiguousarray(use[j].segments) for j in (a, b)]
            pops = [use[j].pops.astype(np.int64) for j in (a, b)]
            keys = [np.ascontiguousarray(use[j].keys) for j in (a, b)]
            fixed += (plan.whole, *segs, *pops, table, *keys, use[a].column, use[b].column, p)
            rows: list[np.ndarray] = []
            dup = 0
            lo = 0
            while lo < ids.size:
                before = int(cum[lo - 1]) if lo else 0
                hi = max(lo + 1, int(np.searchsorted(cum, before + args.max_pairs, side="right")))
                out, kept, _ = base.pair_blocks(ids, lo, hi, 0, 2**62, *fixed)
                if out.shape[0]:
                    rows.append(out)
                dup += int(kept)
                lo = hi
            return rows, dup

        kernels = {"new": run_new} | ({"base": run_base} if base is not None else {})
        results: dict[str, tuple[bytes, int]] = {}
        seconds: dict[str, float] = {}
        for name, fn in kernels.items():
            best = float("inf")
            for _ in range(args.repeat if show else 1):
                gc.collect()
                t0 = cpu()
                rows, dup = fn()
                best = min(best, cpu() - t0)
            joined = np.concatenate(rows) if rows else np.zeros((0, p + 1), np.uint64)
            order = np.lexsort(joined[:, :p].T[::-1])  # by the key columns, as the store sorts
            if name == "new" and not np.array_equal(order, np.arange(order.size)):
                raise SystemExit(f"parties ({a},{b}): the kernel's rows are not in key order")
            results[name] = (joined[order].tobytes(), dup)
            seconds[name] = best
            if show:
                print(
                    f"parties ({a},{b}) {name:4s}: {visited:>11,d} visited pairs, "
                    f"{joined.shape[0]:>10,d} kept, {dup:>11,d} kept with duplicates, "
                    f"{best:7.2f} CPU-s, {best / max(visited, 1) * 1e9:7.1f} CPU-ns per visit"
                )
            del rows, joined
        if base is not None and results["new"] != results["base"]:
            raise SystemExit(f"parties ({a},{b}): the kernels' rows or duplicates differ")
        return visited, seconds

    # warm-up: compile (or load from numba's cache) on the first rows of each party
    measure(
        [
            pair_side(j, s.keys[:3000], s.segments[:3000], s.positions[:3000])
            for j, s in enumerate(sides)
        ],
        0,
        1,
        False,
    )
    totals: dict[str, float] = {"new": 0.0, "base": 0.0}
    visited_all = 0
    for a, b in party_pairs(p):
        visited, seconds = measure(sides, a, b, True)
        visited_all += visited
        for k, v in seconds.items():
            totals[k] += v
    line = f"all: {visited_all:,d} visited pairs; new {totals['new']:.2f} CPU-s"
    line += f" ({totals['new'] / max(visited_all, 1) * 1e9:.1f} ns per visit)"
    if base is not None:
        line += f"; base {totals['base']:.2f} CPU-s"
        line += f" ({totals['base'] / max(visited_all, 1) * 1e9:.1f} ns per visit)"
        line += f"; base / new = {totals['base'] / max(totals['new'], 1e-9):.2f}x"
        line += "; the same rows (in key order), c and duplicate counts"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
