"""Compiled candidate pairs of two parties (target any): keys sorted per pair, segment filter.

The candidate pairs of party a's rows [lo, hi) and party b are every (ra, rb) sharing a whole block
(compared whole, not sub-blocked), once per block, from the two CSR block indexes (as
``party.protocol.pairwise.PairPlan`` holds them; a row is in a block's rows once). ``emit_keys``
walks a range of blocks in order (sequential reads of both indexes) and writes each such pair as
one uint64 key ``ra << 32 | rb``; sorted, a range's keys list each distinct pair once per block it
shares, in order of (ra, rb). ``kept_of_runs`` merges sorted runs of keys (the ranges of blocks
the threads emitted and sorted) over a range of keys, counts each distinct pair's repeats (the
whole blocks it shares: multi-pass blocking finds most pairs in several) and

1. drops it when its upper bound ``min(pop_a, pop_b)`` is below the threshold table's value;
2. else gets ``c`` = popcount(seg_a AND seg_b) and keeps it iff ``c >= table[pop_a + pop_b]``
   (``kernel.threshold_table(2, s_m, ...)``: the rule ``2c >= s_m * s`` of ``pairwise``).

Kept pairs are written as ring rows (pseudonym of a in column ``col_a``, of b in ``col_b``, 0 in
the other party columns, c in the last) in order of (ra, rb): with rows in pseudonym order, that of
(key_a, key_b), the order of the survivor store. It also returns how many times the kept pairs
occur in whole blocks altogether (what enumerating every block would have kept, duplicates
included). Every loop is ``nogil`` (ranges run on the kernel threads). ``row_visits`` gives each
row of a its candidate pairs counted once per block, to cut a's rows into pieces of bounded size.
On Dask workers a range of blocks' keys go to buckets of a's rows (``bucket_rows``) instead of
being sorted, and each bucket is sorted and filtered on its own (``pairwise.bucket_keys``).

A party's inputs are its ``records``: an (n, words + 2) uint64 array whose row r holds the words of
row r's segment, then their popcount, then its pseudonym (``pack_records``).

Speed: the index walk and the sort read and write memory in order; the random read left is one
record of b per distinct pair (its segment, popcount and pseudonym side by side: one or two cache
lines of one page), asked for (prefetch) ``AHEAD`` keys before use.
The pair kernel it replaced gathered, row by row of a, b's rows of its blocks: two random reads
of tables larger than the caches per block of each row (``scripts/bench_pairs.py`` measures the
kernel alone).
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit
from party.protocol._numba_kernel import _popcnt64, _prefetch_row

#: rows of a ahead whose block starts in b's index ``row_visits`` prefetches
PREFETCH_ROWS = 4
#: keys ahead whose record of b ``kept_of_runs`` prefetches
AHEAD = 32
#: a key's low 32 bits: the row of b
LOW = np.uint64(0xFFFFFFFF)


@jit
def _repeat(pos_a, r, i, x):  # type: ignore[no-untyped-def]
    """Block x is also at an earlier position of a's row r than i (a row's blocks in any order:
    a repeat counts once)."""
    for e in range(i):  # noqa: SIM110 (a compiled loop: numba takes no generator to any())
        if pos_a[r, e] == x:
            return True
    return False


@jit
def row_visits(pos_a, starts_b, whole, check, lo, hi, out):  # type: ignore[no-untyped-def]
    """out[r] = the candidate pairs of a's row r (r in [lo, hi)) with b, counted once per whole
    block (``check``: look ``whole`` up, else every block is whole); a row's blocks in any
    order."""
    width = pos_a.shape[1]
    for r in range(lo, hi):
        if r + PREFETCH_ROWS < hi:
            for i in range(width):
                x = pos_a[r + PREFETCH_ROWS, i]
                if x >= 0:
                    _prefetch_row(starts_b, x)  # type: ignore[call-arg]
        total = 0
        for i in range(width):
            x = pos_a[r, i]
            if x < 0 or (check and not whole[x]) or _repeat(pos_a, r, i, x):
                continue
            total += starts_b[x + 1] - starts_b[x]
        out[r] = total


@jit
def bucket_rows(keys, step, buckets, out):  # type: ignore[no-untyped-def]
    """Copy ``keys`` to ``out`` grouped by bucket (a key's row of a, its high 32 bits, // step;
    each below ``buckets``), in their order within a bucket: returns offsets ((buckets + 1,)
    int64), bucket j is out[offsets[j]:offsets[j + 1]]. Two passes in order (count, place)."""
    offsets = np.zeros(buckets + 1, dtype=np.int64)
    for i in range(keys.shape[0]):
        offsets[(keys[i] >> np.uint64(32)) // step + 1] += 1
    for j in range(buckets):
        offsets[j + 1] += offsets[j]
    at = offsets[:-1].copy()
    for i in range(keys.shape[0]):
        j = (keys[i] >> np.uint64(32)) // step
        out[at[j]] = keys[i]
        at[j] += 1
    return offsets


@jit
def block_cuts(starts_a, starts_b, whole, check, total, parts):  # type: ignore[no-untyped-def]
    """Cut the blocks into ``parts`` contiguous ranges of about equal pairs of whole blocks (every
    row of a; ``total`` of them, as ``plan_pairs`` counts): (cuts, offsets), each (parts + 1,)
    int64; range k is blocks cuts[k]..cuts[k+1]-1 holding pairs offsets[k]..offsets[k+1]-1
    (ranges may be empty)."""
    blocks = starts_a.shape[0] - 1
    cuts = np.empty(parts + 1, dtype=np.int64)
    offsets = np.empty(parts + 1, dtype=np.int64)
    cuts[0] = 0
    offsets[0] = 0
    k = 1
    acc = 0
    for x in range(blocks):
        while k < parts and acc * parts >= total * k:
            cuts[k] = x
            offsets[k] = acc
            k += 1
        if not check or whole[x]:
            acc += (starts_a[x + 1] - starts_a[x]) * (starts_b[x + 1] - starts_b[x])
    while k <= parts:
        cuts[k] = blocks
        offsets[k] = acc
        k += 1
    return cuts, offsets


@jit
def count_keys(x0, x1, lo, hi, starts_a, rows_a, starts_b, whole, check):  # type: ignore[no-untyped-def]
    """How many keys ``emit_keys`` writes for the same arguments."""
    k = 0
    for x in range(x0, x1):
        if check and not whole[x]:
            continue
        nb = starts_b[x + 1] - starts_b[x]
        if nb == 0:
            continue
        for y in range(starts_a[x], starts_a[x + 1]):
            ra = rows_a[y]
            if lo <= ra < hi:
                k += nb
    return k


@jit
def emit_keys(x0, x1, lo, hi, starts_a, rows_a, starts_b, rows_b, whole, check, out):  # type: ignore[no-untyped-def]
    """Write ``ra << 32 | rb`` for every a row ra in [lo, hi) and b row rb of each whole block of
    x0..x1-1 (``check``: look ``whole`` up, else every block is whole) to ``out``, block by
    block; returns how many (``out`` must hold them, as ``count_keys`` counts; one slot past them
    may be written over).

    Most blocks of multi-pass blocking hold one row of each party: every block's first pair is
    written at the next slot whatever the block holds and the slot taken only when that is the
    block's one pair (no branch on a block's sizes); the other blocks (several pairs) are walked
    row by row after it, over that slot. The loop ends once ``out`` is full, so a written slot
    is never overwritten."""
    n = out.shape[0]
    if n == 0:
        return 0
    last_a = rows_a.shape[0] - 1  # >= 0: some block holds a pair
    last_b = rows_b.shape[0] - 1
    k = 0
    a1 = starts_a[x0]
    b1 = starts_b[x0]
    for x in range(x0, x1):
        a0 = a1
        b0 = b1
        a1 = starts_a[x + 1]
        b1 = starts_b[x + 1]
        na = a1 - a0
        nb = b1 - b0
        ra = rows_a[min(a0, last_a)]
        out[k] = (np.uint64(ra) << np.uint64(32)) | np.uint64(rows_b[min(b0, last_b)])
        one = (na == 1) & (nb == 1) & (ra >= lo) & (ra < hi)
        if check:
            one = one & whole[x]
        k += int(one)
        if na * nb > 1 and (not check or whole[x]):
            for y in range(a0, a1):
                ra = rows_a[y]
                if ra < lo or ra >= hi:
                    continue
                high = np.uint64(ra) << np.uint64(32)
                for z in range(b0, b1):
                    out[k] = high | np.uint64(rows_b[z])
                    k += 1
        if k == n:
            break
    return k


@jit
def _take(keys, heads, ends):  # type: ignore[no-untyped-def]
    """The smallest key at the heads of the runs (run r: keys[heads[r]:ends[r]], sorted) and how
    many times it is there, advancing the heads past it; (0, 0) when every run is empty."""
    best = -1
    for r in range(heads.shape[0]):
        if heads[r] < ends[r] and (best < 0 or keys[heads[r]] < keys[heads[best]]):
            best = r
    if best < 0:
        return np.uint64(0), 0
    key = keys[heads[best]]
    n = 0
    for r in range(heads.shape[0]):
        while heads[r] < ends[r] and keys[heads[r]] == key:
            heads[r] += 1
            n += 1
    return key, n


@jit
def kept_of_runs(  # type: ignore[no-untyped-def]
    keys,
    starts,
    ends,
    rec_a,
    rec_b,
    table,
    col_a,
    col_b,
    parties,
    out,
):
    """The kept pairs of the keys[starts[r]:ends[r]] of every run r (each sorted; module
    docstring), written as rows to ``out`` ((m, parties + 1) uint64, m at least the runs' keys:
    a row per distinct pair at most) in key order. Returns (rows written, kept with duplicates,
    distinct pairs evaluated). The caller allocates ``out`` (numpy: large arrays on huge pages,
    only the rows written ever touched) instead of a buffer grown and copied here."""
    w = rec_a.shape[1] - 2  # segment words; then the popcount, then the pseudonym
    runs = starts.shape[0]
    heads = starts.copy()
    written = 0
    with_duplicates = 0
    evaluated = 0
    while True:
        if runs == 1:  # one run: no merge
            i = heads[0]
            if i >= ends[0]:
                break
            key = keys[i]
            j = i + 1
            while j < ends[0] and keys[j] == key:
                j += 1
            shared = j - i
            heads[0] = j
            if j + AHEAD < ends[0]:
                rp = np.int64(keys[j + AHEAD] & LOW)
                _prefetch_row(rec_b, rp)  # type: ignore[call-arg]
        elif runs == 2:  # two threads' runs: the merge of two, inline
            i0 = heads[0]
            i1 = heads[1]
            e0 = ends[0]
            e1 = ends[1]
            if i0 < e0:
                key = keys[i1] if i1 < e1 and keys[i1] < keys[i0] else keys[i0]
            elif i1 < e1:
                key = keys[i1]
            else:
                break
            j0 = i0
            while j0 < e0 and keys[j0] == key:
                j0 += 1
            j1 = i1
            while j1 < e1 and keys[j1] == key:
                j1 += 1
            shared = (j0 - i0) + (j1 - i1)
            heads[0] = j0
            heads[1] = j1
            # ask for b's rows AHEAD keys on in the run(s) that moved
            if j0 > i0 and j0 + AHEAD < e0:
                rp = np.int64(keys[j0 + AHEAD] & LOW)
                _prefetch_row(rec_b, rp)  # type: ignore[call-arg]
            if j1 > i1 and j1 + AHEAD < e1:
                rp = np.int64(keys[j1 + AHEAD] & LOW)
                _prefetch_row(rec_b, rp)  # type: ignore[call-arg]
        else:
            key, shared = _take(keys, heads, ends)
            if shared == 0:
                break
            for r in range(runs):
                if heads[r] + AHEAD < ends[r]:
                    rp = np.int64(keys[heads[r] + AHEAD] & LOW)
                    _prefetch_row(rec_b, rp)  # type: ignore[call-arg]
        ra = np.int64(key >> np.uint64(32))
        rb = np.int64(key & LOW)
        pa = np.int64(rec_a[ra, w])
        pb = np.int64(rec_b[rb, w])
        need = table[pa + pb]
        if (pa if pa < pb else pb) < need:
            continue
        evaluated += 1
        c = 0
        for k in range(w):
            c += _popcnt64(rec_a[ra, k] & rec_b[rb, k])  # type: ignore[call-arg]
        if c < need:
            continue
        for q in range(parties):
            out[written, q] = 0
        out[written, col_a] = rec_a[ra, w + 1]
        out[written, col_b] = rec_b[rb, w + 1]
        out[written, parties] = c
        written += 1
        with_duplicates += shared
    return written, with_duplicates, evaluated


@jit
def plan_pairs(starts_a, starts_b, cap, lo, hi, whole, sums):  # type: ignore[no-untyped-def]
    """From two parties' CSR block starts, blocks [lo, hi): whole[x] (neither party has more than
    ``cap`` rows in block x; cap < 0: every block, ``whole`` not written), and sums[0..2] = (pairs
    of the whole blocks, pairs of every block, pairs of the largest block). Ranges of blocks run
    on the threads."""
    total = 0
    uncapped = 0
    largest = 0
    for x in range(lo, hi):
        na = starts_a[x + 1] - starts_a[x]
        nb = starts_b[x + 1] - starts_b[x]
        pairs = na * nb
        uncapped += pairs
        largest = max(largest, pairs)
        if cap < 0:
            total += pairs
        elif na <= cap and nb <= cap:
            whole[x] = True
            total += pairs
        else:
            whole[x] = False
    sums[0] = total
    sums[1] = uncapped
    sums[2] = largest


@jit
def pack_records(keys, segments, lo, hi, out):  # type: ignore[no-untyped-def]
    """Rows [lo, hi) of a party's records (module docstring) into ``out`` ((n, w + 2) uint64):
    the w words of ``segments``' row, their popcount, then the row's pseudonym ``keys[r]``."""
    w = segments.shape[1]
    for r in range(lo, hi):
        c = 0
        for k in range(w):
            x = segments[r, k]
            out[r, k] = x
            c += _popcnt64(x)  # type: ignore[call-arg]
        out[r, w] = c
        out[r, w + 1] = keys[r]


@jit
def merge_partner_rows(rows, at, col):  # type: ignore[no-untyped-def]
    """Ring rows of party a's pairs with several partners in the survivor store's order: run r
    (rows[at[r]:at[r + 1]], the kept rows of a and its r-th partner, partners increasing) is in
    order of (a's pseudonym in column ``col``, the partner's); merged by a's pseudonym, ties by
    partner decreasing (a row with 0 in a column sorts before one with a pseudonym there), each
    run's order kept. Rows in lexicographic order when the runs are (one pass, no sort)."""
    out = np.empty_like(rows)
    merge_partner_range(rows, at[:-1], at[1:], col, out, 0)
    return out


@jit
def merge_partner_range(rows, heads, ends, col, out, first):  # type: ignore[no-untyped-def]
    """``merge_partner_rows`` of the rows[heads[r]:ends[r]] of every run r, written to ``out``
    from row ``first`` on (ranges of a's pseudonyms, ``partner_cuts``, merge on the threads)."""
    runs = heads.shape[0]
    heads = heads.copy()
    todo = 0
    for r in range(runs):
        todo += ends[r] - heads[r]
    for i in range(first, first + todo):
        best = -1
        for r in range(runs - 1, -1, -1):  # later partners first among equal pseudonyms
            if heads[r] < ends[r] and (best < 0 or rows[heads[r], col] < rows[heads[best], col]):
                best = r
        j = heads[best]
        for c in range(rows.shape[1]):
            out[i, c] = rows[j, c]
        heads[best] = j + 1


@jit
def partner_cuts(rows, at, col, parts):  # type: ignore[no-untyped-def]
    """Cut the sorted runs of ``merge_partner_rows`` into ``parts`` ranges of a's pseudonyms
    (column ``col``) of about equal rows of the longest run: (parts + 1, runs) int64, row k the
    position in each run where range k starts (row parts: the runs' ends; ranges may be empty).
    Equal pseudonyms stay in one range, so merging the ranges one after the other merges the
    runs."""
    runs = at.shape[0] - 1
    cuts = np.empty((parts + 1, runs), dtype=np.int64)
    longest = 0
    for r in range(runs):
        cuts[0, r] = at[r]
        cuts[parts, r] = at[r + 1]
        if at[r + 1] - at[r] > at[longest + 1] - at[longest]:
            longest = r
    size = at[longest + 1] - at[longest]
    for k in range(1, parts):
        for r in range(runs):
            lo = cuts[k - 1, r]  # the first row at or above the pivot (binary search)
            hi = at[r + 1]
            if size:
                pivot = rows[at[longest] + size * k // parts, col]
                while lo < hi:
                    mid = (lo + hi) // 2
                    if rows[mid, col] < pivot:
                        lo = mid + 1
                    else:
                        hi = mid
            cuts[k, r] = lo
    return cuts


@jit
def plan_ranges(starts_a, starts_b, cap, cuts, k0, k1, whole, sums):  # type: ignore[no-untyped-def]
    """``plan_pairs`` of each range of blocks k in [k0, k1) (blocks cuts[k]..cuts[k+1]-1) into
    sums[k]: a thread's share of a plan's ranges in one call (one hand-out of the GIL, not one per
    range)."""
    for k in range(k0, k1):
        plan_pairs(starts_a, starts_b, cap, cuts[k], cuts[k + 1], whole, sums[k])
