"""Packed filters of many field values at once, from their q-gram lists (no per-bit Python).

A field value's filter (before hardening) sets, for its i-th q-gram g of T, the first k_i positions
of g's keyed hash stream (``hashing.SCHEME_FUNCTIONS``): k_i = the field's k, or with a
per-feature budget b, ``b // T`` plus one for the first ``b % T`` grams (``FieldSpec.token_ks``).
``GramStreams`` keeps each distinct gram's stream as a row of one int32 table, computed once per
gram and lengthened when a larger k is needed (a stream's first k positions do not depend on how
many more are drawn). ``GramStreams.value_rows`` then expands every (value, gram, k) triple into
bit positions and sets them in the packed rows (``_numba_bits.set_stream_bits``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain, repeat

import numpy as np

from party.encoding import bits
from party.encoding._numba_bits import set_stream_bits


class GramStreams:
    """gram -> row of a table of hash-stream positions (int32), for one field key and scheme."""

    MAX_GRAMS = 500_000

    def __init__(
        self, position_fn: Callable[[bytes, bytes, int, int], list[int]], key: bytes, nbits: int
    ) -> None:
        self._fn = position_fn
        self._key = key
        self.nbits = nbits
        self.words = bits.words_for(nbits)
        self._clear()

    def _clear(self) -> None:
        self._ids: dict[str, int] = {}
        self._grams: list[str] = []
        self._table = np.zeros((256, 8), dtype=np.int32)
        self._lengths = np.zeros(256, dtype=np.int64)

    def _ids_of(self, grams: list[str]) -> np.ndarray:
        """Row ids of the grams, new grams getting fresh (empty) rows."""
        if len(self._ids) + len(grams) > self.MAX_GRAMS:
            self._clear()
        ids = self._ids
        out = np.fromiter(map(ids.get, grams, repeat(-1)), dtype=np.int64, count=len(grams))
        new = np.flatnonzero(out < 0)
        if new.size:
            for j in new.tolist():
                g = grams[j]
                if g not in ids:
                    ids[g] = len(self._grams)
                    self._grams.append(g)
                out[j] = ids[g]
            rows = len(self._grams)
            if rows > self._table.shape[0]:
                cap = max(rows, 2 * self._table.shape[0])
                table = np.zeros((cap, self._table.shape[1]), dtype=np.int32)
                table[: self._table.shape[0]] = self._table
                self._table = table
                lengths = np.zeros(cap, dtype=np.int64)
                lengths[: self._lengths.size] = self._lengths
                self._lengths = lengths
        return out

    def _ensure(self, gids: np.ndarray, ks: np.ndarray) -> None:
        """Make every gram's stream at least as long as the largest k asked of it."""
        need = np.zeros(len(self._grams), dtype=np.int64)
        np.maximum.at(need, gids, ks)
        short = np.flatnonzero(need > self._lengths[: need.size])
        if not short.size:
            return
        width = int(need[short].max())
        if width > self._table.shape[1]:
            table = np.zeros((self._table.shape[0], max(width, 2 * self._table.shape[1])), np.int32)
            table[:, : self._table.shape[1]] = self._table
            self._table = table
        for g in short.tolist():
            k = int(need[g])
            self._table[g, :k] = self._fn(self._key, self._grams[g].encode("utf-8"), self.nbits, k)
            self._lengths[g] = k

    def value_rows(
        self, gram_lists: Sequence[list[str]], fixed_k: int, budget: int | None
    ) -> np.ndarray:
        """(len(gram_lists), words) uint64 filters: value v sets the first k_i stream positions
        of its i-th gram (k_i = fixed_k, or from the per-feature ``budget``)."""
        m = len(gram_lists)
        counts = np.fromiter(map(len, gram_lists), dtype=np.int64, count=m)
        pairs = int(counts.sum())
        out = np.zeros((m, self.words), dtype=np.uint64)
        if pairs == 0:
            return out
        gids = self._ids_of(list(chain.from_iterable(gram_lists)))
        value_of = np.repeat(np.arange(m), counts)
        if budget is None:
            ks = np.full(pairs, fixed_k, dtype=np.int64)
        else:
            t = counts[value_of]
            index_in_value = np.arange(pairs) - np.repeat(np.cumsum(counts) - counts, counts)
            ks = budget // t + (index_in_value < budget % t)
        self._ensure(gids, ks)
        set_stream_bits(out, value_of, gids, ks, self._table)
        return out
