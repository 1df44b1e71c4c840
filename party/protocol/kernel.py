"""Candidate-set enumeration with segment filtering inside one block (Algo 1 + Algo 4): two kernels.

Input: for one (sub-)block, party j's segments as packed rows ``segs[j]`` (n_j, words) in the layout of
``party.encoding.bits`` (all the same segment, i.e. the comparing party's segment index). A candidate
set takes one row per party. Partial sets are extended party by party in index order 0, 1, ...; after
adding party j the partial set of ``k = j + 1`` rows has ``c`` = popcount of the AND of their segments
and ``s`` = sum of their segment popcounts, and is kept iff ``k * c >= s_m * s`` (IEEE double, the
same expression in both kernels; ``s = 0`` is always kept, so is everything when s_m = 0). Output:
``idx`` (m, P) int64 row positions, sorted lexicographically, and ``c`` (m,) int64 of the full sets.

``compare_block_reference`` is the short, obviously-correct loop. ``iter_block`` is the fast kernel:
rows are unpacked to float32 0/1 matrices and common 1-bits come from a matrix product (exact: every
partial sum is an integer below 2^24); surviving partial sets carry their AND as a 0/1 float32 row
(an elementwise product) into the next party's product. Work is cut into chunks so that the working
set stays within ``budget_bytes`` whatever the block size, and the generator checks ``cancel``
between products. The threshold is first applied loosely in float32 with a margin and then exactly
in float64 on the few rows near or above it, so both kernels keep exactly the same sets.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from party.encoding.bits import popcount_rows, unpack_rows
from party.protocol.errors import ComparisonCancelled

# float32 rounding of the loose threshold is below 1e-3 for segments up to 2^13 bits.
_LOOSE_MARGIN = np.float32(0.01)


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
    """The pruning rule of the docstring for one partial set of k rows."""
    return float(k * c) >= threshold * float(s)


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


class _Unpacked:
    """float32 0/1 views of one party's block rows, cached whole when they fit the budget."""

    def __init__(self, rows: np.ndarray, nbits: int, cache: bool) -> None:
        self.rows = rows
        self.nbits = nbits
        self.whole = (
            unpack_rows(rows, nbits).astype(np.float32) if cache and rows.shape[0] else None
        )

    def get(self, a: int, b: int) -> np.ndarray:
        if self.whole is not None:
            return self.whole[a:b]
        return unpack_rows(self.rows[a:b], self.nbits).astype(np.float32)


def iter_block(
    segs: Sequence[np.ndarray],
    seg_bits: int,
    threshold: float,
    *,
    budget_bytes: int = 64 * 2**20,
    counts: StageCounts | None = None,
    cancel: threading.Event | None = None,
    tick: Callable[[int], None] | None = None,
    col_chunk: int = 4096,
    max_rows: int | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Fast kernel: yields (idx, c) chunks of surviving full candidate sets (see module docstring).

    ``tick(n)`` is called with the number of full candidate sets (of the block's product of sizes)
    settled since the last call: pruned partial sets count for all their extensions.
    ``col_chunk`` and ``max_rows`` bound the product shapes further (tests use them to force chunking).
    Chunks are not in any particular order.
    """
    parties = len(segs)
    sizes = [int(s.shape[0]) for s in segs]
    if min(sizes) == 0:
        return
    st = counts if counts is not None else StageCounts.zeros(parties)
    pops = [popcount_rows(s) for s in segs]
    cache_total = sum(sizes) * seg_bits * 4
    cache = cache_total <= budget_bytes // 4
    unpacked = [_Unpacked(s, seg_bits, cache) for s in segs]
    # rest[j] = number of full sets one partial set ending at party j stands for.
    rest = [1] * parties
    for j in range(parties - 2, -1, -1):
        rest[j] = rest[j + 1] * sizes[j + 1]
    level_budget = max(budget_bytes // (2 * parties), 1 << 20)
    per_pair = 48 + 8 * parties
    chunks = [max(1, min(n, col_chunk)) for n in sizes]

    def rows_for(j_next: int) -> int:
        cc = chunks[j_next]
        rows = max(1, level_budget // (cc * per_pair + seg_bits * 4))
        return rows if max_rows is None else max(1, min(rows, max_rows))

    smth = float(threshold)

    def extend(
        j: int, idx: np.ndarray, acc: np.ndarray, psum: np.ndarray
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        # Partial sets idx (m, j) end at party j-1; add party j.
        k = j + 1
        m = idx.shape[0]
        n = sizes[j]
        cc = chunks[j]
        for a in range(0, n, cc):
            if cancel is not None and cancel.is_set():
                raise ComparisonCancelled("comparison cancelled")
            b = min(n, a + cc)
            right = unpacked[j].get(a, b)
            prod = acc @ right.T
            width = b - a
            if smth == 0.0:
                ri = np.repeat(np.arange(m, dtype=np.int64), width)
                ci = np.tile(np.arange(width, dtype=np.int64), m)
                cvals = prod.ravel().astype(np.int64)
            else:
                rowterm = (psum.astype(np.float32) * np.float32(smth / k)) - _LOOSE_MARGIN
                colterm = pops[j][a:b].astype(np.float32) * np.float32(smth / k)
                loose = (prod - colterm[None, :]) >= rowterm[:, None]
                ri, ci = np.nonzero(loose)
                cvals = prod[ri, ci].astype(np.int64)
                s_exact = (psum[ri] + pops[j][a + ci]).astype(np.float64)
                exact = (k * cvals).astype(np.float64) >= smth * s_exact
                ri, ci, cvals = ri[exact], ci[exact], cvals[exact]
            evaluated = m * width
            st.evaluated[j] += evaluated
            st.survived[j] += int(ri.size)
            if tick is not None and (evaluated - ri.size) and rest[j] > 0:
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
                acc2 = acc[r_g] * right[c_g]
                psum2 = psum[r_g] + pops[j][a + c_g]
                yield from extend(j + 1, idx2, acc2, psum2)

    m0 = rows_for(1)
    for a in range(0, sizes[0], m0):
        if cancel is not None and cancel.is_set():
            raise ComparisonCancelled("comparison cancelled")
        b = min(sizes[0], a + m0)
        idx0 = np.arange(a, b, dtype=np.int64)[:, None]
        yield from extend(1, idx0, unpacked[0].get(a, b), pops[0][a:b].copy())


def compare_block_fast(
    segs: Sequence[np.ndarray],
    seg_bits: int,
    threshold: float,
    *,
    budget_bytes: int = 64 * 2**20,
    counts: StageCounts | None = None,
    col_chunk: int = 4096,
    max_rows: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The fast kernel collected into one (idx, c) pair, same contract as the reference."""
    parts = list(
        iter_block(
            segs,
            seg_bits,
            threshold,
            budget_bytes=budget_bytes,
            counts=counts,
            col_chunk=col_chunk,
            max_rows=max_rows,
        )
    )
    if not parts:
        return np.zeros((0, len(segs)), dtype=np.int64), np.zeros(0, dtype=np.int64)
    idx = np.concatenate([p[0] for p in parts])
    c = np.concatenate([p[1] for p in parts])
    order = np.lexsort(idx.T[::-1])
    return idx[order], c[order]
