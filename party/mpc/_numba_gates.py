"""Compiled (numba) kernels of party.mpc: AND shares, full adders, bit transposes, set expansion.

Layouts (see ``party.mpc.lanes``): a *row* array is (n, words) uint64 with bit p of a row in word
p // 64 at bit p % 64 (``party.encoding.bits``); a *lane* array is (bits, n / 64) uint64 where
bit k of word g of wire b is bit b of row 64 g + k.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def _jit(fn):  # type: ignore[no-untyped-def]
    """njit (nogil, on-disk cache when numba finds a writable cache location)."""
    try:
        return njit(cache=True, nogil=True, boundscheck=False)(fn)
    except RuntimeError:
        return njit(cache=False, nogil=True, boundscheck=False)(fn)


@_jit
def and_share_range(x0, x1, y0, y1, ka, kb, out, lo, hi):  # type: ignore[no-untyped-def]
    """out = (x0 & (y0 ^ y1)) ^ (x1 & y0) ^ ka ^ kb on 3-D uint64 arrays, last index in [lo, hi).

    ka, kb are the two keystreams whose XOR is the zero share alpha (flat, in out's C order); the
    inputs may be strided views; ``out`` is C-contiguous. Ranges that cover [0, last dimension)
    without overlap write disjoint elements (one range per thread).
    """
    a, b, c = out.shape
    for i in range(a):
        for j in range(b):
            k = (i * b + j) * c
            for m in range(lo, hi):
                out[i, j, m] = (
                    (x0[i, j, m] & (y0[i, j, m] ^ y1[i, j, m]))
                    ^ (x1[i, j, m] & y0[i, j, m])
                    ^ (ka[k + m] ^ kb[k + m])
                )


@_jit
def and_share(x0, x1, y0, y1, ka, kb, out):  # type: ignore[no-untyped-def]
    """``and_share_range`` over the whole last dimension (one thread)."""
    and_share_range(x0, x1, y0, y1, ka, kb, out, 0, out.shape[2])


_MASKS = np.array(
    [
        0x00000000FFFFFFFF,
        0x0000FFFF0000FFFF,
        0x00FF00FF00FF00FF,
        0x0F0F0F0F0F0F0F0F,
        0x3333333333333333,
        0x5555555555555555,
    ],
    dtype=np.uint64,
)


@_jit
def _transpose64(a):  # type: ignore[no-untyped-def]
    """In-place transpose of a 64 x 64 bit matrix (a[r] bit c -> a[c] bit r), by block swaps."""
    j = 32
    for step in range(6):
        m = _MASKS[step]
        sj = np.uint64(j)
        for base in range(0, 64, 2 * j):
            for k in range(base, base + j):
                t = ((a[k] >> sj) ^ a[k + j]) & m
                a[k] ^= t << sj
                a[k + j] ^= t
        j >>= 1


@_jit
def rows_to_lanes_range(src, out, lo, hi):  # type: ignore[no-untyped-def]
    """``rows_to_lanes`` for the lane groups g in [lo, hi) only (disjoint ranges: disjoint writes)."""
    n = src.shape[0]
    words = src.shape[1]
    blk = np.zeros(64, dtype=np.uint64)
    for g in range(lo, hi):
        for w in range(words):
            for k in range(64):
                r = g * 64 + k
                blk[k] = src[r, w] if r < n else np.uint64(0)
            _transpose64(blk)
            lim = min(64, out.shape[0] - w * 64)
            for b in range(lim):
                out[w * 64 + b, g] = blk[b]


@_jit
def rows_to_lanes(src, out):  # type: ignore[no-untyped-def]
    """out[w*64 + b, g] bit k = bit b of word w of src[64 g + k] (rows beyond src: 0; wires beyond out: dropped)."""
    rows_to_lanes_range(src, out, 0, out.shape[1])


@_jit
def lanes_to_values_range(src, out, lo, hi):  # type: ignore[no-untyped-def]
    """``lanes_to_values`` for the lane groups g in [lo, hi) only (disjoint ranges: disjoint writes)."""
    bits = src.shape[0]
    blk = np.zeros(64, dtype=np.uint64)
    for g in range(lo, hi):
        for b in range(64):
            blk[b] = src[b, g] if b < bits else np.uint64(0)
        _transpose64(blk)
        for k in range(64):
            r = g * 64 + k
            if r < out.size:
                out[r] = blk[k]


@_jit
def lanes_to_values(src, out):  # type: ignore[no-untyped-def]
    """out[64 g + k] = sum_b (bit k of src[b, g]) << b for b < src.shape[0] <= 64."""
    lanes_to_values_range(src, out, 0, src.shape[1])


#: sets per tile of ``and_word_major``: a tile's gathered rows (4 x 128 x words words) stay in
#: the core's cache while its words are written one after another
AND_TILE_SETS = 128


@_jit
def and_word_major(x0, x1, ix, xg, y0, y1, iy, yg, ka, kb, out, lo, hi):  # type: ignore[no-untyped-def]
    """AND share into out (words, n), word-major: out[m, r] = word m of set r; ka ^ kb = alpha.

    Only the sets r in [lo, hi) are written (disjoint ranges: disjoint writes, one per thread).
    An operand is gathered (``xg``/``yg`` true) from a row-major (records, words) share pair by
    its index array (-1: an all-zero row), or read word-major from a (words, n) pair. The sets
    go in tiles of ``AND_TILE_SETS``, word-major within a tile: a gathered row is fetched from
    memory once, not once per word (3 x 400k, 1020 bits: a third of the time).
    """
    words, n = out.shape
    zero = np.uint64(0)
    for t in range(lo, hi, AND_TILE_SETS):
        e = min(t + AND_TILE_SETS, hi)
        for m in range(words):  # sequential writes and keystream reads within the tile
            for r in range(t, e):
                a = ix[r]
                b = iy[r]
                if xg:
                    xa0 = x0[a, m] if a >= 0 else zero
                    xa1 = x1[a, m] if a >= 0 else zero
                else:
                    xa0 = x0[m, r]
                    xa1 = x1[m, r]
                if yg:
                    yb0 = y0[b, m] if b >= 0 else zero
                    yb1 = y1[b, m] if b >= 0 else zero
                else:
                    yb0 = y0[m, r]
                    yb1 = y1[m, r]
                k = m * n + r
                out[m, r] = (xa0 & (yb0 ^ yb1)) ^ (xa1 & yb0) ^ (ka[k] ^ kb[k])


@_jit
def fa_and(c0, c1, f, ka, kb, out, lo, hi):  # type: ignore[no-untyped-def]
    """Full adders on rows a = c[0:f], b = c[f:2f], cc = c[2f:3f]: AND share of (a^cc) & (b^cc).

    Lanes g in [lo, hi) only (disjoint ranges: disjoint writes); keystream index r * lanes + g.
    """
    lanes = c0.shape[1]
    for r in range(f):
        k = r * lanes
        for g in range(lo, hi):
            cc0 = c0[2 * f + r, g]
            cc1 = c1[2 * f + r, g]
            x0 = c0[r, g] ^ cc0
            x1 = c1[r, g] ^ cc1
            y0 = c0[f + r, g] ^ cc0
            y1 = c1[f + r, g] ^ cc1
            out[r, g] = (x0 & (y0 ^ y1)) ^ (x1 & y0) ^ (ka[k + g] ^ kb[k + g])


@_jit
def fa_finish(c0, c1, f, z0, z1, sum0, sum1, carry0, carry1, with_carry, lo, hi):  # type: ignore[no-untyped-def]
    """sum = a ^ b ^ cc into sum*, carry = z ^ cc into carry* (when with_carry); lanes [lo, hi)."""
    for r in range(f):
        for g in range(lo, hi):
            cc0 = c0[2 * f + r, g]
            cc1 = c1[2 * f + r, g]
            sum0[r, g] = c0[r, g] ^ c0[f + r, g] ^ cc0
            sum1[r, g] = c1[r, g] ^ c1[f + r, g] ^ cc1
            if with_carry:
                carry0[r, g] = z0[r, g] ^ cc0
                carry1[r, g] = z1[r, g] ^ cc1
