"""Candidate-set enumeration with segment filtering inside one block (Algo 1 + Algo 4): the kernels.

Contract (all kernels). Input: for one (sub-)block, party j's segments as packed rows ``segs[j]``
(n_j, words) in the layout of ``party.encoding.bits`` (all the same segment index, the comparing
party's). A candidate set takes one row per party. Partial sets are extended party by party in index
order 0, 1, ...; after adding party j the partial set of ``k = j + 1`` rows has ``c`` = popcount of
the AND of their segments and ``s`` = sum of their segment popcounts, and is kept iff
``k * c >= s_m * s`` evaluated in IEEE double (``keep_partial``); so everything is kept when s_m = 0,
and so is a set whose segments are all empty (s = 0: its segment Dice is undefined, not low).
Output: ``idx`` (m, P) int64 row positions and ``c`` (m,) int64 of the surviving full sets.

Kernels, behind one signature (``compare_block(..., kernel=name)``; ``KERNELS`` lists them):

- ``reference``: the short, obviously correct depth-first loop with Python-int popcounts.
- ``numba``: compiled AND + POPCNT over packed words (``_numba_kernel``), with the threshold as an
  exact integer table ``T_k[s]`` (smallest c passing ``keep_partial``) and a free upper-bound test
  ``min(popcount(partial AND), popcount(row)) < T_k[s]`` that skips the AND for hopeless pairs.
- ``numpy``: float32 matrix product of unpacked 0/1 rows (common 1-bits = A @ B.T, exact below
  2^24), loose float32 threshold then the exact table test; used when numba is unavailable.

Many small blocks (``compare_block_batch``, the common case with fine multi-pass blocking): a compiled
depth-first loop over a range of blocks (``_numba_kernel.batch_blocks``), which reads each group of
blocks' rows ahead in a loop of independent loads; ``distinct=True`` then keeps each candidate set
once (multi-pass blocking finds most sets in several blocks) by sorting row tuples packed into one
uint64 (``distinct_sets``). ``fast_block_rows`` (the engine's fast path) does the same per range
of blocks on the kernel threads and merges the sorted ranges into distinct ring rows.

Every core (``workers`` > 1): the numba kernel splits the partial sets of a chunk into contiguous row
ranges, one per thread (the compiled loop releases the GIL; each range writes its own output slots,
so the compacted output is the same as one thread's); ``compare_block_batch`` splits its blocks into
a few contiguous ranges per thread, each compared and made distinct in a pool thread
(``party.protocol.threads``), and merges their outputs in block order (distinct: one stable sort of
the sorted runs). Results, their order and the stage counts are identical to ``workers=1``.

``iter_block`` runs the chosen kernel chunk by chunk: party 0's rows in groups, the next party's rows
in column chunks, surviving partial sets carried (with their AND) into the next party in groups, so
the working set stays within ``budget_bytes`` whatever the block size. It checks ``cancel`` between
chunks and reports settled candidate sets through ``tick``.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.encoding.bits import popcount_rows, unpack_rows
from party.protocol.errors import ComparisonCancelled, ProtocolError
from party.protocol.threads import run_split, split_range, split_running_sum, thread_pool

logger = logging.getLogger(__name__)

# float32 rounding of the loose threshold (numpy kernel) is below 1e-3 for segments up to 2^13 bits.
_LOOSE_MARGIN = np.float32(0.01)

try:  # pragma: no branch - numba is a declared dependency; the numpy kernel is the fallback
    from party.protocol import _numba_kernel
    from party.protocol._numba_party_arrays import PartyArrays

    HAVE_NUMBA = True
except ImportError:  # pragma: no cover
    _numba_kernel = None  # type: ignore[assignment]
    HAVE_NUMBA = False

KERNELS = ("reference", "numba", "numpy")
DEFAULT_KERNEL = "numba" if HAVE_NUMBA else "numpy"


# Below this many pairs (partial set x row) a chunk is not worth handing to several threads.
PARALLEL_MIN_PAIRS = 1 << 16


def split_even(weights: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous [a, b) ranges of ``weights``' indices with about equal sums, at most ``parts``,
    none empty, covering everything in order."""
    n = int(weights.size)
    parts = max(1, min(parts, n))
    cum = np.cumsum(weights, dtype=np.float64)
    total = float(cum[-1]) if n else 0.0
    cuts = [0]
    for k in range(1, parts):
        c = int(np.searchsorted(cum, total * k / parts, side="left")) + 1
        if cuts[-1] < c < n:
            cuts.append(c)
    cuts.append(n)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=False) if b > a]


@dataclass
class StageCounts:
    """Partial sets evaluated and kept when party j joins (index j = 1..P-1; index 0 unused)."""

    evaluated: list[int] = field(default_factory=list)
    survived: list[int] = field(default_factory=list)

    @classmethod
    def zeros(cls, parties: int) -> StageCounts:
        return cls([0] * parties, [0] * parties)

    def add(self, other: StageCounts) -> None:
        for j in range(len(other.evaluated)):
            self.evaluated[j] += other.evaluated[j]
            self.survived[j] += other.survived[j]


def keep_partial(k: int, c: int, s: int, threshold: float) -> bool:
    """The pruning rule of the module docstring for one partial set of k rows."""
    return float(k * c) >= threshold * float(s)


@functools.lru_cache(maxsize=256)
def threshold_table(k: int, threshold: float, max_s: int) -> np.ndarray:
    """T[s] for s = 0..max_s: the smallest integer c >= 0 with keep_partial(k, c, s, threshold).

    Cached; the returned array is read-only.
    """
    s = np.arange(max_s + 1, dtype=np.float64)
    thr = float(threshold)
    t = np.maximum(np.ceil(thr * s / k), 0).astype(np.int64)

    def ok(c: np.ndarray) -> np.ndarray:
        return (k * c).astype(np.float64) >= thr * s

    bad = ~ok(t)
    while bad.any():
        t[bad] += 1
        bad = ~ok(t)
    lower = (t > 0) & ok(np.maximum(t - 1, 0))
    while lower.any():
        t[lower] -= 1
        lower = (t > 0) & ok(np.maximum(t - 1, 0))
    t.setflags(write=False)
    return t


def compare_block_reference(
    segs: Sequence[np.ndarray], threshold: float, counts: StageCounts | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Reference kernel: depth-first loops over rows with Python-int popcounts."""
    parties = len(segs)
    pops = [popcount_rows(s) for s in segs]
    out_idx: list[tuple[int, ...]] = []
    out_c: list[int] = []

    def rec(level: int, idx: tuple[int, ...], acc: np.ndarray | None, s: int) -> None:
        for r in range(segs[level].shape[0]):
            row = segs[level][r] if acc is None else acc & segs[level][r]
            c = int(np.bitwise_count(row).sum())
            s2 = s + int(pops[level][r])
            if level > 0:
                if counts is not None:
                    counts.evaluated[level] += 1
                if not keep_partial(level + 1, c, s2, threshold):
                    continue
                if counts is not None:
                    counts.survived[level] += 1
            if level == parties - 1:
                out_idx.append((*idx, r))
                out_c.append(c)
            else:
                rec(level + 1, (*idx, r), row, s2)

    if all(s.shape[0] for s in segs):
        rec(0, (), None, 0)
    idx = np.array(out_idx, dtype=np.int64).reshape(-1, parties)
    return idx, np.array(out_c, dtype=np.int64)


class _NumbaBackend:
    """Partial sets carried as packed uint64 ANDs; compiled AND + popcount."""

    bytes_per_bit = 1 / 8

    def __init__(
        self, segs: Sequence[np.ndarray], seg_bits: int, cache: bool, workers: int = 1
    ) -> None:
        self.segs = [np.ascontiguousarray(s, dtype=np.uint64) for s in segs]
        self.buf_col = np.zeros(0, dtype=np.int32)
        self.buf_c = np.zeros(0, dtype=np.int32)
        self.workers = workers

    def rows(self, j: int, a: int, b: int) -> np.ndarray:
        return self.segs[j][a:b]

    def extend(
        self,
        acc: np.ndarray,
        psum: np.ndarray,
        right: np.ndarray,
        rpop: np.ndarray,
        table: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m, n = acc.shape[0], right.shape[0]
        if self.buf_col.size < m * n:
            self.buf_col = np.empty(m * n, dtype=np.int32)
            self.buf_c = np.empty(m * n, dtype=np.int32)
        counts = np.empty(m, dtype=np.int64)
        kernel = _numba_kernel
        assert kernel is not None
        acc = np.ascontiguousarray(acc)
        # Row range [a, b) of the partial sets writes only slots [a*n, b*n) and counts[a:b].
        ranges = (
            split_even(np.ones(m), self.workers)
            if self.workers > 1 and m > 1 and m * n >= PARALLEL_MIN_PAIRS
            else [(0, m)]
        )

        def run(a: int, b: int) -> None:
            kernel.extend_chunk(
                acc[a:b],
                psum[a:b],
                right,
                rpop,
                table,
                self.buf_col[a * n : b * n],
                self.buf_c[a * n : b * n],
                counts[a:b],
            )

        if len(ranges) == 1:
            run(0, m)
        else:
            for fut in [thread_pool(self.workers).submit(run, a, b) for a, b in ranges]:
                fut.result()
        ri, ci, cv = kernel.compact(self.buf_col, self.buf_c, counts, n)
        return ri, ci, cv

    @staticmethod
    def combine(acc: np.ndarray, ri: np.ndarray, right: np.ndarray, ci: np.ndarray) -> np.ndarray:
        return acc[ri] & right[ci]


class _NumpyBackend:
    """Partial sets carried as float32 0/1 rows; common bits by matrix product."""

    bytes_per_bit = 4.0

    def __init__(
        self, segs: Sequence[np.ndarray], seg_bits: int, cache: bool, workers: int = 1
    ) -> None:
        self.segs = segs
        self.seg_bits = seg_bits
        self.whole = [
            unpack_rows(s, seg_bits).astype(np.float32) if cache and s.shape[0] else None
            for s in segs
        ]

    def rows(self, j: int, a: int, b: int) -> np.ndarray:
        whole = self.whole[j]
        if whole is not None:
            return whole[a:b]
        return unpack_rows(self.segs[j][a:b], self.seg_bits).astype(np.float32)

    def extend(
        self,
        acc: np.ndarray,
        psum: np.ndarray,
        right: np.ndarray,
        rpop: np.ndarray,
        table: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        prod = acc @ right.T
        if not table.any():
            m, n = prod.shape
            ri = np.repeat(np.arange(m, dtype=np.int64), n)
            ci = np.tile(np.arange(n, dtype=np.int64), m)
            return ri, ci, prod.ravel().astype(np.int64)
        # The table is ~ s_m * s / k: a loose linear test in float32, then the exact table test.
        smax = table.size - 1
        slope = np.float32(table[smax] / smax) if smax else np.float32(0)
        rowterm = psum.astype(np.float32) * slope - np.float32(1) - _LOOSE_MARGIN
        colterm = rpop.astype(np.float32) * slope
        loose = (prod - colterm[None, :]) >= rowterm[:, None]
        ri, ci = np.nonzero(loose)
        cv = prod[ri, ci].astype(np.int64)
        exact = cv >= table[psum[ri] + rpop[ci]]
        return ri[exact].astype(np.int64), ci[exact].astype(np.int64), cv[exact]

    @staticmethod
    def combine(acc: np.ndarray, ri: np.ndarray, right: np.ndarray, ci: np.ndarray) -> np.ndarray:
        return acc[ri] * right[ci]


def iter_block(
    segs: Sequence[np.ndarray],
    seg_bits: int,
    threshold: float,
    *,
    kernel: str = DEFAULT_KERNEL,
    budget_bytes: int = 64 * 2**20,
    counts: StageCounts | None = None,
    cancel: threading.Event | None = None,
    tick: Callable[[int], None] | None = None,
    col_chunk: int = 4096,
    max_rows: int | None = None,
    pops: Sequence[np.ndarray] | None = None,
    workers: int = 1,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield (idx, c) chunks of surviving full candidate sets (see the module docstring).

    ``tick(n)`` is called with the number of full candidate sets (of the block's product of sizes)
    settled since the last call: pruned partial sets count for all their extensions. Chunks are
    in no particular order. ``col_chunk`` and ``max_rows`` bound the chunk shapes further (tests use
    them to force chunking). ``kernel`` is "numba" or "numpy". ``pops`` may pass the rows' popcounts
    (int64) when the caller has them already. ``workers`` threads share each numba chunk.
    """
    parties = len(segs)
    sizes = [int(s.shape[0]) for s in segs]
    if parties < 2:
        raise ProtocolError("a candidate set needs at least 2 parties")
    if min(sizes) == 0:
        return
    backend_cls: Any
    if kernel == "numba":
        if not HAVE_NUMBA:
            raise ProtocolError("the numba kernel is not available (numba is not installed)")
        backend_cls = _NumbaBackend
    elif kernel == "numpy":
        backend_cls = _NumpyBackend
    else:
        raise ProtocolError(f"unknown kernel {kernel!r} for iter_block (numba or numpy)")
    st = counts if counts is not None else StageCounts.zeros(parties)
    if pops is None:
        pops = [popcount_rows(s) for s in segs]
    max_s = parties * seg_bits
    tables = [threshold_table(max(k, 1), float(threshold), max_s) for k in range(parties + 1)]
    row_bytes = max(8, int(seg_bits * backend_cls.bytes_per_bit))
    cache = sum(sizes) * seg_bits * 4 <= budget_bytes // 4
    backend = backend_cls(segs, seg_bits, cache, workers)
    # rest[j] = number of full sets one partial set ending at party j stands for.
    rest = [1] * parties
    for j in range(parties - 2, -1, -1):
        rest[j] = rest[j + 1] * sizes[j + 1]
    level_budget = max(budget_bytes // (2 * parties), 1 << 20)
    per_pair = 48 + 8 * parties
    chunks = [max(1, min(n, col_chunk)) for n in sizes]

    def rows_for(j_next: int) -> int:
        rows = max(1, level_budget // (chunks[j_next] * per_pair + row_bytes))
        return rows if max_rows is None else max(1, min(rows, max_rows))

    def extend(
        j: int, idx: np.ndarray, acc: np.ndarray, psum: np.ndarray
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # Partial sets idx (m, j) end at party j-1; add party j.
        m = idx.shape[0]
        n = sizes[j]
        for a in range(0, n, chunks[j]):
            if cancel is not None and cancel.is_set():
                raise ComparisonCancelled("comparison cancelled")
            b = min(n, a + chunks[j])
            right = backend.rows(j, a, b)
            ri, ci, cvals = backend.extend(acc, psum, right, pops[j][a:b], tables[j + 1])
            evaluated = m * (b - a)
            st.evaluated[j] += evaluated
            st.survived[j] += int(ri.size)
            if tick is not None and evaluated > ri.size:
                tick((evaluated - int(ri.size)) * rest[j])
            if ri.size == 0:
                continue
            if j == parties - 1:
                full = np.empty((ri.size, parties), dtype=np.int64)
                full[:, :-1] = idx[ri]
                full[:, -1] = ci + a
                if tick is not None:
                    tick(int(ri.size))
                yield full, cvals
                continue
            g = rows_for(j + 1)
            for s0 in range(0, ri.size, g):
                r_g = ri[s0 : s0 + g]
                c_g = ci[s0 : s0 + g]
                idx2 = np.empty((r_g.size, j + 1), dtype=np.int64)
                idx2[:, :-1] = idx[r_g]
                idx2[:, -1] = c_g + a
                acc2 = backend.combine(acc, r_g, right, c_g)
                psum2 = psum[r_g] + pops[j][a + c_g]
                yield from extend(j + 1, idx2, acc2, psum2)

    m0 = rows_for(1)
    for a in range(0, sizes[0], m0):
        if cancel is not None and cancel.is_set():
            raise ComparisonCancelled("comparison cancelled")
        b = min(sizes[0], a + m0)
        idx0 = np.arange(a, b, dtype=np.int64)[:, None]
        yield from extend(1, idx0, backend.rows(0, a, b), pops[0][a:b].copy())


def compare_block(
    segs: Sequence[np.ndarray],
    seg_bits: int,
    threshold: float,
    *,
    kernel: str = DEFAULT_KERNEL,
    budget_bytes: int = 64 * 2**20,
    counts: StageCounts | None = None,
    col_chunk: int = 4096,
    max_rows: int | None = None,
    workers: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Any kernel, collected into one (idx, c) pair sorted lexicographically by idx."""
    if kernel == "reference":
        return compare_block_reference(segs, threshold, counts)
    parts = list(
        iter_block(
            segs,
            seg_bits,
            threshold,
            kernel=kernel,
            budget_bytes=budget_bytes,
            counts=counts,
            col_chunk=col_chunk,
            max_rows=max_rows,
            workers=workers,
        )
    )
    if not parts:
        return np.zeros((0, len(segs)), dtype=np.int64), np.zeros(0, dtype=np.int64)
    idx = np.concatenate([p[0] for p in parts])
    c = np.concatenate([p[1] for p in parts])
    order = np.lexsort(idx.T[::-1])
    return idx[order], c[order]


def compare_block_batch(
    segs: Sequence[np.ndarray],
    pops: Sequence[np.ndarray],
    rows_of: Sequence[np.ndarray],
    starts: np.ndarray,
    sizes: np.ndarray,
    seg_bits: int,
    threshold: float,
    *,
    counts: StageCounts | None = None,
    workers: int = 1,
    kernel: str = DEFAULT_KERNEL,
    distinct: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Many small blocks at once (same rule and counts as the kernels).

    ``segs[j]``/``pops[j]`` are party j's rows and popcounts for the whole run. Block b holds rows
    ``rows_of[j][starts[j, b] : starts[j, b] + sizes[j, b]]`` of party j (``starts``/``sizes`` are
    (P, nb) int64). Returns surviving sets as rows into ``segs`` (m, P) and their c, in block order
    (within a block lexicographically); with ``distinct`` a set found in several blocks is returned
    once and the sets are sorted lexicographically (``distinct_sets``). Memory is proportional to
    the blocks' candidate sets: the caller batches.

    ``kernel`` "numba": a compiled depth-first loop over the blocks; with ``workers`` > 1 the
    blocks are cut into ``BATCH_PIECES_PER_THREAD`` contiguous ranges per thread, each compared
    (and made distinct) in a pool thread without the GIL, and the outputs combined in block order:
    the same output as one thread. "numpy": partial sets of all blocks extended party by party with
    numpy, split the same way by candidate sets (also for "reference", whose block kernel has no
    batch form).
    """
    parties = len(segs)
    st = counts if counts is not None else StageCounts.zeros(parties)
    nb = int(sizes.shape[1])
    bound = [int(s.shape[0]) for s in segs]
    if kernel == "numba":
        if not HAVE_NUMBA:
            raise ProtocolError("the numba kernel is not available (numba is not installed)")
        prepared = _numba_batch_inputs(segs, pops, rows_of, starts, sizes, seg_bits, threshold)
        ranges = (
            split_range(nb, workers * BATCH_PIECES_PER_THREAD)
            if workers > 1 and nb >= PARALLEL_MIN_BLOCKS
            else [(0, nb)]
        )

        def run(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, StageCounts]:
            assert _numba_kernel is not None
            idx, c, ev, sv = prepared.run(lo, hi)
            if distinct:
                idx, c = distinct_sets(idx, c, bound)
            return idx, c, StageCounts([int(x) for x in ev], [int(x) for x in sv])

    elif kernel in ("numpy", "reference"):
        live = np.flatnonzero(sizes.min(axis=0) > 0) if nb else np.zeros(0, dtype=np.int64)
        sets = np.prod(sizes[:, live].astype(np.float64), axis=0)
        ranges = (
            split_even(sets, workers * BATCH_PIECES_PER_THREAD)
            if workers > 1 and live.size >= 2 and float(sets.sum()) >= PARALLEL_MIN_PAIRS
            else [(0, live.size)]
        )

        def run(lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, StageCounts]:
            part = StageCounts.zeros(parties)
            idx, c = _batch_blocks(
                segs, pops, rows_of, starts, sizes, live[lo:hi], seg_bits, threshold, part
            )
            if distinct:
                idx, c = distinct_sets(idx, c, bound)
            return idx, c, part

    else:
        raise ProtocolError(
            f"unknown kernel {kernel!r} for compare_block_batch (numba, numpy or reference)"
        )
    if not ranges or ranges[-1][1] == 0:
        return np.zeros((0, parties), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if len(ranges) == 1:
        outs = [run(*ranges[0])]
    else:
        pool = thread_pool(workers)
        outs = [f.result() for f in [pool.submit(run, lo, hi) for lo, hi in ranges]]
    for o in outs:
        st.add(o[2])
    if len(outs) == 1:
        return outs[0][0], outs[0][1]
    idx = np.concatenate([o[0] for o in outs])
    c = np.concatenate([o[1] for o in outs])
    return distinct_sets(idx, c, bound, runs=len(outs)) if distinct else (idx, c)


@dataclass(frozen=True)
class FastBlocks:
    """What ``fast_block_rows`` needs beside the segments and the plan: how to cut ranges of
    blocks, and how a set becomes a ring row."""

    cum_sets: np.ndarray  # (nb,) int64 running sum of the fast blocks' candidate sets
    keys: tuple[np.ndarray, ...]  # per party: (n,) uint64 pseudonyms
    columns: np.ndarray  # (P,) int64: the ring-row column of each party


def fast_block_rows(
    segs: Sequence[np.ndarray],
    pops: Sequence[np.ndarray],
    rows_of: Sequence[np.ndarray],
    plan: BlockPlan,
    lo: int,
    hi: int,
    seg_bits: int,
    threshold: float,
    blocks: FastBlocks,
    *,
    counts: StageCounts | None = None,
    workers: int = 1,
) -> np.ndarray:
    """The distinct surviving sets of the fast blocks lo..hi-1 of ``plan`` (numba kernel) as ring
    rows (pseudonyms in ``blocks.columns``, then c), in lexicographic order of the sets' rows in
    ``segs``. The blocks are cut into ranges of about equal candidate sets,
    ``BATCH_PIECES_PER_THREAD`` per thread, each compared and made distinct (``distinct_sets``)
    in a pool thread; the calling thread only merges the sorted ranges (a compiled k-way merge,
    ``_numba_kernel.merge_ring_rows``). Rows, order and stage counts (as
    ``compare_block_batch``'s) do not depend on ``workers``."""
    if not HAVE_NUMBA or _numba_kernel is None:
        raise ProtocolError("the numba kernel is not available (numba is not installed)")
    parties = len(segs)
    st = counts if counts is not None else StageCounts.zeros(parties)
    prepared = _numba_batch_inputs(
        segs, pops, rows_of, plan.first, plan.fast_sizes, seg_bits, threshold
    )
    keys = PartyArrays(blocks.keys, np.uint64)
    bound = [int(s.shape[0]) for s in segs]
    sets = int(blocks.cum_sets[hi - 1]) - (int(blocks.cum_sets[lo - 1]) if lo else 0)
    parallel = workers > 1 and sets >= PARALLEL_MIN_PAIRS
    ranges = split_running_sum(
        blocks.cum_sets, lo, hi, workers * BATCH_PIECES_PER_THREAD if parallel else 1
    )

    def run(a: int, b: int) -> tuple[np.ndarray, np.ndarray, StageCounts]:
        assert _numba_kernel is not None
        idx, c, ev, sv = prepared.run(a, b)
        idx, c = distinct_sets(idx, c, bound)
        return idx, c, StageCounts([int(x) for x in ev], [int(x) for x in sv])

    if len(ranges) == 1:
        outs = [run(*ranges[0])]
    else:
        pool = thread_pool(workers)
        outs = [f.result() for f in [pool.submit(run, a, b) for a, b in ranges]]
    for o in outs:
        st.add(o[2])
    bounds = np.cumsum([0] + [o[0].shape[0] for o in outs]).astype(np.int64)
    idx = np.concatenate([o[0] for o in outs]) if len(outs) > 1 else outs[0][0]
    c = np.concatenate([o[1] for o in outs]) if len(outs) > 1 else outs[0][1]
    return _numba_kernel.merge_ring_rows(  # type: ignore[no-any-return]
        np.ascontiguousarray(idx, dtype=np.int64), c, bounds, keys.at, keys.rows, blocks.columns
    )


@dataclass(frozen=True)
class BlockPlan:
    """Which common blocks the many-blocks path compares (``plan_blocks``); (P, nb) arrays are
    indexed [party, block]."""

    first: np.ndarray  # (P, nb) int64: position of the block's first row in the party's CSR rows
    sizes: np.ndarray  # (P, nb) int64: the party's rows in the block
    fast_sizes: np.ndarray  # (P, nb) int64: sizes of the fast blocks, 0 in every other block
    fast_sets: np.ndarray  # (nb,) int64: candidate sets of the fast blocks, 0 elsewhere
    slow: np.ndarray  # (nb,) bool: every party has rows, but the block is not fast


def plan_blocks(
    starts: Sequence[np.ndarray], cap: int | None, small: int, workers: int = 1
) -> BlockPlan:
    """Sizes of every block from the parties' CSR ``starts`` ((nb + 1,) each); a block is fast
    when every party has rows in it, none more than ``cap`` (None: no cap) and it holds at most
    ``small`` candidate sets. Ranges of blocks go to the kernel threads (same plan as one)."""
    p = len(starts)
    nb = int(starts[0].shape[0]) - 1
    first = np.empty((p, nb), dtype=np.int64)
    sizes = np.empty((p, nb), dtype=np.int64)
    fast_sizes = np.empty((p, nb), dtype=np.int64)
    fast_sets = np.empty(nb, dtype=np.int64)
    slow = np.empty(nb, dtype=np.bool_)
    args = PartyArrays(starts, np.int64)
    if np.any(args.rows != nb + 1):
        raise ProtocolError("every party's block starts must have one entry per block and one more")
    limit = -1 if cap is None else int(cap)
    assert _numba_kernel is not None

    def run(lo: int, hi: int) -> None:
        assert _numba_kernel is not None
        _numba_kernel.plan_blocks(
            args.at, args.rows, lo, hi, limit, int(small), first, sizes, fast_sizes, fast_sets, slow
        )

    run_split(workers, nb, run, words=p * nb)
    return BlockPlan(first, sizes, fast_sizes, fast_sets, slow)


#: compare_block_batch cuts its blocks into this many ranges per thread (evens out pruning).
BATCH_PIECES_PER_THREAD = 4
#: Below this many blocks compare_block_batch stays in the calling thread (numba kernel).
PARALLEL_MIN_BLOCKS = 1 << 12


def distinct_sets(
    idx: np.ndarray, c: np.ndarray, bound: Sequence[int], runs: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of ``idx`` (m, P) with their c, sorted lexicographically (a candidate set
    found in several blocks has the same c in each); see ``distinct_rows``."""
    if idx.shape[0] < 2:
        return idx, c
    keep = distinct_rows(idx, bound, runs)
    return idx[keep], c[keep]


def distinct_rows(idx: np.ndarray, bound: Sequence[int], runs: int = 1) -> np.ndarray:
    """Positions of the distinct rows of ``idx`` (m, P) in lexicographic order of the rows.

    Column j holds values below ``bound[j]``; when the columns fit in 64 bits together, rows are
    packed into one uint64 key and sorted as such (``runs`` > 1: ``idx`` is that many
    concatenated sorted runs, merged by a stable sort).
    """
    m = idx.shape[0]
    if m < 2:
        return np.arange(m, dtype=np.int64)
    widths = [max(1, int(n - 1).bit_length()) for n in bound]
    if HAVE_NUMBA and sum(widths) <= 64:
        shifts = np.cumsum([0, *widths[::-1]])[:-1][::-1].astype(np.int64)
        assert _numba_kernel is not None
        keys = _numba_kernel.pack_rows_key(np.ascontiguousarray(idx), shifts)
        order = np.argsort(keys, kind="stable" if runs > 1 else "quicksort")
        keys = keys[order]
        first = np.ones(m, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
    else:
        order = np.lexsort(idx.T[::-1])
        rows = idx[order]
        first = np.ones(m, dtype=bool)
        first[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    return order[first]


def read_only(a: np.ndarray, dtype: type) -> np.ndarray:
    """A read-only C-contiguous view (a copy only if needed): a compiled loop then has one variant
    whatever the caller's array (own and received arrays alike)."""
    view: np.ndarray = np.ascontiguousarray(a, dtype=dtype).view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True)
class _BatchInputs:
    """The arguments of ``_numba_kernel.batch_blocks`` but the block range; holds the per-party
    arrays the loop reads by address (``PartyArrays``) for as long as it runs."""

    segs: PartyArrays
    pops: PartyArrays
    members: PartyArrays
    starts: np.ndarray
    sizes: np.ndarray
    tables: np.ndarray

    def run(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(idx, c, evaluated, survived) of blocks lo..hi-1 (``_numba_kernel.batch_blocks``)."""
        assert _numba_kernel is not None
        idx, c, evaluated, survived, _ = _numba_kernel.batch_blocks(
            self.segs.at,
            self.segs.rows,
            self.segs.width,
            self.pops.at,
            self.members.at,
            self.members.rows,
            self.starts,
            self.sizes,
            lo,
            hi,
            self.tables,
        )
        return idx, c, evaluated, survived


def _numba_batch_inputs(
    segs: Sequence[np.ndarray],
    pops: Sequence[np.ndarray],
    rows_of: Sequence[np.ndarray],
    starts: np.ndarray,
    sizes: np.ndarray,
    seg_bits: int,
    threshold: float,
) -> _BatchInputs:
    """The inputs of ``_numba_kernel.batch_blocks`` (one compiled variant for any party count)."""
    parties = len(segs)
    max_s = parties * seg_bits
    tables = np.stack(
        [threshold_table(max(k, 1), float(threshold), max_s) for k in range(parties + 1)]
    )
    seg_rows = PartyArrays(segs, np.uint64, width=int(segs[0].shape[1]))
    pop_values = PartyArrays(pops, np.int64)
    if not np.array_equal(seg_rows.rows, pop_values.rows):
        raise ProtocolError("every party needs one segment popcount per segment row")
    return _BatchInputs(
        seg_rows,
        pop_values,
        PartyArrays(rows_of, np.int64),
        read_only(starts, np.int64),
        read_only(sizes, np.int64),
        tables,
    )


def _batch_blocks(
    segs: Sequence[np.ndarray],
    pops: Sequence[np.ndarray],
    rows_of: Sequence[np.ndarray],
    starts: np.ndarray,
    sizes: np.ndarray,
    live: np.ndarray,
    seg_bits: int,
    threshold: float,
    st: StageCounts,
) -> tuple[np.ndarray, np.ndarray]:
    """compare_block_batch on the blocks ``live`` (all non-empty), in one thread."""
    parties = len(segs)
    max_s = parties * seg_bits
    empty = (np.zeros((0, parties), dtype=np.int64), np.zeros(0, dtype=np.int64))

    def expand(j: int, blk: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        per = sizes[j, blk]
        rep = np.repeat(np.arange(blk.size), per)
        offs = np.arange(rep.size) - np.repeat(np.cumsum(per) - per, per)
        return rep, rows_of[j][starts[j, blk[rep]] + offs]

    rep0, first = expand(0, live)
    blk = live[rep0]
    idx = first[:, None]
    acc = segs[0][first]
    psum = pops[0][first].astype(np.int64)
    cvals = np.zeros(0, dtype=np.int64)
    for j in range(1, parties):
        if blk.size == 0:
            return empty
        rep, new_rows = expand(j, blk)
        acc = acc[rep] & segs[j][new_rows]
        cvals = np.bitwise_count(acc).sum(axis=1, dtype=np.int64)
        psum = psum[rep] + pops[j][new_rows]
        keep = cvals >= threshold_table(j + 1, float(threshold), max_s)[psum]
        st.evaluated[j] += int(rep.size)
        st.survived[j] += int(keep.sum())
        idx = np.concatenate([idx[rep], new_rows[:, None]], axis=1)[keep]
        acc, psum, cvals, blk = acc[keep], psum[keep], cvals[keep], blk[rep][keep]
    return idx, cvals


def compare_small_blocks(
    segs: Sequence[np.ndarray],
    pops: Sequence[np.ndarray],
    blocks: Sequence[Sequence[np.ndarray]],
    seg_bits: int,
    threshold: float,
    *,
    counts: StageCounts | None = None,
    workers: int = 1,
    kernel: str = DEFAULT_KERNEL,
    distinct: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """compare_block_batch for blocks given as lists: ``blocks[b][j]`` = party j's rows in block b."""
    parties = len(segs)
    nb = len(blocks)
    sizes = np.array([[int(b[j].size) for b in blocks] for j in range(parties)], dtype=np.int64)
    sizes = sizes.reshape(parties, nb)
    starts = np.zeros((parties, nb), dtype=np.int64)
    if nb:
        starts[:, 1:] = np.cumsum(sizes, axis=1)[:, :-1]
    rows_of = [
        np.concatenate([np.asarray(b[j], dtype=np.int64) for b in blocks])
        if nb
        else np.zeros(0, dtype=np.int64)
        for j in range(parties)
    ]
    return compare_block_batch(
        segs,
        pops,
        rows_of,
        starts,
        sizes,
        seg_bits,
        threshold,
        counts=counts,
        workers=workers,
        kernel=kernel,
        distinct=distinct,
    )


def warm_up() -> None:
    """Compile (or load from numba's cache) every compiled kernel on tiny inputs.

    A node calls this once at start so that the first real run does not pay the compilation.
    """
    if not HAVE_NUMBA:
        return
    from party.protocol.blocks import block_index
    from party.protocol.ring import intersect_sorted_rows

    rows = np.arange(1, 9, dtype=np.uint64).reshape(4, 2)
    list(iter_block([rows, rows], 128, 0.5, kernel="numba"))
    intersect_sorted_rows(rows, rows)
    index = block_index(rows, np.array([1, 3], dtype=np.uint64))
    parties = 3  # the per-party loops have one variant for every party count
    compare_block_batch(
        [rows] * parties,
        [popcount_rows(rows)] * parties,
        [index.rows] * parties,
        np.tile(index.starts[:-1], (parties, 1)),
        np.tile(index.sizes(), (parties, 1)),
        128,
        0.5,
        distinct=True,
    )
