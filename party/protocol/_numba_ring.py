"""Compiled loop of ``party.protocol.ring_cursor``: one sorted merge of a ring chunk with a window of kept rows.

Both sides are strictly increasing in the lexicographic order of their first ``k`` columns (the
ring's pseudonyms); the merge finds their common rows, copies each found window row, and tells how
far it got on both sides, so the caller can drop the window rows no later query can name.
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit


@jit
def merge_window(  # pragma: no cover - compiled
    query: np.ndarray,
    window: np.ndarray,
    k: int,
    first: int,
    positions: np.ndarray,
    found: np.ndarray,
    at: int,
) -> tuple[int, int, int]:
    """Merge ``query[first:]`` with ``window`` by their first ``k`` columns; for every row in
    both, write its query position to ``positions[at]`` and the window row to ``found[at]`` and
    advance ``at``. Returns (query rows passed, window rows passed, at): the merge stops when
    either side ends; when the query ended, the window rows passed are exactly those at or below
    its last row."""
    m, w, width = query.shape[0], window.shape[0], window.shape[1]
    i, j = first, 0
    while i < m and j < w:
        order = 0
        for c in range(k):
            x, y = query[i, c], window[j, c]
            if x < y:
                order = -1
                break
            if x > y:
                order = 1
                break
        if order < 0:
            i += 1
        elif order > 0:
            j += 1
        else:
            positions[at] = i
            for c in range(width):
                found[at, c] = window[j, c]
            at += 1
            i += 1
            j += 1
    return i, j, at


@jit
def step_rows(  # pragma: no cover - compiled
    own: np.ndarray,
    positions: np.ndarray,
    c_in: np.ndarray,
    x_in: np.ndarray,
    p: int,
    out: np.ndarray,
) -> None:
    """A ring step's outgoing rows from its own matched rows ``own`` (pseudonyms, c_i) and the
    incoming sums at ``positions``: out[t] = (own[t, :p], c_in + c_i, x_in), the sums mod 2^64."""
    for t in range(positions.shape[0]):
        i = positions[t]
        for c in range(p):
            out[t, c] = own[t, c]
        out[t, p] = c_in[i] + own[t, p]
        out[t, p + 1] = x_in[i]


@jit
def pair_ends(rows: np.ndarray, p: int, ends: np.ndarray) -> None:  # pragma: no cover - compiled
    """Target any's matched rows (p pseudonyms, two of them non-zero) as (party a, pseudonym,
    party b, pseudonym) with a the first non-zero column and b the last (column 0 and p - 1 of
    a row without any, as numpy's argmax of no True gives)."""
    for t in range(rows.shape[0]):
        a, b = 0, p - 1
        for c in range(p):
            if rows[t, c] != 0:
                a = c
                break
        for c in range(p - 1, -1, -1):
            if rows[t, c] != 0:
                b = c
                break
        ends[t, 0] = a
        ends[t, 1] = rows[t, a]
        ends[t, 2] = b
        ends[t, 3] = rows[t, b]


@jit
def start_rows(  # pragma: no cover - compiled
    rows: np.ndarray,
    mask_c: np.ndarray,
    mask_x: np.ndarray,
    p: int,
    cand: np.ndarray,
    sent: np.ndarray,
    c_out: np.ndarray,
) -> None:
    """The initiator's hop 0 from its survivors ``rows`` (pseudonyms, c_0) and fresh masks: the
    candidates, the rows it keeps (pseudonyms, mask_c, mask_x) and c_out = mask_c + c_0 mod 2^64."""
    for t in range(rows.shape[0]):
        for c in range(p):
            cand[t, c] = rows[t, c]
            sent[t, c] = rows[t, c]
        sent[t, p] = mask_c[t]
        sent[t, p + 1] = mask_x[t]
        c_out[t] = mask_c[t] + rows[t, p]


@jit
def own_counts(  # pragma: no cover - compiled
    positions: np.ndarray, shared_rows: np.ndarray, x: np.ndarray, out: np.ndarray
) -> None:
    """out[i] = the 1-bit count x of the record at ``positions[i]`` among the party's pseudonyms
    (its table row ``shared_rows[position]``), 0 where the position is -1 (no record of its own:
    a pseudonym 0)."""
    for i in range(positions.shape[0]):
        at = positions[i]
        out[i] = np.uint64(x[shared_rows[at]]) if at >= 0 else np.uint64(0)
