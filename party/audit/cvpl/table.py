"""Tabular inputs of CVPL: the original D and the release D' as typed columns with roles.

File format. D and D' are CSV files (UTF-8, optional BOM, comma-separated, first row = unique column
names). Each role column (quasi-identifiers Q, other observable attributes A, sensitive S, id) must
exist in both files. A cell is missing when it is empty, ``*`` or ``?`` (suppression marks). A
column is numeric when every non-missing cell in BOTH files is a number or a range ``lo-hi`` (read
as its midpoint, the usual way a generalised numeric value is published); otherwise categorical
(values compared as stripped strings). The optional id column gives the ground-truth correspondence:
equal ids are the same person; ids must be unique within each file.

Harmonisation. An attacker reads a generalised release at its own granularity, so by default the
original is aligned with it before anything is compared: when most released cells of a numeric
column are ranges, each original value becomes the midpoint of the released range containing it;
when most released codes of a categorical column are not original codes but prefixes of them (e.g.
region ``C3`` for ``C37``), the original codes are cut to the released length.

Errors (``CvplError``) name the file, the column and, for row problems, the row number; they never
quote a cell value.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from party.audit.cvpl.errors import CvplError

MISSING = frozenset({"", "*", "?"})
_RANGE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*-\s*(-?\d+(?:\.\d+)?)\s*$")


@dataclass
class Table:
    """Raw string columns of one file (values stripped); ``name`` is used in error messages."""

    name: str
    columns: dict[str, np.ndarray]
    n: int = field(init=False)

    def __post_init__(self) -> None:
        lengths = {len(v) for v in self.columns.values()}
        if len(lengths) > 1:
            raise CvplError(f"{self.name}: columns have different lengths")
        self.n = lengths.pop() if lengths else 0

    @classmethod
    def from_arrays(cls, name: str, columns: Mapping[str, Iterable[object]]) -> Table:
        """A table from in-memory columns (numbers are kept as their string form)."""
        out: dict[str, np.ndarray] = {}
        for col, values in columns.items():
            arr = np.asarray(list(values) if not isinstance(values, np.ndarray) else values)
            if arr.dtype.kind in "fiub":
                strs = arr.astype(str)
                if arr.dtype.kind == "f":
                    strs[np.isnan(arr)] = ""
                out[col] = strs
            else:
                out[col] = np.char.strip(arr.astype(str))
        return cls(name, out)

    def require(self, cols: Sequence[str], role: str) -> None:
        for c in cols:
            if c not in self.columns:
                raise CvplError(f"{self.name}: {role} column {c!r} not found")


def read_csv(path: str | Path) -> Table:
    """Read a CSV file into a Table; CvplError on unreadable files, bad headers or ragged rows."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            try:
                header = next(reader)
            except StopIteration:
                raise CvplError(f"{p}: file is empty (no header row)") from None
            header = [h.strip() for h in header]
            if len(set(header)) != len(header):
                dup = sorted({h for h in header if header.count(h) > 1})
                raise CvplError(f"{p}: duplicate column names {dup}")
            if any(not h for h in header):
                raise CvplError(f"{p}: header has an empty column name")
            rows = []
            for lineno, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise CvplError(
                        f"{p}: row {lineno} has {len(row)} fields, the header has {len(header)}"
                    )
                rows.append(row)
    except OSError as exc:
        raise CvplError(f"{p}: cannot read file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CvplError(f"{p}: not valid UTF-8") from None
    except csv.Error as exc:
        raise CvplError(f"{p}: malformed CSV ({exc})") from None
    if not rows:
        raise CvplError(f"{p}: file has a header but no records")
    data = np.array(rows, dtype=str).reshape(len(rows), len(header))
    return Table(str(p), {h: np.char.strip(data[:, i]) for i, h in enumerate(header)})


def missing_mask(values: np.ndarray) -> np.ndarray:
    out = np.zeros(len(values), dtype=bool)
    for token in MISSING:  # element-wise comparisons: no sort of the string column
        out |= values == token
    return out


def parse_ranges(values: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(lo, hi) per cell: a number x gives (x, x), a range "a-b" gives (a, b), missing (NaN, NaN);
    None if some cell is not numeric."""
    present = ~missing_mask(values)
    if not present.any():
        return np.full(len(values), np.nan), np.full(len(values), np.nan)
    try:  # fast path: every present cell is a plain number (numpy parses vectorised)
        plain = np.where(present, values, "nan").astype(np.float64)
        if np.all(np.isfinite(plain[present])):
            return plain, plain.copy()
    except ValueError:
        pass
    lo = np.full(len(values), np.nan)
    hi = np.full(len(values), np.nan)
    uniq, inv = np.unique(values[present], return_inverse=True)
    ulo = np.empty(len(uniq))
    uhi = np.empty(len(uniq))
    for i, v in enumerate(uniq.tolist()):
        try:
            ulo[i] = uhi[i] = float(v)
        except ValueError:
            m = _RANGE.match(v)
            if not m:
                return None
            ulo[i], uhi[i] = float(m.group(1)), float(m.group(2))
    if not (np.all(np.isfinite(ulo)) and np.all(np.isfinite(uhi))):
        return None
    lo[present] = ulo[inv]
    hi[present] = uhi[inv]
    return lo, hi


def parse_numeric(values: np.ndarray) -> np.ndarray | None:
    """Floats (NaN for missing; ranges as midpoints), or None if some cell is not numeric."""
    r = parse_ranges(values)
    return None if r is None else (r[0] + r[1]) / 2.0


def _harmonise_numeric(src: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, str]:
    """If the release publishes ranges (generalisation), map each original value to the midpoint
    of the released range containing it, as an attacker reading the release would."""
    is_range = np.isfinite(lo) & (hi > lo)
    present = np.isfinite(lo)
    if not present.any() or is_range.sum() < 0.5 * present.sum():
        return src, ""
    ranges = np.unique(np.stack([lo[is_range], hi[is_range]], axis=1), axis=0)
    pos = np.searchsorted(ranges[:, 0], src, side="right") - 1
    ok = np.isfinite(src) & (pos >= 0)
    pos = np.where(ok, pos, 0)
    inside = ok & (src <= ranges[pos, 1])
    out = np.where(inside, (ranges[pos, 0] + ranges[pos, 1]) / 2.0, src)
    return out, "original values mapped to the released ranges"


def _harmonise_categorical(src: np.ndarray, tgt: np.ndarray) -> tuple[np.ndarray, str]:
    """If the release publishes prefixes of the original codes (hierarchical generalisation), cut
    the original codes to the released length."""
    t_present = tgt[tgt != ""]
    s_present = src[src != ""]
    if not t_present.size or not s_present.size:
        return src, ""
    if np.isin(t_present, s_present).mean() >= 0.5:
        return src, ""
    lengths = np.char.str_len(t_present)
    length = int(np.bincount(lengths).argmax())
    s_uniq, s_inv = np.unique(src, return_inverse=True)
    cut = np.array([v[:length] for v in s_uniq.tolist()])
    if length == 0 or np.isin(t_present, cut).mean() < 0.9:
        return src, ""
    return cut[s_inv], f"original codes cut to the released prefix length {length}"


@dataclass(frozen=True)
class TypedColumn:
    """One role column in both files: numeric (float, NaN missing) or categorical (str, '' missing)."""

    name: str
    kind: str  # "numeric" | "categorical"
    source: np.ndarray
    target: np.ndarray
    why_categorical: str = ""  # which file has non-numeric values, for error messages
    harmonised: str = ""  # how D was aligned with a generalised release, if it was


def typed_columns(
    original: Table,
    released: Table,
    cols: Sequence[str],
    categorical: Sequence[str] = (),
    harmonise: bool = True,
) -> list[TypedColumn]:
    """Type every column jointly over D and D' (see the module docstring); ``categorical`` forces
    columns to be categorical (e.g. numeric-looking postcodes, to allow prefix generalisation).
    With ``harmonise``, D is aligned with a generalised release (module docstring)."""
    out = []
    for c in cols:
        a, b = original.columns[c], released.columns[c]
        ra = None if c in categorical else parse_ranges(a)
        rb = None if c in categorical else parse_ranges(b)
        if (
            ra is not None
            and rb is not None
            and (np.isfinite(ra[0]).any() or np.isfinite(rb[0]).any())
        ):
            na = (ra[0] + ra[1]) / 2.0
            nb = (rb[0] + rb[1]) / 2.0
            note = ""
            if harmonise:
                na, note = _harmonise_numeric(na, rb[0], rb[1])
            out.append(TypedColumn(c, "numeric", na, nb, harmonised=note))
        else:
            sa = np.where(missing_mask(a), "", a)
            sb = np.where(missing_mask(b), "", b)
            why = ", ".join(t.name for t, v in ((original, ra), (released, rb)) if v is None)
            why = "declared categorical" if c in categorical else f"non-numeric values in {why}"
            note = ""
            if harmonise:
                sa, note = _harmonise_categorical(sa, sb)
            out.append(TypedColumn(c, "categorical", sa, sb, why, note))
    return out


def check_roles(
    original: Table,
    released: Table,
    qi: Sequence[str],
    attrs: Sequence[str],
    sensitive: Sequence[str],
    id_col: str | None,
) -> None:
    """Every role column exists in both files; no column has two roles; ids are unique."""
    if not qi:
        raise CvplError("parameter qi: at least one quasi-identifier column is required")
    roles: dict[str, str] = {}
    for role, cols in (("qi", qi), ("attrs", attrs), ("sensitive", sensitive)):
        for c in cols:
            if c in roles:
                raise CvplError(f"column {c!r} is given both as {roles[c]} and as {role}")
            roles[c] = role
    if id_col is not None and id_col in roles:
        raise CvplError(f"id column {id_col!r} is also given as {roles[id_col]}")
    for t in (original, released):
        t.require(qi, "quasi-identifier")
        t.require(attrs, "attribute")
        t.require(sensitive, "sensitive")
        if id_col is not None:
            t.require([id_col], "id")
            ids = t.columns[id_col]
            if missing_mask(ids).any():
                row = int(np.flatnonzero(missing_mask(ids))[0]) + 2
                raise CvplError(f"{t.name}: id column {id_col!r} is empty in row {row}")
            if len(np.unique(ids)) != len(ids):
                raise CvplError(f"{t.name}: id column {id_col!r} has duplicate ids")


def truth_from_ids(original: Table, released: Table, id_col: str) -> np.ndarray:
    """truth[i] = row of D' with D's row i's id, or -1."""
    tids = released.columns[id_col]
    order = np.argsort(tids)
    sids = original.columns[id_col]
    pos = np.searchsorted(tids[order], sids)
    pos = np.minimum(pos, len(tids) - 1)
    found = tids[order][pos] == sids
    return np.where(found, order[pos], -1).astype(np.int64)
