"""The group solver's visiting order of matched pairs, held in memory as one sorted int64 per pair.

The solver (``party.protocol.components``) visits matched pairs by descending Dice, ties by the
smaller node, then the larger node. Sorting them as (~Dice bits, node a, node b) rows in a spilling
``RowStore`` costs a lexsort of three columns and, beyond the store's gauge, an external merge: at
all pairs of two FEBRL4 parties (22.8 M matched pairs) most of a run's time. ``MemoryOrder`` holds
the same order in 8 bytes per pair instead:

- while pairs arrive, their ends and Dice are kept as they come (16 bytes per pair, reserved on a
  gauge chunk by chunk; ``add`` returns False when the gauge refuses, and the caller falls back to
  the store, taking the pairs held so far from ``drain``);
- ``finish`` collects the distinct Dice values D (few: Dice = 2c / x with c <= l, x <= 2l; in a
  compiled hash table, ``party.protocol._numba_order``), and writes each pair as
  ``(|D| - 1 - rank of its Dice) * 2^(2k) + a * 2^k + b`` (2^k >= n, the number of nodes), or,
  when that does not fit in an int64, as ``(|D| - 1 - rank) * n^2 + a * n + b`` (refused when
  neither fits), then sorts that array in place: increasing values are the solver's order (both
  forms order the pairs alike). Equal values (the same pair twice) are read once, as the sorted
  store's de-duplication does;
- ``chunks`` reads (a, b, Dice) back in that order, a bounded number at a time (the first form
  by shifts and masks in one compiled pass, ``_numba_order.decode_shifts``; no division).

Every byte held is reserved on the gauge first and released by ``close``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from party.protocol._numba_order import EMPTY, decode_shifts, dice_insert, order_keys
from party.protocol.spill import MemoryGauge

#: Bytes per pair while pairs arrive (ends as int64 key, Dice float64).
HELD_BYTES_PER_PAIR = 16
#: Bytes per pair of the sorted order (one int64).
ORDER_BYTES_PER_PAIR = 8
_MAX = np.iinfo(np.int64).max
#: Slots of the distinct Dice table at first (it doubles when half full).
_FIRST_SLOTS = 1 << 10


class MemoryOrder:
    """Matched pairs of ``nodes`` nodes in the solver's order, in memory (module docstring)."""

    def __init__(self, nodes: int, gauge: MemoryGauge) -> None:
        self.nodes = int(nodes)
        self.gauge = gauge
        # a pair's ends as a << bits | b while held (nodes < 2^31: at most 62 bits)
        self._bits = max(1, (self.nodes - 1).bit_length())
        self._keys: list[np.ndarray] = []  # a << bits | b per pair, as they arrive
        self._dice: list[np.ndarray] = []
        self._held = 0
        self._order: np.ndarray | None = None
        self._values = np.zeros(0, dtype=np.float64)  # distinct Dice, increasing
        self._high = 0  # the rank's multiplier in the order's values
        self._shifts = True  # the order's values are rank << 2 bits | a << bits | b
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
        key = a.astype(np.int64) << np.int64(self._bits)
        key |= b.astype(np.int64)
        self._keys.append(key)
        self._dice.append(np.asarray(dice, dtype=np.float64) + 0.0)  # +0.0: no -0
        return True

    def _ends(self, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(a, b) of held keys."""
        return key >> np.int64(self._bits), key & np.int64((1 << self._bits) - 1)

    def drain(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The pairs held so far as (a, b, Dice) chunks, in arrival order, releasing them."""
        while self._keys:
            key, dice = self._keys.pop(0), self._dice.pop(0)
            a, b = self._ends(key)
            yield a, b, dice
            self._release(HELD_BYTES_PER_PAIR * int(key.shape[0]))

    def _distinct(self) -> np.ndarray | None:
        """The hash table of the held pairs' distinct Dice bit patterns (``_numba_order``), its
        bytes held on the gauge; None when the gauge refuses it."""
        table = np.full(_FIRST_SLOTS, EMPTY, dtype=np.uint64)
        if not self.gauge.try_reserve(table.nbytes):
            return None
        self._held += table.nbytes
        count = 0
        for dice in self._dice:
            at = 0
            while at < dice.shape[0]:
                at, count = dice_insert(table, dice, at, count)
                if at < dice.shape[0]:  # half full: a table twice the size
                    if not self.gauge.try_reserve(2 * table.nbytes):
                        return None
                    self._held += 2 * table.nbytes
                    bigger = np.full(2 * table.shape[0], EMPTY, dtype=np.uint64)
                    old = table[table != EMPTY].view(np.float64)
                    _, count = dice_insert(bigger, old, 0, 0)
                    self._release(table.nbytes)
                    table = bigger
        return table

    def finish(self) -> bool:
        """Sort the held pairs into the solver's order; False (pairs still held, for ``drain``)
        when the gauge refuses the order's array or the encoding does not fit in an int64."""
        total = sum(int(k.shape[0]) for k in self._keys)
        held_before = self._held
        table = self._distinct()
        if table is None:
            self._release(self._held - held_before)
            return False
        occupied = np.flatnonzero(table != EMPTY)
        values = np.sort(table[occupied]).view(np.float64)  # Dice >= 0: bits order like values
        rank_bits = max(0, values.size - 1).bit_length()
        square = self.nodes * self.nodes
        shifts = rank_bits + 2 * self._bits <= 63
        if not shifts and self.nodes and values.size * square > _MAX:
            self._release(self._held - held_before)
            return False
        for need in (table.nbytes, ORDER_BYTES_PER_PAIR * total):  # the slots' ranks, the order
            if not self.gauge.try_reserve(need):
                self._release(self._held - held_before)
                return False
            self._held += need
        rank = np.zeros(table.shape[0], dtype=np.int64)
        top = np.int64(values.size - 1)
        rank[occupied] = top - np.searchsorted(values, table[occupied].view(np.float64))
        high = np.int64(1 << (2 * self._bits)) if shifts else np.int64(square)
        order = np.empty(total, dtype=np.int64)
        at = 0
        while self._keys:
            key, dice = self._keys.pop(0), self._dice.pop(0)
            if not shifts:  # a * n + b
                a, b = self._ends(key)
                key = a * np.int64(self.nodes) + b
            order_keys(table, rank, dice, key, high, order[at : at + key.shape[0]])
            at += key.shape[0]
            self._release(HELD_BYTES_PER_PAIR * int(key.shape[0]))
        del rank, table
        self._release(self._held - ORDER_BYTES_PER_PAIR * total)  # the order stays held
        order.sort()
        self._order, self._values = order, values
        self._high, self._shifts = int(high), shifts
        self.pairs = total - int(np.count_nonzero(order[1:] == order[:-1]))
        return True

    def chunks(self, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The distinct pairs in the solver's order as (a, b, Dice) chunks of at most ``rows``."""
        if self._order is None:
            raise RuntimeError("the order is not finished")
        order, values = self._order, self._values
        top = values.size - 1
        rows = max(1, int(rows))
        high, n = np.int64(self._high), np.int64(self.nodes)
        for lo in range(0, order.shape[0], rows):
            part = order[lo : lo + rows]
            if self._shifts:  # one compiled pass: the ends, the Dice, repeats skipped
                a = np.empty(part.shape[0], dtype=np.int64)
                b = np.empty(part.shape[0], dtype=np.int64)
                dice = np.empty(part.shape[0], dtype=np.float64)
                before = order[lo - 1] if lo else np.int64(-1)
                got = decode_shifts(part, before, np.int64(self._bits), values, a, b, dice)
                yield a[:got], b[:got], dice[:got]
                continue
            first = np.ones(part.shape[0], dtype=bool)  # rank * n^2 + a * n + b
            first[1:] = part[1:] != part[:-1]
            if lo:
                first[0] = part[0] != order[lo - 1]
            if not first.all():
                part = part[first]
            pair = part % high
            yield pair // n, pair % n, values[top - part // high]

    def _release(self, nbytes: int) -> None:
        self.gauge.release(nbytes)
        self._held -= nbytes

    def close(self) -> None:
        """Free everything held and release it on the gauge."""
        self._keys, self._dice, self._order = [], [], None
        self.gauge.release(self._held)
        self._held = 0
