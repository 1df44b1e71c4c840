"""Compiled byte copies that assemble result-file CSV lines (party.node.results) from columns."""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit

_TEN = np.uint64(10)  # uint64 with an int64 literal would be float64 arithmetic in numba


@jit
def label_widths(ids: np.ndarray) -> np.ndarray:
    """Per linkage id, the length of its label: "L" and its decimal digits, at least 8."""
    out = np.empty(ids.shape[0], dtype=np.int64)
    for r in range(ids.shape[0]):
        v = ids[r]
        digits = 1
        while v >= _TEN:
            v //= _TEN
            digits += 1
        out[r] = 1 + max(8, digits)
    return out


@jit
def put_labels(out: np.ndarray, at: np.ndarray, ids: np.ndarray, widths: np.ndarray) -> None:
    """Write each id's label (``label_widths`` bytes: "L", then zero-padded digits) at ``at``."""
    for r in range(ids.shape[0]):
        p = at[r]
        out[p] = 76  # "L"
        v = ids[r]
        for t in range(widths[r] - 1, 0, -1):
            out[p + t] = np.uint8(48 + v % _TEN)
            v //= _TEN


@jit
def put_fields(
    out: np.ndarray, at: np.ndarray, blob: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> None:
    """Copy row r's field, ``blob[starts[r]:starts[r] + lengths[r]]``, to ``out`` at ``at[r]``."""
    for r in range(at.shape[0]):
        p = at[r]
        s = starts[r]
        for t in range(lengths[r]):
            out[p + t] = blob[s + t]
