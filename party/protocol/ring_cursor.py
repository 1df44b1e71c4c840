"""The ring's cursor over a party's own sorted rows: which rows of each incoming ring chunk it holds.

A ring step (and the initiator's unmasking) reads its own rows (survivors, or the masks it sent)
forward once, in step with the incoming chunks, which are strictly increasing and each above the
previous one. ``RingCursor`` answers what ``party.protocol.spill.SortedCursor`` answers (the same
positions and rows, the same ``rewind``), with one compiled merge per window
(``party.protocol._numba_ring``) instead of a key copy, a merge and a bound scan per chunk.
"""

from __future__ import annotations

import numpy as np

from party.protocol._numba_ring import merge_window
from party.protocol.spill import SortedCursor


class RingCursor(SortedCursor):
    """Finds, in a sorted unique row stream, the rows whose first ``key_columns`` columns appear
    in increasing query chunks (every chunk strictly increasing and above the previous chunk's
    last row: the caller checks); the stream is read forward once, one chunk in memory at a time.
    Reads, windows and ``rewind`` as ``SortedCursor``; ``match`` compiled."""

    def match(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``query`` found in the stream, the stream's rows for them), in order;
        (0, 0) rows when the stream gave none. ``rewind`` can undo this call until the next one."""
        read: list[np.ndarray] = []
        self._undo = (self._window, self._done, read)
        m = query.shape[0]
        positions = np.empty(m, dtype=np.int64)
        found: np.ndarray | None = None
        at = passed = 0
        query = np.ascontiguousarray(query, dtype=np.uint64)
        while passed < m:
            window = self._window
            if window is None or window.shape[0] == 0:
                window = None if self._done else self._next_chunk()
                if window is None:
                    self._done = True
                    break
                read.append(window)
            if found is None:
                found = np.empty((m, window.shape[1]), dtype=np.uint64)
            passed, used, at = merge_window(query, window, self.k, passed, positions, found, at)
            self._window = window[used:]
        if found is None:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.uint64)
        return positions[:at], found[:at]
