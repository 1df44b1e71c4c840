"""Uniqueness (singling out): exact crowd sizes of records over column combinations, vectorised.

Every measure here is an exact count, never an estimate. A record's *crowd* over a set of columns is the
number of records (itself included) that share its combination of values; a record is *alone* when its
crowd is 1 and *below k* when its crowd is smaller than k (k-anonymity's threshold, Sweeney 2002).

Method: each column is factorised once into dense int64 codes; columns are combined incrementally
(``a * card_b + b``, which is exact and fits int64 while both cardinalities are at most the number of
records) and re-factorised with ``np.unique(return_inverse=True)``. When the product of cardinalities is
small the counts come from ``np.bincount`` instead of a sort. The greedy climb only re-factorises the
column it chooses, so 1,000,000 rows x 13 columns take seconds.

The same machinery measures packed bit rows (blocking digests, segments, filters): each 64-bit word is a
column, so two rows share a crowd exactly when all their words are equal.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from party.audit.stats import Rate
from party.errors import PprlError

log = logging.getLogger(__name__)

DEFAULT_K = 5
# Below this product of cardinalities (per record), counts come from bincount rather than a sort.
_BINCOUNT_FACTOR = 8


class UniquenessError(PprlError, ValueError):
    """Bad input to a uniqueness measure (unknown column, empty column list, bad k, unreadable CSV)."""


@dataclass(frozen=True)
class Codes:
    """Dense codes 0..card-1 of one column or column combination."""

    codes: np.ndarray  # (n,) int64
    card: int


def factorize(values: Sequence[Any] | np.ndarray) -> Codes:
    """Dense int64 codes of a column (any hashable values; numeric arrays use a sort)."""
    arr = values if isinstance(values, np.ndarray) else None
    if arr is not None and arr.ndim != 1:
        raise UniquenessError(f"a column must be 1-D, got shape {arr.shape}")
    if arr is not None and arr.dtype.kind in "biuf":
        if arr.size == 0:
            return Codes(np.zeros(0, dtype=np.int64), 0)
        uniq, inv = np.unique(arr, return_inverse=True)
        return Codes(inv.astype(np.int64, copy=False).reshape(-1), int(uniq.size))
    seen: dict[Any, int] = {}
    setdefault = seen.setdefault
    seq = arr.tolist() if arr is not None else values
    codes = np.fromiter((setdefault(v, len(seen)) for v in seq), dtype=np.int64, count=len(seq))
    return Codes(codes, len(seen))


def _pair_key(a: Codes, b: Codes) -> tuple[np.ndarray, int]:
    # a.card and b.card are each <= n <= 2**31 in practice, so the product fits int64.
    return a.codes * np.int64(max(b.card, 1)) + b.codes, max(a.card, 1) * max(b.card, 1)


def combine(a: Codes, b: Codes) -> Codes:
    """Exact codes of the combination (a, b), re-factorised to 0..card-1."""
    if a.codes.shape != b.codes.shape:
        raise UniquenessError("columns have different lengths")
    key, space = _pair_key(a, b)
    n = key.size
    if n == 0:
        return Codes(key, 0)
    if space <= _BINCOUNT_FACTOR * n:
        present = np.bincount(key, minlength=space) > 0
        remap = np.cumsum(present, dtype=np.int64) - 1
        return Codes(remap[key], int(present.sum()))
    uniq, inv = np.unique(key, return_inverse=True)
    return Codes(inv.astype(np.int64, copy=False).reshape(-1), int(uniq.size))


def crowd_sizes(codes: Codes) -> np.ndarray:
    """Each record's crowd size (records sharing its code, itself included), int64."""
    if codes.codes.size == 0:
        return np.zeros(0, dtype=np.int64)
    counts = np.bincount(codes.codes, minlength=codes.card)
    return counts[codes.codes].astype(np.int64, copy=False)


def _pair_crowds(a: Codes | None, b: Codes) -> tuple[np.ndarray, int]:
    """Crowd sizes and group count of the combination (a, b) without building its codes."""
    if a is None:
        return crowd_sizes(b), b.card
    key, space = _pair_key(a, b)
    n = key.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    if space <= _BINCOUNT_FACTOR * n:
        counts = np.bincount(key, minlength=space)
        return counts[key].astype(np.int64, copy=False), int(np.count_nonzero(counts))
    _, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
    return counts[inv.reshape(-1)].astype(np.int64, copy=False), int(counts.size)


@dataclass(frozen=True)
class ClimbStep:
    """The measures after adding one more column."""

    column: str
    groups: int
    alone: Rate
    below_k: Rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "groups": self.groups,
            "alone": self.alone.to_dict(),
            "below_k": self.below_k.to_dict(),
        }


@dataclass(frozen=True)
class UniquenessResult:
    """Uniqueness over all the given columns, with the climb curve column by column."""

    columns: tuple[str, ...]  # in climb order (the greedy order when greedy=True)
    k: int
    records: int
    groups: int
    alone: Rate
    below_k: Rate
    crowd: np.ndarray = field(repr=False)  # (n,) int64 crowd size of each record over all columns
    climb: tuple[ClimbStep, ...] = ()
    greedy: bool = False

    def crowd_histogram(self, cap: int = 20) -> dict[str, int]:
        """Records by crowd size 1..cap-1 and 'cap+' (sizes only, no data)."""
        return crowd_histogram(self.crowd, cap)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "k": self.k,
            "records": self.records,
            "groups": self.groups,
            "alone": self.alone.to_dict(),
            "below_k": self.below_k.to_dict(),
            "greedy": self.greedy,
            "climb": [s.to_dict() for s in self.climb],
            "crowd_histogram": self.crowd_histogram(),
        }


def crowd_histogram(crowd: np.ndarray, cap: int = 20) -> dict[str, int]:
    """Number of records per crowd size, sizes >= cap pooled as 'cap+'."""
    out: dict[str, int] = {}
    if crowd.size == 0:
        return out
    counts = np.bincount(np.minimum(crowd, cap))
    for size in range(1, counts.size):
        if counts[size]:
            out[f"{size}+" if size == cap else str(size)] = int(counts[size])
    return out


def _rates(crowd: np.ndarray, k: int) -> tuple[Rate, Rate]:
    n = int(crowd.size)
    return Rate(int(np.count_nonzero(crowd == 1)), n), Rate(int(np.count_nonzero(crowd < k)), n)


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 2:
        raise UniquenessError(f"k must be an integer >= 2, got {k!r}")


def uniqueness_of_codes(
    names: Sequence[str], columns: Sequence[Codes], *, k: int = DEFAULT_K, greedy: bool = False
) -> UniquenessResult:
    """Uniqueness and climb curve over already factorised columns (same length)."""
    _check_k(k)
    if not columns:
        raise UniquenessError("need at least one column")
    if len(names) != len(columns):
        raise UniquenessError("one name per column is required")
    n = int(columns[0].codes.size)
    if any(c.codes.size != n for c in columns):
        raise UniquenessError("columns have different lengths")
    # Records already alone stay alone whatever is added, so each step only re-examines the
    # "active" records (crowd > 1); their crowds only involve each other.
    remaining = list(range(len(columns)))
    order: list[int] = []
    steps: list[ClimbStep] = []
    active = np.arange(n, dtype=np.int64)
    cur = Codes(np.zeros(n, dtype=np.int64), 1 if n else 0)
    settled = 0  # records already alone
    crowd = np.ones(n, dtype=np.int64)
    while remaining:
        if greedy and len(remaining) > 1 and active.size:
            best: tuple[int, int, int, int] | None = None
            pick = remaining[0]
            for j in remaining:
                sub = Codes(columns[j].codes[active], columns[j].card)
                cand, groups = _pair_crowds(cur, sub)
                score = (
                    int(np.count_nonzero(cand == 1)),
                    int(np.count_nonzero(cand < k)),
                    groups,
                    -j,  # ties: earlier column first
                )
                if best is None or score > best:
                    best, pick = score, j
        else:
            pick = remaining[0]
        remaining.remove(pick)
        order.append(pick)
        cur = combine(cur, Codes(columns[pick].codes[active], columns[pick].card))
        sub_crowd = crowd_sizes(cur)
        newly = sub_crowd == 1
        n_new = int(np.count_nonzero(newly))
        below = settled + int(np.count_nonzero(sub_crowd < k))
        steps.append(
            ClimbStep(
                names[pick],
                settled + cur.card,
                Rate(settled + n_new, n),
                Rate(below, n),
            )
        )
        if n_new:
            settled += n_new
            crowd[active[newly]] = 1
            keep = ~newly
            active = active[keep]
            cur = factorize(cur.codes[keep])
            sub_crowd = sub_crowd[keep]
        crowd[active] = sub_crowd
    last = steps[-1]
    return UniquenessResult(
        columns=tuple(names[i] for i in order),
        k=k,
        records=n,
        groups=last.groups,
        alone=last.alone,
        below_k=last.below_k,
        crowd=crowd,
        climb=tuple(steps),
        greedy=greedy,
    )


def uniqueness(
    table: Mapping[str, Sequence[Any] | np.ndarray],
    columns: Sequence[str],
    *,
    k: int = DEFAULT_K,
    greedy: bool = False,
) -> UniquenessResult:
    """Share of records alone / below k over ``columns`` of a column-oriented table, and the climb.

    ``table`` maps column name to a sequence of values (strings, numbers, anything hashable). The climb
    adds columns in the given order, or greedily: next the column leaving the most records alone, ties
    broken by more records below k, then more groups, then the given order.
    """
    if not columns:
        raise UniquenessError("need at least one column")
    missing = [c for c in columns if c not in table]
    if missing:
        raise UniquenessError(
            f"unknown column(s) {', '.join(missing)}; available: {', '.join(table)}"
        )
    if len(set(columns)) != len(columns):
        raise UniquenessError("a column is listed twice")
    coded = [factorize(table[c]) for c in columns]
    return uniqueness_of_codes(list(columns), coded, k=k, greedy=greedy)


def row_codes(rows: np.ndarray) -> Codes:
    """Codes of whole rows of a 2-D integer array (equal rows share a code), exact."""
    if rows.ndim != 2:
        raise UniquenessError(f"expected a 2-D array, got {rows.ndim}-D")
    n, width = rows.shape
    if width == 0:
        return Codes(np.zeros(n, dtype=np.int64), 1 if n else 0)
    current = factorize(np.ascontiguousarray(rows[:, 0]))
    for j in range(1, width):
        current = combine(current, factorize(np.ascontiguousarray(rows[:, j])))
    return current


@dataclass(frozen=True)
class KeyUniqueness:
    """Uniqueness of one revealed key per record (a digest tuple, a segment, a filter)."""

    records: int
    groups: int
    alone: Rate
    below_k: Rate
    k: int
    crowd: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "groups": self.groups,
            "k": self.k,
            "alone": self.alone.to_dict(),
            "below_k": self.below_k.to_dict(),
            "crowd_histogram": crowd_histogram(self.crowd),
        }


def row_uniqueness(rows: np.ndarray, *, k: int = DEFAULT_K) -> KeyUniqueness:
    """Share of rows whose whole row value is unique / shared by fewer than k rows."""
    _check_k(k)
    codes = row_codes(rows)
    crowd = crowd_sizes(codes)
    alone, below = _rates(crowd, k)
    return KeyUniqueness(int(rows.shape[0]), codes.card, alone, below, k, crowd)


def read_csv_columns(path: str | Path, columns: Sequence[str]) -> dict[str, list[str]]:
    """Read the named columns of a CSV file with a header (streamed; only those columns are kept).

    Raises UniquenessError naming the file for a missing file, a missing header, unknown columns (with the
    list of available ones) or a row with the wrong number of fields (naming the row, never its values).
    """
    p = Path(path)
    try:
        fh = p.open(newline="", encoding="utf-8-sig")
    except OSError as exc:
        raise UniquenessError(f"{p}: cannot open ({exc.strerror})") from None
    with fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise UniquenessError(f"{p}: empty file, expected a header row") from None
        except (csv.Error, UnicodeDecodeError) as exc:
            raise UniquenessError(f"{p}: unreadable header ({type(exc).__name__})") from None
        header = [h.strip() for h in header]
        unknown = [c for c in columns if c not in header]
        if unknown:
            raise UniquenessError(
                f"{p}: unknown column(s) {', '.join(unknown)}; available: {', '.join(header)}"
            )
        idx = [header.index(c) for c in columns]
        out: dict[str, list[str]] = {c: [] for c in columns}
        lists = [out[c] for c in columns]
        width = len(header)
        row_no = 1
        try:
            for row_no, row in enumerate(reader, start=2):
                if len(row) != width:
                    if not row:
                        continue
                    raise UniquenessError(
                        f"{p}: row {row_no} has {len(row)} fields, the header has {width}"
                    )
                for lst, i in zip(lists, idx, strict=True):
                    lst.append(row[i])
        except (csv.Error, UnicodeDecodeError) as exc:
            raise UniquenessError(f"{p}: row {row_no}: unreadable ({type(exc).__name__})") from None
    return out
