"""First sight of distinct values, computed once and shared between an encoder's worker copies.

Most of the encoder's cost is first sight: the first time an encoder meets a raw field value it
normalises it, hashes its q-grams into a value filter, and computes the part blocks X(part value)
of every blocking-key part taken of that column; afterwards a record costs a table gather, an OR and
one AES call per key. Workers that encode different rows of one CSV meet mostly the same names,
dates of birth and towns, so each would pay first sight of them again.

Instead the parent finds each batch's values it has not yet handed out (``SeenValues``), splits
them into one share per worker, and every worker computes the entries of its share
(``compute_entries``: the encoder's own memo code, so each entry is exactly what that encoder
would store) and installs the entries the other workers computed (``install_entries``). Entries
only warm memo tables: an encoder that lacks one (never sent, or trimmed) computes it itself, so
the output never depends on them.

Entries: per unsalted feature, the raw values with their memo code (a filter-table row, the empty
filter, or a negative status) and the filter rows; per distinct blocking part memo, the raw values
(valid UTF-8 only: invalid ones are left for the batch, which reports them) and their 16-byte
blocks. Salted features (memo keys are value pairs) and LSH keys (per record) have no entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow.compute as pc

from party.encoding.blocking import BlockingKeyer
from party.encoding.encoder import Encoder, _Batch
from party.encoding.normalise import valid_text

T = TypeVar("T")


@dataclass
class SightEntries:
    """Memo entries for one share of new values (picklable; holds no secret)."""

    filters: dict[str, tuple[list[str], np.ndarray, np.ndarray]] = field(default_factory=dict)
    # feature -> (values, codes (row > 0: has a filter row), filter rows of the codes > 0)
    parts: dict[int, tuple[list[str], list[bytes]]] = field(default_factory=dict)
    # part memo number -> (values, their blocks)

    def __len__(self) -> int:
        return sum(len(v[0]) for v in self.filters.values()) + sum(
            len(v[0]) for v in self.parts.values()
        )


def _part_memos(encoder: Encoder) -> list[tuple[dict[str, bytes], BlockingKeyer, int, str]]:
    """The distinct part memos of the encoder's blocking keys (parts shared by several keys
    share a memo), in schema order: (memo, a keyer using it, its part index, the column)."""
    out: list[tuple[dict[str, bytes], BlockingKeyer, int, str]] = []
    seen: set[int] = set()
    for keyer in encoder._blockers:
        if not isinstance(keyer, BlockingKeyer):
            continue
        for i, memo in enumerate(keyer._block_memo):
            if id(memo) not in seen:
                seen.add(id(memo))
                out.append((memo, keyer, i, keyer.columns[i]))
    return out


def sight_columns(encoder: Encoder) -> tuple[str, ...]:
    """The input columns whose values have first-sight work (unsalted features, blocking parts)."""
    cols = [c.spec.source_column for c in encoder._codecs.values() if not c.salted]
    cols += [column for _, _, _, column in _part_memos(encoder)]
    return tuple(dict.fromkeys(cols))


def compute_entries(encoder: Encoder, raw: dict[str, list[bytes]]) -> SightEntries:
    """The memo entries of ``raw`` (column -> distinct raw values as bytes, decoded here as the
    encoder decodes a CSV), computed by ``encoder`` (and left in its memo tables)."""
    out = SightEntries()
    values = {c: [b.decode("utf-8", "surrogateescape") for b in vals] for c, vals in raw.items()}
    for name, codec in encoder._codecs.items():
        vals = values.get(codec.spec.source_column)
        if codec.salted or not vals:
            continue
        codes = codec.codes_for_keys(vals)
        out.filters[name] = (vals, codes, codec.table[codes[codes > 0]])
    for m, (memo, keyer, i, column) in enumerate(_part_memos(encoder)):
        vals = [v for v in values.get(column, ()) if valid_text(v)]
        if vals:
            keyer._part_blocks(i, vals)  # fills the memo
            out.parts[m] = (vals, list(map(memo.__getitem__, vals)))
    return out


def install_entries(encoder: Encoder, entries: SightEntries) -> None:
    """Add another lane's entries to ``encoder``'s memo tables. A value already there (which
    this lane computed itself) gets an identical entry, so a plain update in C is enough."""
    for name, (vals, codes, rows) in entries.filters.items():
        codec = encoder._codecs[name]
        has_row = codes > 0
        first = codec._store_rows(rows)
        new = codes.copy()
        new[has_row] = np.arange(first, first + rows.shape[0])
        codec.index.update(zip(vals, new.tolist(), strict=True))
    memos = _part_memos(encoder)
    for m, (vals, blocks) in entries.parts.items():
        memos[m][0].update(zip(vals, blocks, strict=True))


class SeenValues:
    """The parent's record of the values already handed out, per column, as raw bytes (bounded:
    a column's set is forgotten when it grows past ``cap``, after which values are handed out
    again)."""

    def __init__(self, columns: tuple[str, ...], cap: int = 200_000) -> None:
        self._seen: dict[str, set[bytes]] = {c: set() for c in columns}
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


def _distinct(batch: _Batch, column: str) -> set[bytes]:
    """A batch column's distinct raw values (the bytes of the CSV cell)."""
    if batch.arrow is not None:
        assert batch.arrow_names is not None
        array: Any = pc.unique(batch.arrow.column(batch.arrow_names[column]))
        return set(array.to_pylist())
    return {v.encode("utf-8", "surrogateescape") for v in batch.columns[column].uniques}


def split_shares(values: dict[str, list[T]], shares: int) -> list[dict[str, list[T]]]:
    """``values`` cut into ``shares`` parts of about equal size per column."""
    out: list[dict[str, list[T]]] = [{} for _ in range(shares)]
    for column, vals in values.items():
        bounds = np.linspace(0, len(vals), shares + 1).round().astype(int).tolist()
        for s in range(shares):
            if bounds[s] < bounds[s + 1]:
                out[s][column] = vals[bounds[s] : bounds[s + 1]]
    return out
