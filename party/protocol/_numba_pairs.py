"""Compiled candidate pairs of two parties (target any): enumeration, canonical block, segment filter.

``pair_blocks`` walks a range of the blocks two parties share (CSR block indexes, as
``party.protocol.pairwise.PairPlan`` holds them) and, for every (row of a, row of b) of a block,

1. drops it when its upper bound ``min(pop_a, pop_b)`` is below the threshold table's value (it
   cannot pass the segment filter, in whichever block it is found);
2. drops it unless the block is the pair's *canonical* block: the first block (lowest position in
   the run's common blocks) among those both records are in that are compared whole. Every record's
   block positions are sorted per row (``blocks.sort_position_rows``), so this is a merge of two short
   sorted lists that stops at the current block. A pair is so evaluated once however many blocks it
   shares (multi-pass blocking finds most pairs in several);
3. counts ``c`` = popcount(seg_a AND seg_b) and keeps the pair iff ``c >= table[pop_a + pop_b]``
   (``kernel.threshold_table(2, s_m, ...)``: the rule ``2c >= s_m * s`` of ``pairwise``).

Kept pairs are written as ring rows (pseudonym of a in column ``col_a``, of b in ``col_b``, 0 in
the other party columns, c in the last) in block order, then a's rows, then b's rows. The function
also returns how many times the kept pairs occur in whole blocks altogether (what enumerating every
block would have kept, duplicates included). ``nogil``: ranges of blocks run on the kernel threads.

Speed: the rows a visit reads (1-bit counts, position rows) are random rows of tables larger than
the caches, so the walk asks for those of the block ``PREFETCH_BLOCKS`` ahead before it needs them;
the merges step by comparisons rather than branches (``scripts/bench_pairs.py`` measures both).
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit
from party.protocol._numba_kernel import _popcnt64, _prefetch_row

#: pair_blocks asks for the rows of the block this many blocks ahead (their 1-bit counts and
#: positions: random rows of a large table, a cache miss each when it reaches them)
PREFETCH_BLOCKS = 8


@jit
def _shared_before(
    pos_a: np.ndarray,
    ra: int,
    pos_b: np.ndarray,
    rb: int,
    below: int,
    whole: np.ndarray,
    check: bool,
) -> bool:
    """Whether the sorted position rows ra of pos_a and rb of pos_b name a common whole block
    below ``below`` (``check``: look whole up, else every block is whole). A merge that steps by
    comparisons, not branches (2-D indexing, no row views: a view costs reference counting)."""
    width = pos_a.shape[1]
    i = 0
    while i < width and pos_a[ra, i] < 0:
        i += 1
    j = 0
    while j < width and pos_b[rb, j] < 0:
        j += 1
    while i < width and j < width:
        x = pos_a[ra, i]
        y = pos_b[rb, j]
        if x >= below or y >= below:
            return False
        if x == y and (not check or whole[x]):
            return True
        i += x <= y
        j += y <= x
    return False


@jit
def _shared_count(
    pos_a: np.ndarray, ra: int, pos_b: np.ndarray, rb: int, whole: np.ndarray, check: bool
) -> int:
    """The number of distinct whole blocks (``check`` as ``_shared_before``) that the sorted
    position rows ra of pos_a and rb of pos_b both name (a block named twice in a row once)."""
    width = pos_a.shape[1]
    i = 0
    while i < width and pos_a[ra, i] < 0:
        i += 1
    j = 0
    while j < width and pos_b[rb, j] < 0:
        j += 1
    count = 0
    last = -1
    while i < width and j < width:
        x = pos_a[ra, i]
        y = pos_b[rb, j]
        if x == y and x != last:
            last = x
            if not check or whole[x]:
                count += 1
        i += x <= y
        j += y <= x
    return count


@jit
def pair_blocks(  # type: ignore[no-untyped-def]
    ids,
    lo,
    hi,
    row_lo,
    row_hi,
    starts_a,
    rows_a,
    starts_b,
    rows_b,
    pos_a,
    pos_b,
    whole,
    check,
    seg_a,
    seg_b,
    pop_a,
    pop_b,
    table,
    keys_a,
    keys_b,
    col_a,
    col_b,
    parties,
):
    """The kept pairs of blocks ``ids[lo:hi]`` (module docstring), a's rows of each block limited
    to its positions [row_lo, row_hi) in the block; ``check``: some block is not whole (else
    ``whole`` is not read). Returns (rows (k, parties + 1) uint64, kept
    with duplicates, pairs evaluated)."""
    w = seg_a.shape[1]
    cap = 0
    for t in range(lo, hi):
        blk = ids[t]
        na = starts_a[blk + 1] - starts_a[blk]
        a0 = min(max(row_lo, 0), na)
        a1 = min(row_hi, na)
        if a1 > a0:
            cap += (a1 - a0) * (starts_b[blk + 1] - starts_b[blk])
    out = np.empty((cap, parties + 1), dtype=np.uint64)
    written = 0
    with_duplicates = 0
    evaluated = 0
    for t in range(lo, hi):
        if t + PREFETCH_BLOCKS < hi:
            ahead = ids[t + PREFETCH_BLOCKS]
            for x in range(starts_a[ahead], starts_a[ahead + 1]):
                _prefetch_row(pop_a, rows_a[x])  # type: ignore[call-arg]
                _prefetch_row(pos_a, rows_a[x])  # type: ignore[call-arg]
            for y in range(starts_b[ahead], starts_b[ahead + 1]):
                _prefetch_row(pop_b, rows_b[y])  # type: ignore[call-arg]
                _prefetch_row(pos_b, rows_b[y])  # type: ignore[call-arg]
        blk = ids[t]
        first_a = starts_a[blk]
        na = starts_a[blk + 1] - first_a
        a0 = min(max(row_lo, 0), na)
        a1 = min(row_hi, na)
        b0 = starts_b[blk]
        b1 = starts_b[blk + 1]
        for x in range(first_a + a0, first_a + a1):
            ra = rows_a[x]
            pa = pop_a[ra]
            for y in range(b0, b1):
                rb = rows_b[y]
                pb = pop_b[rb]
                need = table[pa + pb]
                if (pa if pa < pb else pb) < need:
                    continue
                if _shared_before(pos_a, ra, pos_b, rb, blk, whole, check):
                    continue
                evaluated += 1
                c = 0
                for k in range(w):
                    c += _popcnt64(seg_a[ra, k] & seg_b[rb, k])  # type: ignore[call-arg]
                if c < need:
                    continue
                for q in range(parties):
                    out[written, q] = 0
                out[written, col_a] = keys_a[ra]
                out[written, col_b] = keys_b[rb]
                out[written, parties] = c
                written += 1
                with_duplicates += _shared_count(pos_a, ra, pos_b, rb, whole, check)
    return out[:written].copy(), with_duplicates, evaluated


@jit
def plan_pairs(starts_a: np.ndarray, starts_b: np.ndarray, cap: int):  # type: ignore[no-untyped-def]
    """From two parties' CSR block starts: (whole, pairs of the whole blocks, pairs of every block,
    pairs of the largest block); a block is whole when neither party has more than ``cap`` rows
    in it (cap < 0: every block)."""
    blocks = starts_a.shape[0] - 1
    whole = np.empty(blocks, dtype=np.bool_)
    total = 0
    uncapped = 0
    largest = 0
    for b in range(blocks):
        na = starts_a[b + 1] - starts_a[b]
        nb = starts_b[b + 1] - starts_b[b]
        pairs = na * nb
        uncapped += pairs
        largest = max(largest, pairs)
        whole[b] = cap < 0 or (na <= cap and nb <= cap)
        if whole[b]:
            total += pairs
    return whole, total, uncapped, largest


@jit
def pair_counts(counts_a: np.ndarray, counts_b: np.ndarray):  # type: ignore[no-untyped-def]
    """(pairs of every block, pairs of the largest block) from two parties' rows per block."""
    total = 0
    largest = 0
    for b in range(counts_a.shape[0]):
        pairs = int(counts_a[b]) * int(counts_b[b])
        total += pairs
        largest = max(largest, pairs)
    return total, largest


@jit
def live_count(starts_a, starts_b, whole, lo, hi, out):  # type: ignore[no-untyped-def]
    """out[0], out[1] = the whole blocks among lo..hi-1 where both parties have rows, their pairs."""
    live = 0
    pairs = 0
    for b in range(lo, hi):
        na = starts_a[b + 1] - starts_a[b]
        nb = starts_b[b + 1] - starts_b[b]
        if whole[b] and na > 0 and nb > 0:
            live += 1
            pairs += na * nb
    out[0] = live
    out[1] = pairs


@jit
def live_fill(starts_a, starts_b, whole, lo, hi, ids, cum, k, run):  # type: ignore[no-untyped-def]
    """Write the live blocks among lo..hi-1 (``live_count``) to ids[k:], their running pair sum
    from ``run`` (the pairs of the live blocks before lo) to cum[k:]."""
    for b in range(lo, hi):
        na = starts_a[b + 1] - starts_a[b]
        nb = starts_b[b + 1] - starts_b[b]
        if whole[b] and na > 0 and nb > 0:
            run += na * nb
            ids[k] = b
            cum[k] = run
            k += 1
