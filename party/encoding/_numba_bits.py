"""Compiled (numba) bit loop of the encoder: LSH band values (only schemas with LSH keys use it).

An exact integer loop over the ``bits.py`` layout (position p = bit p % 64 of word p // 64); the
LSH tests check it against the definition.
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit


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
    """Run the loop once on tiny inputs: loads (or compiles) it and initialises numba, so a
    process forked after this (the encoding pool's forkserver) starts with it ready."""
    rows = np.zeros((1, 1), dtype=np.uint64)
    gather_bands(rows, np.zeros((1, 1), dtype=np.int64))
