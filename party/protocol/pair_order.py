"""The group solver's visiting order of matched pairs, held in memory as one sorted int64 per pair.

The solver (``party.protocol.components``) visits matched pairs by descending Dice, ties by the
smaller node, then the larger node. Sorting them as (~Dice bits, node a, node b) rows in a spilling
``RowStore`` costs a lexsort of three columns and, beyond the store's gauge, an external merge: at
all pairs of two FEBRL4 parties (22.8 M matched pairs) most of a run's time. ``MemoryOrder`` holds
the same order in 8 bytes per pair instead:

- while pairs arrive, their ends and Dice are kept as they come (16 bytes per pair, reserved on a
  gauge chunk by chunk; ``add`` returns False when the gauge refuses, and the caller falls back to
  the store, taking the pairs held so far from ``drain``);
- ``finish`` collects the distinct Dice values D (few: Dice = 2c / x with c <= l, x <= 2l), and
  writes each pair as ``(|D| - 1 - rank of its Dice) * n^2 + a * n + b`` (n = the number of nodes;
  refused when that does not fit in an int64), then sorts that array in place: increasing values
  are the solver's order. Equal values (the same pair twice) are read once, as the sorted store's
  de-duplication does;
- ``chunks`` reads (a, b, Dice) back in that order, a bounded number at a time.

Every byte held is reserved on the gauge first and released by ``close``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from party.protocol.spill import MemoryGauge

#: Bytes per pair while pairs arrive (ends as int64 key, Dice float64).
HELD_BYTES_PER_PAIR = 16
#: Bytes per pair of the sorted order (one int64).
ORDER_BYTES_PER_PAIR = 8
_MAX = np.iinfo(np.int64).max


class MemoryOrder:
    """Matched pairs of ``nodes`` nodes in the solver's order, in memory (module docstring)."""

    def __init__(self, nodes: int, gauge: MemoryGauge) -> None:
        self.nodes = int(nodes)
        self.gauge = gauge
        self._keys: list[np.ndarray] = []  # a * n + b per pair, as they arrive
        self._dice: list[np.ndarray] = []
        self._held = 0
        self._order: np.ndarray | None = None
        self._values = np.zeros(0, dtype=np.float64)  # distinct Dice, increasing
        self.pairs = 0  # after finish: distinct pairs

    @property
    def finished(self) -> bool:
        return self._order is not None

    def add(self, a: np.ndarray, b: np.ndarray, dice: np.ndarray) -> bool:
        """Hold pairs (a < b node numbers, Dice >= 0); False (nothing held) when the gauge refuses."""
        if self._order is not None:
            raise RuntimeError("the order is finished")
        if a.shape[0] == 0:
            return True
        need = HELD_BYTES_PER_PAIR * int(a.shape[0])
        if not self.gauge.try_reserve(need):
            return False
        self._held += need
        n = np.int64(self.nodes)
        self._keys.append(a.astype(np.int64) * n + b.astype(np.int64))
        self._dice.append(np.asarray(dice, dtype=np.float64) + 0.0)  # +0.0: no -0
        return True

    def drain(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The pairs held so far as (a, b, Dice) chunks, in arrival order, releasing them."""
        n = np.int64(self.nodes)
        while self._keys:
            key, dice = self._keys.pop(0), self._dice.pop(0)
            yield key // n, key % n, dice
            self._release(HELD_BYTES_PER_PAIR * int(key.shape[0]))

    def finish(self) -> bool:
        """Sort the held pairs into the solver's order; False (pairs still held, for ``drain``)
        when the gauge refuses the order's array or the encoding does not fit in an int64."""
        total = sum(int(k.shape[0]) for k in self._keys)
        values = np.unique(np.concatenate([np.unique(d) for d in self._dice] or [np.zeros(0)]))
        square = self.nodes * self.nodes
        if self.nodes and values.size * square > _MAX:
            return False
        need = ORDER_BYTES_PER_PAIR * total
        if not self.gauge.try_reserve(need):
            return False
        self._held += need
        order = np.empty(total, dtype=np.int64)
        at = 0
        top = np.int64(values.size - 1)
        while self._keys:
            key, dice = self._keys.pop(0), self._dice.pop(0)
            rank = top - np.searchsorted(values, dice).astype(np.int64)
            order[at : at + key.shape[0]] = rank * np.int64(square) + key
            at += key.shape[0]
            self._release(HELD_BYTES_PER_PAIR * int(key.shape[0]))
        order.sort()
        self._order, self._values = order, values
        self.pairs = total - int(np.count_nonzero(order[1:] == order[:-1]))
        return True

    def chunks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The distinct pairs in the solver's order as (a, b, Dice) chunks of at most ``rows``."""
        if self._order is None:
            raise RuntimeError("the order is not finished")
        order, values = self._order, self._values
        square, n = np.int64(self.nodes * self.nodes), np.int64(self.nodes)
        top = values.size - 1
        rows = max(1, int(rows))
        for lo in range(0, order.shape[0], rows):
            part = order[lo : lo + rows]
            first = np.ones(part.shape[0], dtype=bool)
            first[1:] = part[1:] != part[:-1]
            if lo:
                first[0] = part[0] != order[lo - 1]
            part = part[first]
            pair = part % square
            yield pair // n, pair % n, values[top - part // square]

    def _release(self, nbytes: int) -> None:
        self.gauge.release(nbytes)
        self._held -= nbytes

    def close(self) -> None:
        """Free everything held and release it on the gauge."""
        self._keys, self._dice, self._order = [], [], None
        self.gauge.release(self._held)
        self._held = 0
