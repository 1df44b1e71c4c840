"""Ring secure summation (Algo 2): message format, masks and mod-2^64 arithmetic.

A ``RingMessage`` travels party 0 -> 1 -> ... -> P-1 -> 0 (ring order = party index order of the
parameters). ``hop`` is 0 when the initiator sends it and increases by one at every party, so party
i receives hop i-1 and the initiator gets hop P-1 back. ``candidates`` (m, P) uint64 lists candidate
sets by pseudonym (column j = party j's record), rows strictly increasing in lexicographic order.
``c_masked``/``x_masked`` (m,) uint64 are, per set, the initiator's random mask plus the c_i
(common 1-bits of segment i) and x_i (1-bits of party i's whole filter) added so far, mod 2^64.

Security assumptions (Vatsalan & Christen 2014, "Scalable privacy-preserving record linkage for
multiple databases", CIKM, Algo 2; the standard additive-masking secure sum): honest-but-curious
parties, no collusion between a party's two ring neighbours, masks fresh and uniform on Z_2^64
from the OS CSPRNG and used once. Then every value a non-initiator sees is uniform on Z_2^64 and
independent of the inputs. What is revealed: the set list itself (a party learns which of its
sets were pruned elsewhere) and, to the initiator, the sums.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from party.protocol._numba_blocks import keys_strictly_increasing, sort_high_ties, sort_ties
from party.protocol.errors import RingError

_U64 = np.dtype("<u8")
#: sort_rows sorts runs of equal column-0 values at least this long with numpy's stable sort
#: (compiled code sorts the shorter ones).
LONG_TIE_RUN = 256
#: ... and runs at least this long as rows of their own (``sort_rows`` of their other columns).
LONG_RUN_RECURSE = 1 << 16


@dataclass(frozen=True)
class RingMessage:
    """One hop of the secure summation (see the module docstring)."""

    hop: int
    candidates: np.ndarray  # (m, P) uint64 pseudonyms, rows sorted lexicographically, unique
    c_masked: np.ndarray  # (m,) uint64
    x_masked: np.ndarray  # (m,) uint64

    def __len__(self) -> int:
        return int(self.candidates.shape[0])


def row_keys(rows: np.ndarray) -> np.ndarray:
    """A 1-D structured view of (m, P) uint64 rows that sorts and compares lexicographically."""
    rows = np.ascontiguousarray(rows, dtype=np.uint64)
    dt = np.dtype([(f"f{i}", np.uint64) for i in range(rows.shape[1])])
    return rows.view(dt).reshape(rows.shape[0])


def sort_rows(rows: np.ndarray, key_columns: int | None = None) -> np.ndarray:
    """Stable permutation that sorts (m, P) uint64 rows lexicographically by their first
    ``key_columns`` columns (default: all), as ``np.lexsort`` of those columns would, about 3x
    faster: a sort by column 0, then each run of equal column-0 values by the rest (compiled for
    short runs, numpy's stable sorts for runs of ``LONG_TIE_RUN`` rows or more)."""
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    k = rows.shape[1] if key_columns is None else key_columns
    rows = np.ascontiguousarray(rows, dtype=np.uint64)
    order = argsort_stable(rows[:, 0])
    order, longs = sort_ties(rows, order, k, LONG_TIE_RUN)
    for i, j in longs.tolist():  # e.g. target any's rows with 0 in column 0: a third of them
        run = order[i:j]
        if j - i >= LONG_RUN_RECURSE:  # sorted by the other key columns as rows of their own
            order[i:j] = run[sort_rows(np.ascontiguousarray(rows[run, 1:k]))]
            continue
        for c in range(k - 1, 0, -1):  # stable sorts, least significant column first
            run = run[np.argsort(rows[run, c], kind="stable")]
        order[i:j] = run
    return order


def argsort_stable(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` of (n,) uint64, about 4x faster: numpy's (vectorised)
    sort of each value's high bits with its index in the low bits, then the runs of equal high
    bits sorted by the whole value (compiled; random 64-bit values rarely share their high bits)."""
    n = values.shape[0]
    bits = max(1, (n - 1).bit_length())
    if bits > 40:  # too few high bits left to tell values apart
        return np.argsort(values, kind="stable")
    values = np.ascontiguousarray(values, dtype=np.uint64)
    low = np.uint64((1 << bits) - 1)
    least = values.min()
    packed = values - least  # the values' span moved to the high bits: small values differ too
    packed <<= np.uint64(64 - int(values.max() - least).bit_length())
    packed &= ~low
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()
    order = (packed & low).astype(np.int64)
    sort_high_ties(values, packed, order, bits)
    return order


def unique_sorted_rows(rows: np.ndarray) -> np.ndarray:
    """Positions of the distinct rows of (m, P) uint64, in lexicographic order of the rows."""
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    order = sort_rows(rows)
    s = rows[order]
    first = np.ones(s.shape[0], dtype=bool)
    first[1:] = np.any(s[1:] != s[:-1], axis=1)
    return order[first]


def intersect_sorted_rows(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(ia, ib): positions of the rows common to a and b, both strictly increasing (m, P) uint64.

    The result is in increasing row order. Linear merge (numba) or a lexsort of both (fallback).
    """
    if a.shape[0] == 0 or b.shape[0] == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    try:
        from party.protocol import _numba_kernel
    except ImportError:  # pragma: no cover - numba is a dependency
        cat = np.concatenate([a, b])
        src = np.concatenate([np.zeros(a.shape[0], np.int64), np.ones(b.shape[0], np.int64)])
        pos = np.concatenate([np.arange(a.shape[0]), np.arange(b.shape[0])])
        order = np.lexsort((src, *cat.T[::-1]))
        s = cat[order]
        same = np.all(s[1:] == s[:-1], axis=1)
        at = np.flatnonzero(same)
        return pos[order][at], pos[order][at + 1]
    ia, ib = _numba_kernel.intersect_sorted_rows(
        np.ascontiguousarray(a, dtype=np.uint64), np.ascontiguousarray(b, dtype=np.uint64)
    )
    return ia, ib


def rows_strictly_increasing(rows: np.ndarray) -> bool:
    """True iff the rows of an (m, P) array are strictly increasing in lexicographic order."""
    if rows.shape[0] < 2:
        return True
    if rows.dtype == np.uint64 and rows.ndim == 2:  # compiled: one pass, no temporaries
        return bool(keys_strictly_increasing(np.ascontiguousarray(rows), rows.shape[1]))
    neq = rows[1:] != rows[:-1]
    if not np.all(neq.any(axis=1)):
        return False
    first = np.argmax(neq, axis=1)
    at = np.arange(first.size)
    return bool(np.all(rows[1:][at, first] > rows[:-1][at, first]))


def random_masks(m: int, random_bytes: Callable[[int], bytes] = os.urandom) -> np.ndarray:
    """m uniform uint64 masks from the OS CSPRNG (fresh for every call)."""
    return np.frombuffer(random_bytes(8 * m), dtype=_U64).astype(np.uint64)


def add_mod64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a + b) mod 2^64 elementwise on uint64."""
    with np.errstate(over="ignore"):
        return (a.astype(np.uint64) + b.astype(np.uint64)).astype(np.uint64)


def sub_mod64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(a - b) mod 2^64 elementwise on uint64."""
    with np.errstate(over="ignore"):
        return (a.astype(np.uint64) - b.astype(np.uint64)).astype(np.uint64)


def validate_message(msg: RingMessage, *, parties: int, expected_hop: int, receiver: int) -> None:
    """Raise RingError unless ``msg`` is well formed and is the hop ``receiver`` should get next."""
    if not isinstance(msg, RingMessage):
        raise RingError("expected a RingMessage")
    if isinstance(msg.hop, bool) or not isinstance(msg.hop, int | np.integer):
        raise RingError("ring message hop must be an integer")
    if int(msg.hop) != expected_hop:
        raise RingError(
            f"party {receiver} expected ring hop {expected_hop} (from party {expected_hop % parties}) "
            f"but got hop {msg.hop}: wrong party order or a missing party"
        )
    cand = msg.candidates
    if (
        not isinstance(cand, np.ndarray)
        or cand.dtype != np.uint64
        or cand.ndim != 2
        or cand.shape[1] != parties
    ):
        raise RingError(f"ring message candidates must be an (m, {parties}) uint64 array")
    m = cand.shape[0]
    for name in ("c_masked", "x_masked"):
        a = getattr(msg, name)
        if not isinstance(a, np.ndarray) or a.dtype != np.uint64 or a.shape != (m,):
            raise RingError(f"ring message {name} must be an ({m},) uint64 array")
    if not rows_strictly_increasing(cand):
        raise RingError("ring message candidate list is not sorted and unique")
