"""Compiled (numba) inner loops of the comparison kernel: AND + popcount with fused filtering.

Imported lazily by ``party.protocol.kernel``; see that module for the contract. Single-threaded and
``nogil``: parallelism comes from running parties (or blocks) in separate threads, which is safe with
numba's default threading layer, whereas nested ``prange`` calls from several threads are not.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from party.protocol._numba_party_arrays import i64_values, u64_rows, u64_values


def _jit(fn):  # type: ignore[no-untyped-def]
    """njit with an on-disk cache when numba finds a writable cache location, else without.

    (numba refuses ``cache=True`` at decoration time when neither the source folder nor
    NUMBA_CACHE_DIR / the user cache folder is writable, e.g. a read-only install.)
    """
    try:
        return njit(cache=True, nogil=True, boundscheck=False)(fn)
    except RuntimeError:
        return njit(cache=False, nogil=True, boundscheck=False)(fn)


@intrinsic
def _popcnt64(typingctx, x):  # type: ignore[no-untyped-def]
    """LLVM ctpop on a uint64, returned as int64 (one POPCNT instruction on x86-64)."""
    if not isinstance(x, types.Integer):
        return None
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        return builder.ctpop(args[0])

    return sig, codegen


@intrinsic
def _prefetch_row(typingctx, arr, row):  # type: ignore[no-untyped-def]
    """Ask the CPU to load element ``row`` of a 1-D array, or the first and last element of row
    ``row`` of a 2-D C-contiguous one, into the caches (LLVM prefetch: a hint, never a fault;
    row must be in bounds). For random rows needed a few iterations later."""
    if not isinstance(arr, types.Array) or arr.ndim > 2 or not isinstance(row, types.Integer):
        return None
    sig = types.void(arr, row)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], signature.args[1], types.intp)
        byte = ir.IntType(8).as_pointer()
        word = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [byte, word, word, word])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        points = [[i]]
        if aryty.ndim == 2:
            last = builder.sub(cgutils.unpack_tuple(builder, ary.shape)[1], ir.Constant(i.type, 1))
            points = [[i, ir.Constant(i.type, 0)], [i, last]]
        for idx in points:
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
            # read, high temporal locality, data cache
            builder.call(fn, [builder.bitcast(ptr, byte), word(0), word(3), word(1)])
        return context.get_dummy_value()

    return sig, codegen


@_jit
def extend_chunk(acc, psum, right, rpop, table, outcol, outc, counts):  # type: ignore[no-untyped-def]
    """For every partial set i and right row j: c = popcount(acc[i] & right[j]); keep iff
    c >= table[psum[i] + rpop[j]]. Kept j and c of row i go to outcol/outc[i*n : i*n + counts[i]].

    Rows of ``acc`` are taken two at a time (each right row is loaded once for both, which keeps
    two independent popcount chains in flight); a pair whose upper bound
    min(popcount(acc[i]), rpop[j]) is below its table value is not counted, and when that holds for
    both rows the right row is not read at all.
    """
    m, w = acc.shape
    n = right.shape[0]
    i = 0
    while i + 1 < m:
        ps0 = psum[i]
        ps1 = psum[i + 1]
        ap0 = 0
        ap1 = 0
        for k in range(w):
            ap0 += _popcnt64(acc[i, k])  # type: ignore[call-arg]
            ap1 += _popcnt64(acc[i + 1, k])  # type: ignore[call-arg]
        b0 = i * n
        b1 = (i + 1) * n
        n0 = 0
        n1 = 0
        for j in range(n):
            rp = rpop[j]
            need0 = table[ps0 + rp]
            need1 = table[ps1 + rp]
            ok0 = (ap0 if ap0 < rp else rp) >= need0
            ok1 = (ap1 if ap1 < rp else rp) >= need1
            if not (ok0 or ok1):
                continue
            c0 = 0
            c1 = 0
            for k in range(w):
                x = right[j, k]
                c0 += _popcnt64(acc[i, k] & x)  # type: ignore[call-arg]
                c1 += _popcnt64(acc[i + 1, k] & x)  # type: ignore[call-arg]
            if c0 >= need0:
                outcol[b0 + n0] = j
                outc[b0 + n0] = c0
                n0 += 1
            if c1 >= need1:
                outcol[b1 + n1] = j
                outc[b1 + n1] = c1
                n1 += 1
        counts[i] = n0
        counts[i + 1] = n1
        i += 2
    if i < m:
        ps = psum[i]
        ap = 0
        for k in range(w):
            ap += _popcnt64(acc[i, k])  # type: ignore[call-arg]
        base = i * n
        cnt = 0
        for j in range(n):
            rp = rpop[j]
            need = table[ps + rp]
            if (ap if ap < rp else rp) < need:
                continue
            c = 0
            for k in range(w):
                c += _popcnt64(acc[i, k] & right[j, k])  # type: ignore[call-arg]
            if c >= need:
                outcol[base + cnt] = j
                outc[base + cnt] = c
                cnt += 1
        counts[i] = cnt


@_jit
def compact(outcol, outc, counts, n):  # type: ignore[no-untyped-def]
    """Gather the per-row outputs of extend_chunk into (ri, ci, c) int64 arrays."""
    total = 0
    for i in range(counts.shape[0]):
        total += counts[i]
    ri = np.empty(total, dtype=np.int64)
    ci = np.empty(total, dtype=np.int64)
    cv = np.empty(total, dtype=np.int64)
    pos = 0
    for i in range(counts.shape[0]):
        base = i * n
        for t in range(counts[i]):
            ri[pos] = i
            ci[pos] = outcol[base + t]
            cv[pos] = outc[base + t]
            pos += 1
    return ri, ci, cv


@_jit
def intersect_sorted_rows(a, b):  # type: ignore[no-untyped-def]
    """Positions (ia, ib) of the rows common to a and b, both (m, P) uint64, strictly increasing
    in lexicographic order; a linear merge."""
    m, p = a.shape
    n = b.shape[0]
    cap = m if m < n else n
    ia = np.empty(cap, dtype=np.int64)
    ib = np.empty(cap, dtype=np.int64)
    i = 0
    j = 0
    k = 0
    while i < m and j < n:
        cmp = 0
        for c in range(p):
            x = a[i, c]
            y = b[j, c]
            if x < y:
                cmp = -1
                break
            if x > y:
                cmp = 1
                break
        if cmp == 0:
            ia[k] = i
            ib[k] = j
            k += 1
            i += 1
            j += 1
        elif cmp < 0:
            i += 1
        else:
            j += 1
    return ia[:k], ib[:k]


@_jit
def greedy_keep_dense(ids, used):  # type: ignore[no-untyped-def]
    """Greedy one-to-one over rows of dense record ids (m, P) int64 already in visiting order
    (column j's ids offset so that no two columns share one; ``used`` (bool, longer than every id)
    marks the records of rows kept before, e.g. in earlier chunks, and is updated): positions of
    the rows kept, i.e. those none of whose ids is used (``classify.greedy_keep``)."""
    m, p = ids.shape
    kept = np.empty(m, dtype=np.int64)
    k = 0
    for i in range(m):
        free = True
        for j in range(p):
            if used[ids[i, j]]:
                free = False
                break
        if free:
            for j in range(p):
                used[ids[i, j]] = True
            kept[k] = i
            k += 1
    return kept[:k]


#: batch_blocks reads ahead the rows of this many blocks at a time.
TOUCH_BLOCKS = 32


@_jit
def batch_blocks(  # type: ignore[no-untyped-def]
    seg_at, seg_rows, w, pop_at, member_at, member_rows, starts, sizes, lo, hi, tables
):
    """Every candidate set of blocks lo..hi-1, depth first (blocks with an empty party skipped):
    party j's segments ``segs[j]`` (seg_rows[j], w) uint64 and their popcounts ``pops[j]`` int64
    are the ``PartyArrays`` (``_numba_party_arrays``) ``seg_at`` / ``pop_at`` (same row counts),
    its block members ``rows_of[j]`` int64 the ``PartyArrays`` ``member_at`` / ``member_rows``;
    party j's rows of block b are ``rows_of[j][starts[j, b] : starts[j, b] + sizes[j, b]]``; a
    partial set of k + 1 rows is kept iff its c >= ``tables[k + 1, psum]``
    (``kernel.threshold_table``). Returns (idx, c, evaluated, survived, checksum): survivors as
    rows of ``segs`` in block order, then lexicographically by position in the block (the order of
    ``kernel._batch_blocks``), the stage counts, and a checksum of the rows read ahead (to be
    ignored)."""
    p = sizes.shape[0]
    cap = 0
    for b in range(lo, hi):
        sets = 1
        for j in range(p):
            sets *= sizes[j, b]
        cap += sets
    out_idx = np.empty((cap, p), dtype=np.int64)
    out_c = np.empty(cap, dtype=np.int64)
    evaluated = np.zeros(p, dtype=np.int64)
    survived = np.zeros(p, dtype=np.int64)
    acc = np.empty((p, w), dtype=np.uint64)
    psum = np.zeros(p, dtype=np.int64)
    pos = np.zeros(p, dtype=np.int64)
    cur = np.zeros(p, dtype=np.int64)
    written = 0
    sink = np.uint64(0)
    for b in range(lo, hi):
        if (b - lo) % TOUCH_BLOCKS == 0:
            # Read the next blocks' rows in a loop of independent loads (many cache misses in
            # flight) so that the depth-first loop below, whose loads wait on each other, finds
            # them in cache.
            for bb in range(b, min(b + TOUCH_BLOCKS, hi)):
                for j in range(p):
                    seg = u64_rows(seg_at, seg_rows, j, w)
                    pop = i64_values(pop_at, seg_rows, j)
                    rows = i64_values(member_at, member_rows, j)
                    for x in range(starts[j, bb], starts[j, bb] + sizes[j, bb]):
                        r = rows[x]
                        sink ^= seg[r, 0] ^ seg[r, w - 1] ^ np.uint64(pop[r])
        empty = False
        for j in range(p):
            if sizes[j, b] == 0:
                empty = True
        if empty:
            continue
        level = 0
        pos[0] = 0
        while True:
            if pos[level] >= sizes[level, b]:
                if level == 0:
                    break
                level -= 1
                pos[level] += 1
                continue
            seg = u64_rows(seg_at, seg_rows, level, w)
            r = i64_values(member_at, member_rows, level)[starts[level, b] + pos[level]]
            cur[level] = r
            if level == 0:
                for k in range(w):
                    acc[0, k] = seg[r, k]
                psum[0] = i64_values(pop_at, seg_rows, 0)[r]
                level = 1
                pos[1] = 0
                continue
            s = psum[level - 1] + i64_values(pop_at, seg_rows, level)[r]
            c = 0
            if level == p - 1:
                for k in range(w):
                    c += _popcnt64(acc[level - 1, k] & seg[r, k])  # type: ignore[call-arg]
            else:
                for k in range(w):
                    v = acc[level - 1, k] & seg[r, k]
                    acc[level, k] = v
                    c += _popcnt64(v)  # type: ignore[call-arg]
            evaluated[level] += 1
            if c < tables[level + 1, s]:
                pos[level] += 1
                continue
            survived[level] += 1
            if level == p - 1:
                for j in range(p):
                    out_idx[written, j] = cur[j]
                out_c[written] = c
                written += 1
                pos[level] += 1
            else:
                psum[level] = s
                level += 1
                pos[level] = 0
    return out_idx[:written], out_c[:written], evaluated, survived, sink


@_jit
def _idx_less(idx, a, b):  # type: ignore[no-untyped-def]
    """True iff row a of idx is lexicographically smaller than row b."""
    for j in range(idx.shape[1]):
        if idx[a, j] != idx[b, j]:
            return idx[a, j] < idx[b, j]
    return False


@_jit
def merge_ring_rows(idx, c, bounds, key_at, key_rows, columns):  # type: ignore[no-untyped-def]
    """``ring_rows`` of the distinct rows of sorted runs: run r is rows bounds[r]..bounds[r+1]-1
    of ``idx``, sorted lexicographically and distinct; a k-way merge dropping rows equal to the
    one before. Row (i_0, ..., i_{P-1}) becomes party j's pseudonym ``keys[j][i_j]`` in column
    ``columns[j]``, then c; ``keys`` are the uint64 ``PartyArrays`` ``key_at`` / ``key_rows``.
    Rows come out in lexicographic order of idx."""
    m, p = idx.shape
    runs = bounds.shape[0] - 1
    head = bounds[:-1].copy()
    out = np.empty((m, p + 1), dtype=np.uint64)
    n = 0
    last = -1
    while True:
        best = -1
        for r in range(runs):
            if head[r] < bounds[r + 1] and (best < 0 or _idx_less(idx, head[r], head[best])):
                best = r
        if best < 0:
            break
        i = head[best]
        head[best] += 1
        if last >= 0 and not _idx_less(idx, last, i):
            continue  # equal to the row before (runs are sorted: never smaller)
        for j in range(p):
            out[n, columns[j]] = u64_values(key_at, key_rows, j)[idx[i, j]]
        out[n, p] = c[i]
        n += 1
        last = i
    return out[:n].copy()


@_jit
def pack_rows_key(idx, shifts):  # type: ignore[no-untyped-def]
    """One uint64 per row of non-negative ``idx`` (m, P): column j shifted left by ``shifts[j]``
    (the caller checks that the columns' bit widths fit in 64 bits together)."""
    m, p = idx.shape
    out = np.empty(m, dtype=np.uint64)
    for i in range(m):
        key = np.uint64(0)
        for j in range(p):
            key |= np.uint64(idx[i, j]) << np.uint64(shifts[j])
        out[i] = key
    return out


@_jit
def plan_blocks(  # type: ignore[no-untyped-def]
    start_at, start_rows, lo, hi, cap, small, first, sizes, fast_sizes, fast_sets, slow
):
    """Blocks lo..hi-1 of the P parties' CSR ``starts`` ((nb + 1,) int64 each, the ``PartyArrays``
    ``start_at`` / ``start_rows``): first[j, b]
    and sizes[j, b] of party j's rows; a block where every party has rows, none more than ``cap``
    (cap < 0: no cap) and whose product of sizes is at most ``small`` is fast: fast_sizes[:, b] =
    its sizes and fast_sets[b] = that product; any other block gets zeros there, and slow[b] is
    True iff every party has rows in it."""
    p = sizes.shape[0]
    for b in range(lo, hi):
        live = True
        capped = False
        sets = 1
        for j in range(p):
            starts = i64_values(start_at, start_rows, j)
            a = starts[b]
            n = starts[b + 1] - a
            first[j, b] = a
            sizes[j, b] = n
            if n == 0:
                live = False
            if cap >= 0 and n > cap:
                capped = True
            if sets <= small:  # stop multiplying beyond small (no overflow)
                sets *= n
        fast = live and not capped and sets <= small
        for j in range(p):
            fast_sizes[j, b] = sizes[j, b] if fast else 0
        fast_sets[b] = sets if fast else 0
        slow[b] = live and not fast
