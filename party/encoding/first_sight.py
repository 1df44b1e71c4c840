"""First sight of distinct values, computed once and shared between an encoder's worker copies.

Most of the encoder's cost is first sight: the first time an encoder meets a raw field value it
normalises it, hashes its q-grams into a value filter, and computes the part blocks X(part value)
of every blocking-key part taken of that column; afterwards a record costs a table gather, an OR and
one AES call per key. Workers that encode different rows of one CSV meet mostly the same names,
dates of birth and towns, so each would pay first sight of them again.

Instead the parent finds each batch's values it has not yet handed out (``SeenValues``) and cuts
the work into one share per worker (``SightPlanner``). The work units are one feature's value
filters and one blocking part memo's blocks. A column's units go to a worker together, so each
value is normalised once (the memo is shared by a column's filter and parts), and a column stays
whole where it can, so that the keyed hash streams of a feature's q-grams (shared by many of its
values) are computed by one worker; a column is cut by values only where it would overfill a
worker's share. Shares are balanced by CPU seconds
per value that the workers measure and report, unit by unit. Every worker computes the entries
of its share (``compute_entries``: the encoder's own memo code, so each entry is exactly what
that encoder would store) and installs the entries the other workers computed
(``install_entries``). Entries only warm memo tables: an encoder that lacks one (never sent, or
trimmed) computes it itself, so the output never depends on them.

Entries: per unsalted feature, the raw values with their memo code (a filter-table row, the empty
filter, or a negative status) and the filter rows; per distinct blocking part memo, the raw values
(valid UTF-8 only: invalid ones are left for the batch, which reports them) and their 16-byte
blocks. Salted features (memo keys are value pairs) and LSH keys (per record) have no entries.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from party.encoding._numba_bits import byte_polynomials
from party.encoding.blocking import BlockingKeyer
from party.encoding.encoder import Encoder, _Batch
from party.encoding.normalise import valid_text


@dataclass
class SightEntries:
    """Memo entries for one share of new values (picklable; holds no secret)."""

    filters: dict[str, tuple[list[str], np.ndarray, np.ndarray]] = field(default_factory=dict)
    # feature -> (values, codes (row > 0: has a filter row), filter rows of the codes > 0)
    parts: dict[int, tuple[list[str], np.ndarray]] = field(default_factory=dict)
    # part memo number -> (values, their (n, 2) uint64 blocks)
    seconds: dict[Unit, tuple[int, float]] = field(default_factory=dict)
    # unit -> (values, CPU seconds) as computed

    def __len__(self) -> int:
        return sum(len(v[0]) for v in self.filters.values()) + sum(
            len(v[0]) for v in self.parts.values()
        )


def part_memos(encoder: Encoder) -> list[tuple[BlockingKeyer, int, str]]:
    """The distinct part memos of the encoder's blocking keys (parts shared by several keys
    share a memo), in schema order: (a keyer using it, its part index, the column)."""
    out: list[tuple[BlockingKeyer, int, str]] = []
    seen: set[int] = set()
    for keyer in encoder._blockers:
        if not isinstance(keyer, BlockingKeyer):
            continue
        for i, memo in enumerate(keyer._part_memo):
            if id(memo) not in seen:
                seen.add(id(memo))
                out.append((keyer, i, keyer.columns[i]))
    return out


Unit = tuple[str, Any]  # ("filter", feature name) or ("part", part memo number)
RawValues = Any  # distinct raw values of a column: list[bytes], or an arrow binary array


def sight_units(encoder: Encoder) -> dict[Unit, str]:
    """The work units of first sight (unsalted features' filters, blocking part memos), each
    with the input column whose values it takes."""
    units: dict[Unit, str] = {
        ("filter", name): codec.spec.source_column
        for name, codec in encoder._codecs.items()
        if not codec.salted
    }
    for m, (_, _, column) in enumerate(part_memos(encoder)):
        units[("part", m)] = column
    return units


def sight_columns(encoder: Encoder) -> tuple[str, ...]:
    """The input columns whose values have first-sight work (unsalted features, blocking parts)."""
    return tuple(dict.fromkeys(sight_units(encoder).values()))


def _all_valid(values: list[str]) -> bool:
    return "".join(values).isascii() or all(map(valid_text, values))


def _decode(raw: RawValues) -> list[str]:
    """Raw values (bytes, or an arrow binary array) as the encoder decodes a CSV's cells."""
    if not isinstance(raw, list):
        try:
            return list(raw.cast(pa.string()).to_pylist())  # valid UTF-8, checked in C
        except pa.ArrowInvalid:
            raw = raw.to_pylist()
    return [b.decode("utf-8", "surrogateescape") for b in raw]


def compute_entries(encoder: Encoder, work: dict[Unit, RawValues]) -> SightEntries:
    """The memo entries of ``work`` (unit -> distinct raw values of its column as bytes, decoded
    here as the encoder decodes a CSV), computed by ``encoder`` (and left in its memo tables),
    with the CPU seconds each unit took."""
    out = SightEntries()
    memos = part_memos(encoder)
    decoded: dict[int, list[str]] = {}  # units given the same list share one decoded list
    for unit, raw in work.items():
        c0 = time.process_time()
        vals = decoded.get(id(raw))
        if vals is None:
            vals = decoded[id(raw)] = _decode(raw)
        kind, which = unit
        valid = _all_valid(vals)
        if kind == "filter":
            codec = encoder._codecs[which]
            codes = codec.codes_for_keys(vals, checked=valid)
            out.filters[which] = (vals, codes, codec.table[codes[codes > 0]])
        else:
            keyer, i, _ = memos[which]
            if not valid:  # invalid values are left to the batch, which reports them
                vals = [v for v in vals if valid_text(v)]
            if vals:
                out.parts[which] = (vals, keyer._part_blocks(i, vals))
        out.seconds[unit] = (len(raw), time.process_time() - c0)
    return out


def install_entries(encoder: Encoder, entries: SightEntries) -> None:
    """Add another lane's entries to ``encoder``'s memo tables. A value already there (which
    this lane computed itself) gets an identical entry, so plain updates are enough."""
    for name, (vals, codes, rows) in entries.filters.items():
        codec = encoder._codecs[name]
        has_row = codes > 0
        first = codec._store_rows(rows)
        new = codes.copy()
        new[has_row] = np.arange(first, first + rows.shape[0])
        codec.index.update(zip(vals, new.tolist(), strict=True))
    memos = part_memos(encoder)
    for m, (vals, blocks) in entries.parts.items():
        keyer, i, _ = memos[m]
        column = keyer._column_ids[i]
        ids = column.of(vals)
        memo = keyer._part_memo[i]
        memo.fit(column.generation, len(column.ids))
        memo.blocks[ids] = blocks
        memo.done[ids] = True


class SeenValues:
    """The parent's record of the values already handed out, per column, as raw bytes (bounded:
    a column's set is forgotten when it grows past ``cap``, after which values are handed out
    again)."""

    def __init__(self, columns: tuple[str, ...], cap: int = 200_000) -> None:
        self._seen: dict[str, set[bytes]] = {c: set() for c in columns}
        self._hashes: dict[str, np.ndarray] = {}  # new_in's record: sorted value hashes
        self._cap = cap

    def new_values(self, batch: _Batch) -> dict[str, list[bytes]]:
        """Each watched column's distinct values in ``batch`` not handed out before."""
        out: dict[str, list[bytes]] = {}
        for column, seen in self._seen.items():
            new = _distinct(batch, column).difference(seen)
            if not new:
                continue
            if len(seen) + len(new) > self._cap:
                seen.clear()
            seen.update(new)
            out[column] = sorted(new)
        return out

    def new_of(self, batch: _Batch) -> dict[str, Any]:
        """``new_values`` of a batch; for a batch pyarrow parsed, by hash (``new_in``: each
        column's distinct values found in C, compared in numpy, no Python object per value)."""
        if batch.arrow is None:
            return self.new_values(batch)
        assert batch.arrow_names is not None
        distinct = {}
        for column in self._seen:
            values = pc.unique(batch.arrow.column(batch.arrow_names[column]))
            distinct[column] = (values, value_hashes(values))
        return self.new_in(distinct)

    def new_in(self, distinct: dict[str, tuple[Any, np.ndarray]]) -> dict[str, Any]:
        """Like ``new_values``, from each column's distinct raw values as an arrow binary array
        with their ``value_hashes`` (as a lane that parsed the rows reports them); the new
        values stay arrow arrays (``compute_entries`` decodes them in C). Values are compared
        by hash, in numpy. Two values with the same hash count as one: the second
        is not handed out and the lane that meets it computes it itself (a cost, never a
        different output)."""
        out: dict[str, list[bytes]] = {}
        for column, (values, hashes) in distinct.items():
            held = self._hashes.get(column, _NO_HASHES)
            at = np.searchsorted(held, hashes)
            known = np.zeros(hashes.shape, dtype=bool)
            if held.size:
                known = held[np.minimum(at, held.size - 1)] == hashes
            if known.all():
                continue
            fresh = np.unique(hashes[~known])
            if held.size + fresh.size > self._cap:
                self._hashes[column] = fresh
            else:
                self._hashes[column] = np.insert(held, np.searchsorted(held, fresh), fresh)
            out[column] = values.filter(pa.array(~known))
        return out


_NO_HASHES = np.zeros(0, dtype=np.uint64)
_HASH_BASE = np.uint64(0x100000001B3)
_HASH_POWERS = (
    np.cumprod(np.full(1 << 12, _HASH_BASE, dtype=np.uint64)) * _HASH_BASE
)  # powers of the base


def value_hashes(values: Any) -> np.ndarray:
    """A 64-bit hash of every value of an arrow binary array (a compiled loop): a polynomial
    in the bytes (byte j of a value times the base to the power 2 + j % 4096, wrapping) mixed
    with the length. Not a secret and not collision-resistant: used only to skip values
    already handed out (``SeenValues.new_in``)."""
    n = len(values)
    if n == 0:
        return _NO_HASHES
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + n + 1
    ]
    h = np.empty(n, dtype=np.uint64)
    data = values.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    byte_polynomials(offsets, data, _HASH_POWERS, h)
    h ^= np.diff(offsets).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(31)
    return h


def _distinct(batch: _Batch, column: str) -> set[bytes]:
    """A batch column's distinct raw values (the bytes of the CSV cell)."""
    if batch.arrow is not None:
        assert batch.arrow_names is not None
        array: Any = pc.unique(batch.arrow.column(batch.arrow_names[column]))
        return set(array.to_pylist())
    return {v.encode("utf-8", "surrogateescape") for v in batch.columns[column].uniques}


class SightPlanner:
    """Cuts a batch's new values into one share of work per lane, balanced by the CPU seconds
    per value each unit took so far (a default before the first report). A column's units go
    together: a lane that gets some of a column's values computes every unit of that column for
    them, so each value is decoded and normalised once (the encoder's normalisation memo is
    shared by a column's filter and its blocking parts). Columns largest first, each to the
    least loaded lane, cut by values only where it would overfill that lane's share (so at most
    lanes - 1 columns are cut)."""

    DEFAULT_SECONDS = {"filter": 1e-5, "part": 2e-6}  # per value, before any measurement

    def __init__(self, units: dict[Unit, str], lanes: int) -> None:
        self.units = units
        self.lanes = lanes
        self.per_value = {u: self.DEFAULT_SECONDS[u[0]] for u in units}
        self.measured = False  # True once a lane has reported costs
        self.column_units: dict[str, list[Unit]] = {}
        for unit, column in units.items():
            self.column_units.setdefault(column, []).append(unit)

    def learn(self, seconds: dict[Unit, tuple[int, float]]) -> None:
        """Fold a lane's measured (values, CPU seconds) per unit into the estimates."""
        for unit, (count, cpu) in seconds.items():
            if count and unit in self.per_value:
                self.measured = True
                self.per_value[unit] = 0.5 * self.per_value[unit] + 0.5 * cpu / count

    def shares(self, new: dict[str, RawValues]) -> list[dict[Unit, RawValues]]:
        """One work share per lane: every (unit, new value of its column) exactly once."""
        items = [
            (sum(self.per_value[u] for u in units) * len(new[c]), c, new[c])
            for c, units in self.column_units.items()
            if new.get(c)
        ]
        out: list[dict[Unit, RawValues]] = [{} for _ in range(self.lanes)]
        target = sum(cost for cost, _, _ in items) / self.lanes
        load = [0.0] * self.lanes
        for cost, column, vals in sorted(items, key=lambda item: -item[0]):  # largest first
            while vals:
                w = load.index(min(load))
                room = target - load[w]
                take = len(vals)
                if cost > 1.02 * room and room > 0:  # cut: fill this lane up to its share
                    take = max(1, round(len(vals) * room / cost))
                piece = cost * take / len(vals)
                first = self.column_units[column][0]
                mine = vals if take == len(vals) else vals[:take]
                if first in out[w]:  # a second piece of this column for the same lane
                    held = out[w][first]
                    mine = held + mine if isinstance(held, list) else pa.concat_arrays([held, mine])
                for unit in self.column_units[column]:  # one list (decoded once in the lane)
                    out[w][unit] = mine
                load[w] += piece
                vals, cost = vals[take:], cost - piece
        return out
