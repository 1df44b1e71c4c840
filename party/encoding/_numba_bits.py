"""Compiled (numba) bit loops of the encoder: value filters from hash streams, LSH band values.

Both are exact integer loops over the ``bits.py`` layout (position p = bit p % 64 of word p // 64);
``tests/unit/encoding/test_value_filters.py`` and the LSH tests check them against the definition.
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit


@jit
def set_stream_bits(out, value_of, gids, ks, table):  # type: ignore[no-untyped-def]
    """For every pair p: set the first ks[p] positions of stream row gids[p] in out[value_of[p]]."""
    one = np.uint64(1)
    for p in range(value_of.shape[0]):
        v = value_of[p]
        g = gids[p]
        for j in range(ks[p]):
            pos = table[g, j]
            out[v, pos >> 6] |= one << np.uint64(pos & 63)


@jit
def gather_bands(filters, positions):  # type: ignore[no-untyped-def]
    """(n, B) uint64: bit j of band b = filter bit positions[b, j] of each row."""
    n = filters.shape[0]
    bands, per_band = positions.shape
    out = np.zeros((n, bands), dtype=np.uint64)
    one = np.uint64(1)
    for i in range(n):
        for b in range(bands):
            acc = np.uint64(0)
            for j in range(per_band):
                pos = positions[b, j]
                bit = (filters[i, pos >> 6] >> np.uint64(pos & 63)) & one
                acc |= bit << np.uint64(j)
            out[i, b] = acc
    return out


def warm_up() -> None:
    """Run both loops once on tiny inputs: loads (or compiles) them and initialises numba, so a
    process forked after this (the encoding pool's forkserver) starts with them ready."""
    rows = np.zeros((1, 1), dtype=np.uint64)
    one = np.zeros(1, dtype=np.int64)
    set_stream_bits(rows, one, one, one + 1, np.zeros((1, 1), dtype=np.int32))
    gather_bands(rows, np.zeros((1, 1), dtype=np.int64))
