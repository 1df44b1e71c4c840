"""Packed bit rows: the one bit layout every layer (encoding, protocol, audit, wire) shares.

Layout. A filter of ``l`` bits is one row of ``ceil(l / 64)`` unsigned 64-bit words. Bit position
``p`` (0 <= p < l) lives in word ``p // 64`` at bit ``p % 64``, where bit 0 is the least significant
bit. Bits at positions >= l in the last word are always zero. On the wire and in files a row is its
words serialised little-endian, which is the same as bytes where byte ``b`` holds positions
``8b .. 8b+7`` with position ``8b`` in the least significant bit. Hex strings in known-answer vectors
are these bytes in order.

Segments. With P parties, segment ``j`` of an ``l``-bit filter is the bit range
``[j * l / P, (j + 1) * l / P)``; ``l % P`` must be 0. A segment is itself stored as a packed row of
``l / P`` bits starting at position 0, so the same functions apply to filters and segments.
"""

from __future__ import annotations

import numpy as np

from party.errors import PprlError

WORD_BITS = 64
_LE_U64 = np.dtype("<u8")


class BitLayoutError(PprlError, ValueError):
    """A bit length, segment count or packed array does not fit the documented layout."""


def words_for(nbits: int) -> int:
    """Number of 64-bit words that hold ``nbits`` bits."""
    if nbits <= 0:
        raise BitLayoutError(f"bit length must be positive, got {nbits}")
    return (nbits + WORD_BITS - 1) // WORD_BITS


def empty_rows(n: int, nbits: int) -> np.ndarray:
    """An all-zero (n, words_for(nbits)) uint64 array."""
    return np.zeros((n, words_for(nbits)), dtype=np.uint64)


def check_rows(rows: np.ndarray, nbits: int) -> None:
    """Raise BitLayoutError unless ``rows`` is a 2-D uint64 array of ``nbits``-bit rows."""
    if rows.ndim != 2 or rows.dtype != np.uint64:
        raise BitLayoutError(f"expected a 2-D uint64 array, got {rows.ndim}-D {rows.dtype}")
    if rows.shape[1] != words_for(nbits):
        raise BitLayoutError(
            f"rows have {rows.shape[1]} words, {nbits} bits need {words_for(nbits)}"
        )
    tail = nbits % WORD_BITS
    if tail and rows.shape[0] and np.any(rows[:, -1] >> np.uint64(tail)):
        raise BitLayoutError(f"bits beyond position {nbits} are set")


def popcount_rows(rows: np.ndarray) -> np.ndarray:
    """Number of 1-bits in each row, as int64."""
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    return np.bitwise_count(rows).sum(axis=1, dtype=np.int64)


def unpack_rows(rows: np.ndarray, nbits: int) -> np.ndarray:
    """(n, nbits) uint8 0/1 matrix: column p is bit position p."""
    as_bytes = np.ascontiguousarray(rows.astype(_LE_U64, copy=False)).view(np.uint8)
    return np.unpackbits(as_bytes, axis=1, bitorder="little")[:, :nbits]


def pack_rows(bits: np.ndarray) -> np.ndarray:
    """Inverse of unpack_rows: (n, nbits) 0/1 matrix to packed uint64 rows."""
    if bits.ndim != 2:
        raise BitLayoutError("expected a 2-D 0/1 matrix")
    n, nbits = bits.shape
    words = words_for(nbits)
    padded = np.zeros((n, words * WORD_BITS), dtype=np.uint8)
    padded[:, :nbits] = bits != 0
    packed = np.packbits(padded, axis=1, bitorder="little")
    return packed.view(_LE_U64).astype(np.uint64, copy=False).reshape(n, words)


def rows_from_positions(positions: list[np.ndarray] | list[list[int]], nbits: int) -> np.ndarray:
    """Packed rows with the given bit positions set (one list of positions per row)."""
    rows = empty_rows(len(positions), nbits)
    for i, pos in enumerate(positions):
        p = np.asarray(pos, dtype=np.int64)
        if p.size and (p.min() < 0 or p.max() >= nbits):
            raise BitLayoutError(f"bit position out of range 0..{nbits - 1}")
        np.bitwise_or.at(rows[i], p // WORD_BITS, np.uint64(1) << (p % WORD_BITS).astype(np.uint64))
    return rows


def slice_bits(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Bits [start, stop) of every row, repacked to start at position 0."""
    if not 0 <= start < stop:
        raise BitLayoutError(f"invalid bit range [{start}, {stop})")
    width = stop - start
    out_words = words_for(width)
    first_word, shift = divmod(start, WORD_BITS)
    n = rows.shape[0]
    # Gather the source words (one extra for the carry), zero-padded past the end.
    need = out_words + 1
    src = np.zeros((n, need), dtype=np.uint64)
    avail = min(need, rows.shape[1] - first_word)
    src[:, :avail] = rows[:, first_word : first_word + avail]
    if shift:
        lo = src[:, :out_words] >> np.uint64(shift)
        hi = src[:, 1 : out_words + 1] << np.uint64(WORD_BITS - shift)
        out = lo | hi
    else:
        out = src[:, :out_words].copy()
    tail = width % WORD_BITS
    if tail:
        out[:, -1] &= np.uint64((1 << tail) - 1)
    return out


def segment_bounds(nbits: int, parties: int) -> list[tuple[int, int]]:
    """The P bit ranges [start, stop) of the segments of an nbits-long filter."""
    if parties < 2:
        raise BitLayoutError(f"need at least 2 parties, got {parties}")
    if nbits % parties:
        raise BitLayoutError(
            f"filter length l={nbits} is not divisible by the number of parties P={parties}"
        )
    width = nbits // parties
    return [(j * width, (j + 1) * width) for j in range(parties)]


def segments(rows: np.ndarray, nbits: int, parties: int) -> list[np.ndarray]:
    """Cut every row into P equal segments; element j holds segment j of every row."""
    return [slice_bits(rows, a, b) for a, b in segment_bounds(nbits, parties)]


def rows_to_bytes(rows: np.ndarray) -> bytes:
    """Serialise packed rows (little-endian words, row after row)."""
    return np.ascontiguousarray(rows.astype(_LE_U64, copy=False)).tobytes()


def rows_from_bytes(data: bytes, nbits: int) -> np.ndarray:
    """Parse rows_to_bytes output; raises BitLayoutError on a length or padding mismatch."""
    words = words_for(nbits)
    row_bytes = words * 8
    if len(data) % row_bytes:
        raise BitLayoutError(
            f"payload of {len(data)} bytes is not a whole number of {nbits}-bit rows"
        )
    rows = np.frombuffer(data, dtype=_LE_U64).astype(np.uint64).reshape(-1, words)
    check_rows(rows, nbits)
    return rows


def row_to_hex(row: np.ndarray) -> str:
    """Hex of one packed row's bytes (the known-answer vector format)."""
    return rows_to_bytes(row.reshape(1, -1)).hex()


def row_from_hex(text: str, nbits: int) -> np.ndarray:
    """Inverse of row_to_hex, returning a 1-D uint64 row."""
    return rows_from_bytes(bytes.fromhex(text), nbits)[0]
