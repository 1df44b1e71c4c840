"""Compiled candidate pairs of two parties (target any): enumeration by a's rows, segment filter.

``pair_rows`` walks a range of party a's rows (rows in pseudonym order) and, for each row ra,
gathers the rows of b in the whole blocks (compared whole, not sub-blocked) that ra is in, from b's
CSR block index (as ``party.protocol.pairwise.PairPlan`` holds it) and ra's block positions (each
row sorted: ``blocks.sort_position_rows``; a block named twice in a row counts once). Sorted, the
gathered rows give each candidate pair (ra, rb) once however many blocks it shares (multi-pass
blocking finds most pairs in several), with the number of whole blocks it shares. Each pair

1. is dropped when its upper bound ``min(pop_a, pop_b)`` is below the threshold table's value;
2. else gets ``c`` = popcount(seg_a AND seg_b) and is kept iff ``c >= table[pop_a + pop_b]``
   (``kernel.threshold_table(2, s_m, ...)``: the rule ``2c >= s_m * s`` of ``pairwise``).

Kept pairs are written as ring rows (pseudonym of a in column ``col_a``, of b in ``col_b``, 0 in
the other party columns, c in the last) in a's row order, then b's row order: by (key_a, key_b),
the order of the survivor store. The function also returns how many times the kept pairs occur in
whole blocks altogether (what enumerating every block would have kept, duplicates included).
``nogil``: ranges of rows run on the kernel threads; ``row_visits`` gives each row's candidate
pairs counted once per block, to cut the ranges.

Speed: the walk reads a's rows in order; b's block starts, block members and rows are random rows
of tables larger than the caches, so it asks for them (prefetch) a few rows before it needs them
(``scripts/bench_pairs.py`` measures the kernel alone).
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit
from party.protocol._numba_kernel import _popcnt64, _prefetch_row

#: rows of a ahead whose block starts in b's index are prefetched (their members: half as far)
PREFETCH_ROWS = 4
#: gathered rows of b up to this many are sorted by insertion, more by numpy's sort
INSERTION_SORT = 32


@jit
def row_visits(pos_a, starts_b, whole, check, lo, hi, out):  # type: ignore[no-untyped-def]
    """out[r] = the candidate pairs of a's row r (r in [lo, hi)) with b, counted once per whole
    block (``check``: look ``whole`` up, else every block is whole)."""
    width = pos_a.shape[1]
    blocks = np.empty(width, dtype=np.int64)
    for r in range(lo, hi):
        if r + PREFETCH_ROWS < hi:
            for i in range(width):
                x = pos_a[r + PREFETCH_ROWS, i]
                if x >= 0:
                    _prefetch_row(starts_b, x)  # type: ignore[call-arg]
        total = 0
        for i in range(_whole_blocks(pos_a, r, whole, check, blocks)):
            total += starts_b[blocks[i] + 1] - starts_b[blocks[i]]
        out[r] = total


@jit
def _whole_blocks(pos_a, ra, whole, check, blocks):  # type: ignore[no-untyped-def]
    """Write the distinct whole blocks (``check`` as ``row_visits``) of a's sorted position row
    ra to ``blocks`` (as long as a row); returns how many."""
    k = 0
    last = -1
    for i in range(pos_a.shape[1]):
        x = pos_a[ra, i]
        if x < 0 or x == last:
            continue
        last = x
        if check and not whole[x]:
            continue
        blocks[k] = x
        k += 1
    return k


@jit
def _gather(blocks, k, starts_b, rows_b, buf):  # type: ignore[no-untyped-def]
    """Write b's rows of ``blocks[:k]`` to buf (as far as it holds them); returns how many
    there are."""
    n = 0
    for i in range(k):
        x = blocks[i]
        for y in range(starts_b[x], starts_b[x + 1]):
            if n < buf.shape[0]:
                buf[n] = rows_b[y]
            n += 1
    return n


@jit
def pair_rows(  # type: ignore[no-untyped-def]
    lo,
    hi,
    cap,
    pos_a,
    starts_b,
    rows_b,
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
    """The kept pairs of a's rows [lo, hi) (module docstring); ``cap``: their candidate pairs
    counted once per block (``row_visits``), which bounds the kept rows; ``check``: some block
    is not whole (else ``whole`` is not read). Returns (rows (k, parties + 1) uint64, kept with
    duplicates, distinct pairs evaluated)."""
    w = seg_a.shape[1]
    width = pos_a.shape[1]
    out = np.empty((cap, parties + 1), dtype=np.uint64)
    buf = np.empty(256, dtype=np.int64)
    blocks = np.empty(width, dtype=np.int64)
    written = 0
    with_duplicates = 0
    evaluated = 0
    half = PREFETCH_ROWS // 2
    for ra in range(lo, hi):
        if ra + PREFETCH_ROWS < hi:
            for i in range(width):
                x = pos_a[ra + PREFETCH_ROWS, i]
                if x >= 0:
                    _prefetch_row(starts_b, x)  # type: ignore[call-arg]
        if ra + half < hi:
            for i in range(width):
                x = pos_a[ra + half, i]
                if x >= 0:
                    _prefetch_row(rows_b, starts_b[x])  # type: ignore[call-arg]
        k = _whole_blocks(pos_a, ra, whole, check, blocks)
        n = _gather(blocks, k, starts_b, rows_b, buf)
        if n == 0:
            continue
        if n > buf.shape[0]:
            buf = np.empty(2 * n, dtype=np.int64)
            n = _gather(blocks, k, starts_b, rows_b, buf)
        if n <= INSERTION_SORT:
            for i in range(1, n):
                v = buf[i]
                j = i - 1
                while j >= 0 and buf[j] > v:
                    buf[j + 1] = buf[j]
                    j -= 1
                buf[j + 1] = v
        else:
            buf[:n].sort()
        for i in range(n):
            if i == 0 or buf[i] != buf[i - 1]:
                _prefetch_row(pop_b, buf[i])  # type: ignore[call-arg]
                _prefetch_row(seg_b, buf[i])  # type: ignore[call-arg]
        pa = pop_a[ra]
        i = 0
        while i < n:
            rb = buf[i]
            j = i + 1
            while j < n and buf[j] == rb:
                j += 1
            shared = j - i
            i = j
            pb = pop_b[rb]
            need = table[pa + pb]
            if (pa if pa < pb else pb) < need:
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
            with_duplicates += shared
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
