"""The ring's cursor over a party's own sorted rows: which rows of each incoming ring chunk it holds.

A ring step (and the initiator's unmasking) reads its own rows (survivors, or the masks it sent)
forward once, in step with the incoming chunks, which are strictly increasing and each above the
previous one. ``RingCursor`` answers what ``party.protocol.spill.SortedCursor`` answers (the same
positions and rows, the same ``rewind``), with one compiled merge per window
(``party.protocol._numba_ring``) instead of a key copy, a merge and a bound scan per chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from party.protocol._numba_ring import merge_window


class RingCursor:
    """Finds, in a sorted unique row stream, the rows whose first ``key_columns`` columns appear
    in increasing query chunks (every chunk strictly increasing and above the previous chunk's
    last row: the caller checks); the stream is read forward once, one chunk in memory at a time."""

    def __init__(self, chunks: Iterator[np.ndarray], key_columns: int) -> None:
        self._source = chunks
        self.k = key_columns
        self._window: np.ndarray | None = None
        self._done = False
        self._back: list[np.ndarray] = []  # chunks given back by rewind, read again first
        self._undo: tuple[np.ndarray | None, bool, list[np.ndarray]] | None = None

    def _next_chunk(self) -> np.ndarray | None:
        return self._back.pop() if self._back else next(self._source, None)

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

    def rewind(self) -> None:
        """Undo the last ``match`` (its query was refused): the stream reads as before it."""
        if self._undo is None:
            raise RuntimeError("no match to rewind")
        self._window, self._done, read = self._undo
        self._back.extend(reversed(read))  # popped from the end: read again in order
        self._undo = None
