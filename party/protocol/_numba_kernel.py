"""Compiled (numba) inner loops of the comparison kernel: AND + popcount with fused filtering.

Imported lazily by ``party.protocol.kernel``; see that module for the contract. Single-threaded and
``nogil``: parallelism comes from running parties (or blocks) in separate threads, which is safe with
numba's default threading layer, whereas nested ``prange`` calls from several threads are not.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import intrinsic


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
def greedy_keep_dense(ids, slots):  # type: ignore[no-untyped-def]
    """Greedy one-to-one over rows of dense record ids (m, P) int64 already in visiting order
    (column j's ids offset so that no two columns share one; ``slots`` > every id): positions of
    the rows kept, i.e. those none of whose ids is in a row kept before (``classify.greedy_keep``)."""
    m, p = ids.shape
    used = np.zeros(slots, dtype=np.bool_)
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
