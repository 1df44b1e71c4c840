"""Compiled (numba) loops of the encoder: LSH band values (only schemas with LSH keys use it) and
the byte polynomial of ``first_sight.value_hashes``.

Exact integer loops: the bands over the ``bits.py`` layout (position p = bit p % 64 of word
p // 64), which the LSH tests check against the definition; the polynomial is checked against
its numpy definition (``tests/unit/encoding/test_first_sight.py``).
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


@jit
def byte_polynomials(offsets, data, powers, out):  # type: ignore[no-untyped-def]
    """out[i] = sum over byte j of value i of data[j] * powers[j % powers.size] (uint64,
    wrapping), value i being data[offsets[i]:offsets[i + 1]]."""
    m = powers.size
    for i in range(out.size):
        acc = np.uint64(0)
        start = offsets[i]
        for j in range(start, offsets[i + 1]):
            acc += np.uint64(data[j]) * powers[(j - start) % m]
        out[i] = acc


def warm_up() -> None:
    """Run the loop once on tiny inputs: loads (or compiles) it and initialises numba, so a
    process forked after this (the encoding pool's forkserver) starts with it ready."""
    rows = np.zeros((1, 1), dtype=np.uint64)
    gather_bands(rows, np.zeros((1, 1), dtype=np.int64))
    byte_polynomials(
        np.zeros(2, dtype=np.int32),
        np.zeros(1, dtype=np.uint8),
        np.ones(1, dtype=np.uint64),
        np.zeros(1, dtype=np.uint64),
    )
