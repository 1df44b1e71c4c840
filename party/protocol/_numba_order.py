"""Compiled loops of ``party.protocol.pair_order``: the distinct Dice values and the order keys.

Dice values are doubles in [0, 1] (never -0: the caller adds 0.0), kept in an open-addressing
hash table by their bit pattern (``EMPTY``, all ones, is a NaN pattern: never a Dice), at most half
full. ``dice_insert`` adds a chunk's values; ``order_keys`` finds each pair's Dice in the table (its
slot's rank, set by the caller once the distinct values are sorted) and writes the pair's key
``rank * high + ends``.
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit

#: The bit pattern of an empty slot.
EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@jit
def _shift(table: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    """64 - log2 of the table's size: the hash's top bits pick the slot."""
    shift = np.uint64(64)
    size = table.shape[0]
    while size > 1:
        size >>= 1
        shift -= np.uint64(1)
    return shift


@jit
def _slot(table: np.ndarray, bits: np.uint64, shift: np.uint64) -> np.int64:  # pragma: no cover
    """The slot holding ``bits``, or the empty slot where it would go (linear probing)."""
    mask = table.shape[0] - 1
    h = np.int64((bits * _GOLDEN) >> shift)
    while table[h] != bits and table[h] != EMPTY:
        h = (h + 1) & mask
    return h


@jit
def dice_insert(
    table: np.ndarray, dice: np.ndarray, start: int, count: int
) -> tuple[int, int]:  # pragma: no cover - compiled
    """Add ``dice[start:]``'s bit patterns to ``table`` (size a power of two) holding ``count``
    values; stops before the table would be more than half full. Returns (where it stopped, the
    count)."""
    bits = dice.view(np.uint64)
    limit = table.shape[0] // 2
    shift = _shift(table)
    for i in range(start, bits.shape[0]):
        s = _slot(table, bits[i], shift)
        if table[s] == EMPTY:
            if count >= limit:
                return i, count
            table[s] = bits[i]
            count += 1
    return bits.shape[0], count


@jit
def order_keys(
    table: np.ndarray,
    rank: np.ndarray,
    dice: np.ndarray,
    ends: np.ndarray,
    high: np.int64,
    out: np.ndarray,
) -> None:  # pragma: no cover - compiled
    """out[i] = rank[slot of dice[i]] * high + ends[i] (every Dice is in the table)."""
    bits = dice.view(np.uint64)
    shift = _shift(table)
    for i in range(bits.shape[0]):
        out[i] = rank[_slot(table, bits[i], shift)] * high + ends[i]


@jit
def decode_shifts(  # pragma: no cover - compiled
    part: np.ndarray,
    before: np.int64,
    bits: np.int64,
    values: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    dice: np.ndarray,
) -> int:
    """Decode order keys ``rank << 2 bits | a << bits | b`` (increasing) into the pairs' ends and
    Dice (``values[top - rank]``), a key equal to the one before it (``before`` for the first:
    the key preceding ``part``, or -1) read once; returns the pairs written."""
    low = (np.int64(1) << bits) - 1
    two = 2 * bits
    both = (np.int64(1) << two) - 1
    top = values.shape[0] - 1
    n = 0
    prev = before
    for i in range(part.shape[0]):
        v = part[i]
        if v == prev:
            continue
        prev = v
        ends = v & both
        a[n] = ends >> bits
        b[n] = ends & low
        dice[n] = values[top - (v >> two)]
        n += 1
    return n
