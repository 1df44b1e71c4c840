"""Packed filters of many field values at once, from their q-gram lists (no per-bit Python).

A field value's filter (before hardening) sets, for its i-th q-gram g of T, the first k_i positions
of g's keyed hash stream (``hashing.SCHEME_FUNCTIONS``): k_i = the field's k, or with a
per-feature budget b, ``b // T`` plus one for the first ``b % T`` grams (``FieldSpec.token_ks``).
``GramStreams`` keeps each distinct gram's stream as a row of one int32 table, computed once per
gram and lengthened when a larger k is needed (a stream's first k positions do not depend on how
many more are drawn). ``GramStreams.value_rows`` then ORs, per value, the packed filters of its
distinct (gram, k) pairs (``or_stream_prefixes``: numpy only, so encoding needs no compiler
start-up).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat

import numpy as np

from party.encoding import bits
from party.encoding.hashing import random_positions, random_positions_rows

_CP_BITS = 21  # a Unicode code point fits in 21 bits
_CP_MASK = (1 << _CP_BITS) - 1


@dataclass(frozen=True)
class GramCodes:
    """The q-grams of m normalised values as integers: ``codes[counts[:i].sum():][:counts[i]]``
    are value i's grams in order, duplicates kept (as ``normalise.qgram_list``). A gram's code is
    its q code points, 21 bits each, first one highest, and for positional grams its index
    above them; ``gram(code)`` is the gram's text, the string the scheme hashes."""

    codes: np.ndarray  # (sum(counts),) int64
    counts: np.ndarray  # (m,) int64
    q: int
    positional: bool

    def gram(self, code: int) -> str:
        q = self.q
        text = "".join(chr((code >> (_CP_BITS * (q - 1 - t))) & _CP_MASK) for t in range(q))
        return f"{code >> (_CP_BITS * q)}:{text}" if self.positional else text


def gram_codes(
    normalised: list[str], q: int, padding: bool, positional: bool, pad: str
) -> GramCodes | None:
    """The q-grams of normalised values as codes (``GramCodes``), computed with a few numpy
    operations over all values' code points at once; None where the codes do not fit in 63 bits
    or a non-empty padded value is shorter than q (``qgram_list`` then makes one short gram).
    Same q-grams as ``normalise.qgram_list(v, q, padding, positional)`` for every value v."""
    if not normalised or q < 1 or _CP_BITS * q > 63:
        return None
    padn = q - 1 if padding and q > 1 else 0
    lens = np.fromiter(map(len, normalised), dtype=np.int64, count=len(normalised))
    window = lens + 2 * padn
    nonempty = lens > 0
    if (window[nonempty] < q).any():
        return None
    counts = np.where(nonempty, window - q + 1, 0)
    if positional and counts.max(initial=0) >= 1 << (63 - _CP_BITS * q):
        return None
    fill = pad * padn
    text = fill + (fill + fill).join(normalised) + fill
    points = np.frombuffer(text.encode("utf-32-le"), dtype="<u4").astype(np.int64)
    total = int(counts.sum())
    starts = np.cumsum(window) - window
    first = np.cumsum(counts) - counts
    index_in_value = np.arange(total, dtype=np.int64) - np.repeat(first, counts)
    at = np.repeat(starts, counts) + index_in_value
    codes = points[at]
    for t in range(1, q):
        codes = (codes << _CP_BITS) | points[at + t]
    if positional:
        codes |= index_in_value << (_CP_BITS * q)
    return GramCodes(codes, counts, q, positional)


_CHUNK_BYTES = 1 << 24  # bounds the temporary arrays of or_stream_prefixes


def or_stream_prefixes(
    out: np.ndarray, counts: np.ndarray, gids: np.ndarray, ks: np.ndarray, table: np.ndarray
) -> None:
    """``out[v] |=`` the bits ``table[gids[p], :ks[p]]`` of every pair p of value v, where the
    pairs are listed value by value, ``counts[v]`` of them for value v (bits.py layout).

    Values share (gram, k) pairs, so the packed filter of each distinct pair is made once (set in
    an unpacked bool block, then ``np.packbits``); then, with the values ordered by their number
    of pairs, slot s ORs the s-th pair's filter into every value that has more than s pairs,
    a prefix of that order. Temporaries are bounded by ``_CHUNK_BYTES`` per block of pairs."""
    if not ks.size:
        return
    words = out.shape[1]
    stride = int(ks.max()) + 1
    key = gids * stride + ks
    span = int(key.max()) + 1
    if span <= 8 * key.size + (1 << 20):  # a dense index of the keys: no sort
        present = np.zeros(span, dtype=bool)
        present[key] = True
        pairs = np.flatnonzero(present)
        index = np.empty(span, dtype=np.int64)
        index[pairs] = np.arange(pairs.size)
        pair_of = index[key]
    else:
        pairs, pair_of = np.unique(key, return_inverse=True)
    pair_gid = pairs // stride
    pair_k = pairs - pair_gid * stride
    rows = np.empty((pairs.size, words), dtype=np.uint64)
    step = max(1, _CHUNK_BYTES // (64 * words))
    for a in range(0, pairs.size, step):
        g, k = pair_gid[a : a + step], pair_k[a : a + step]
        row_of = np.repeat(np.arange(g.size), k)
        j = np.arange(row_of.size) - np.repeat(np.cumsum(k) - k, k)
        unpacked = np.zeros((g.size, 64 * words), dtype=bool)
        unpacked[row_of, table[g[row_of], j]] = True
        rows[a : a + step] = np.packbits(unpacked, axis=1, bitorder="little").view("<u8")
    order = np.argsort(-counts, kind="stable")
    first = (np.cumsum(counts) - counts)[order]
    have = counts[order]
    acc = np.zeros((order.size, words), dtype=np.uint64)
    for slot in range(int(have[0])):
        n = int(np.count_nonzero(have > slot))
        for a in range(0, n, step):
            b = min(n, a + step)
            acc[a:b] |= rows[pair_of[first[a:b] + slot]]
    out[order] |= acc


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
        self._code_keys = np.zeros(0, dtype=np.int64)  # sorted gram codes seen (GramCodes)
        self._code_ids = np.zeros(0, dtype=np.int64)  # their row ids
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
        if self._fn is random_positions:  # one batch of HMACs per number of blocks needed
            blocks = -(-need[short] // 8)
            for b in np.unique(blocks).tolist():
                rows = short[blocks == b]
                k = min(8 * b, self._table.shape[1])
                grams = [self._grams[g].encode("utf-8") for g in rows.tolist()]
                self._table[rows, :k] = random_positions_rows(self._key, grams, self.nbits, k)
                self._lengths[rows] = k
            return
        for g in short.tolist():
            k = int(need[g])
            self._table[g, :k] = self._fn(self._key, self._grams[g].encode("utf-8"), self.nbits, k)
            self._lengths[g] = k

    def _ids_of_codes(self, grams: GramCodes) -> np.ndarray:
        """Row ids of coded grams (as ``_ids_of`` of their texts); only new codes are turned
        into text, once each."""
        codes = grams.codes
        keys = self._code_keys
        at = np.minimum(np.searchsorted(keys, codes), max(keys.size - 1, 0))
        hit = keys[at] == codes if keys.size else np.zeros(codes.size, dtype=bool)
        new = np.unique(codes[~hit])
        if new.size:
            if len(self._ids) + new.size > self.MAX_GRAMS and self._ids:
                self._clear()
                return self._ids_of_codes(grams)
            new_ids = self._ids_of([grams.gram(c) for c in new.tolist()])
            keys = np.concatenate([keys, new])
            order = np.argsort(keys, kind="stable")
            self._code_keys = keys[order]
            self._code_ids = np.concatenate([self._code_ids, new_ids])[order]
            at = np.searchsorted(self._code_keys, codes)
        return self._code_ids[at]

    def value_rows(
        self, gram_lists: Sequence[list[str]] | GramCodes, fixed_k: int, budget: int | None
    ) -> np.ndarray:
        """(m, words) uint64 filters of m values given as their q-gram lists (or ``GramCodes``):
        value v sets the first k_i stream positions of its i-th gram (k_i = fixed_k, or from the
        per-feature ``budget``)."""
        if isinstance(gram_lists, GramCodes):
            counts = gram_lists.counts
            m = counts.size
        else:
            m = len(gram_lists)
            counts = np.fromiter(map(len, gram_lists), dtype=np.int64, count=m)
        pairs = int(counts.sum())
        out = np.zeros((m, self.words), dtype=np.uint64)
        if pairs == 0:
            return out
        if isinstance(gram_lists, GramCodes):
            gids = self._ids_of_codes(gram_lists)
        else:
            gids = self._ids_of(list(chain.from_iterable(gram_lists)))
        value_of = np.repeat(np.arange(m), counts)
        if budget is None:
            ks = np.full(pairs, fixed_k, dtype=np.int64)
        else:
            t = counts[value_of]
            index_in_value = np.arange(pairs) - np.repeat(np.cumsum(counts) - counts, counts)
            ks = budget // t + (index_in_value < budget % t)
        self._ensure(gids, ks)
        or_stream_prefixes(out, counts, gids, ks, self._table)
        return out
