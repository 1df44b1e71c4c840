"""Compiled loop that cuts the bit segments of a party's shared filter rows (party.encoding.bits layout)."""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit

_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@jit
def cut_segments(
    filters: np.ndarray,
    rows: np.ndarray,
    starts: np.ndarray,
    width: int,
    out: np.ndarray,
    lo: int,
    hi: int,
) -> None:
    """out[t, i] = bits [starts[t], starts[t] + width) of filter row rows[i], repacked to start
    at bit 0 (``party.encoding.bits.slice_bits`` of the row), for i in [lo, hi) and every t: one
    read of each row for all its segments, no temporaries. Bits past the filter's last word
    read as 0; the last word's bits past ``width`` are 0."""
    words = out.shape[2]
    have = filters.shape[1]
    tail = width % 64
    last_mask = (np.uint64(1) << np.uint64(tail)) - np.uint64(1) if tail else _ALL
    for i in range(lo, hi):
        r = rows[i]
        for t in range(starts.shape[0]):
            first = starts[t] // 64
            shift = np.uint64(starts[t] % 64)
            for w in range(words):
                s = first + w
                x = filters[r, s] >> shift if s < have else np.uint64(0)
                if shift and s + 1 < have:
                    x |= filters[r, s + 1] << (np.uint64(64) - shift)
                if w == words - 1:
                    x &= last_mask
                out[t, i, w] = x
