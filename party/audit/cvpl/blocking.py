"""The blocking operator B_lambda: generalised quasi-identifier keys, progressive levels, sub-blocking.

Level syntax (CLI ``--levels`` and ``parse_levels``): levels are separated by ``;``, the rules of a
level by ``+``; a rule is ``COLUMN`` (exact value), ``COLUMN:bandW`` (numeric column cut into bands
of width W aligned at 0, e.g. age bands of 5/10/20 years), ``COLUMN:prefixN`` (first N characters
of a categorical code, e.g. region prefixes) or the level ``none`` (no blocking: one block). A
column absent from a level is ignored by it. Example:
``age+sex+region ; age:band5+sex+region:prefix2 ; age:band20+sex ; none``.

A sequence is *nested* (progressive) when every block of a level lies inside one block of the next
level; then the existential linkage rate can only grow along the sequence (CVPL Theorem). Bands
W1 | W2 (W2 a multiple of W1) and shorter prefixes nest; ``check_nested`` verifies it on the data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from party.audit.cvpl.errors import CvplError
from party.audit.cvpl.table import TypedColumn

_RULE = re.compile(r"^(?P<col>[^:]+?)(?::(?P<kind>band|prefix)(?P<arg>\d+(?:\.\d+)?))?$")


@dataclass(frozen=True)
class Rule:
    """One column's generalisation in a level: exact, band (width) or prefix (length)."""

    column: str
    kind: str = "exact"
    arg: float = 0.0

    def label(self) -> str:
        if self.kind == "exact":
            return self.column
        arg = int(self.arg) if float(self.arg).is_integer() else self.arg
        return f"{self.column}:{self.kind}{arg}"


@dataclass(frozen=True)
class BlockingLevel:
    """A blocking level lambda: the rules whose generalised values form the block key."""

    rules: tuple[Rule, ...]

    @property
    def name(self) -> str:
        return "+".join(r.label() for r in self.rules) if self.rules else "none"


def parse_levels(spec: str) -> list[BlockingLevel]:
    """Parse the level syntax of the module docstring; CvplError on malformed rules."""
    levels = []
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        if part == "none":
            levels.append(BlockingLevel(()))
            continue
        rules = []
        for text in part.split("+"):
            m = _RULE.match(text.strip())
            if not m:
                raise CvplError(f"parameter levels: cannot parse rule {text.strip()!r}")
            kind = m.group("kind") or "exact"
            arg = float(m.group("arg") or 0.0)
            if kind != "exact" and arg <= 0:
                raise CvplError(f"parameter levels: {kind} of {m.group('col')!r} must be > 0")
            if kind == "prefix" and not arg.is_integer():
                raise CvplError(f"parameter levels: prefix of {m.group('col')!r} must be whole")
            rules.append(Rule(m.group("col").strip(), kind, arg))
        levels.append(BlockingLevel(tuple(rules)))
    if not levels:
        raise CvplError("parameter levels: no blocking level given")
    return levels


def default_levels(columns: Sequence[TypedColumn]) -> list[BlockingLevel]:
    """Progressive default: exact QIs, numeric QIs in bands of 5, 10, 20, numeric dropped, none."""
    numeric = [c.name for c in columns if c.kind == "numeric"]
    categorical = [c.name for c in columns if c.kind == "categorical"]
    cat_rules = tuple(Rule(c) for c in categorical)
    levels = [BlockingLevel(tuple(Rule(c.name) for c in columns))]
    if numeric:
        for w in (5.0, 10.0, 20.0):
            num_rules = tuple(Rule(c, "band", w) for c in numeric)
            levels.append(BlockingLevel(num_rules + cat_rules))
        if categorical:
            levels.append(BlockingLevel(cat_rules))
    levels.append(BlockingLevel(()))
    return levels


def mostly_missing(columns: Sequence[TypedColumn], max_missing: float = 0.5) -> list[str]:
    """Names of columns missing in more than ``max_missing`` of the records of either file."""
    out = []
    for col in columns:
        for side in (col.source, col.target):
            miss = np.isnan(side) if col.kind == "numeric" else side == ""
            if len(side) and miss.mean() > max_missing:
                out.append(col.name)
                break
    return out


def adapt_levels(
    levels: Sequence[BlockingLevel], columns: Sequence[TypedColumn], max_missing: float = 0.5
) -> tuple[list[BlockingLevel], list[str]]:
    """Drop rules on columns missing (suppressed) in more than ``max_missing`` of either file.

    An attacker cannot block on a column the release suppressed; keeping such a rule would put
    every released record into a 'missing' block no original record shares. Dropping the same
    column from every level keeps a nested sequence nested. Adjacent duplicate levels are merged.
    Returns the adapted levels and the dropped column names.
    """
    dropped = mostly_missing(columns, max_missing)
    out: list[BlockingLevel] = []
    for level in levels:
        adapted = BlockingLevel(tuple(r for r in level.rules if r.column not in dropped))
        if not out or out[-1] != adapted:
            out.append(adapted)
    return out, dropped


def check_rule(col: TypedColumn, rule: Rule) -> None:
    """CvplError if the rule's generalisation does not fit the column's type."""
    if col.kind == "numeric" and rule.kind == "prefix":
        raise CvplError(
            f"parameter levels: prefix needs a categorical column, {col.name!r} is numeric"
        )
    if col.kind == "categorical" and rule.kind == "band":
        raise CvplError(
            f"parameter levels: band needs a numeric column; column {col.name!r} is "
            f"categorical ({col.why_categorical})"
        )


def _codes(col: TypedColumn, rule: Rule) -> np.ndarray:
    """Integer codes of the generalised values over D then D' (missing is its own code)."""
    both = np.concatenate([col.source, col.target])
    check_rule(col, rule)
    if col.kind == "numeric":
        vals = both if rule.kind == "exact" else np.floor(both / rule.arg)
        vals = np.where(np.isnan(vals), np.inf, vals)
    else:
        vals = both
        if rule.kind == "prefix":
            uniq, inv = np.unique(both, return_inverse=True)
            vals = np.array([v[: int(rule.arg)] for v in uniq.tolist()])[inv]
    return np.unique(vals, return_inverse=True)[1].astype(np.int64)


def block_keys(
    level: BlockingLevel,
    columns: Sequence[TypedColumn],
    n_source: int,
    cache: dict[Rule, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(source keys, target keys): int64 ids of the generalised QI tuples, equal means same block.

    ``cache`` (optional, per column set) keeps each rule's codes for reuse by later levels."""
    by_name = {c.name: c for c in columns}
    n_target = len(columns[0].target) if columns else 0
    total = n_source + n_target
    if not level.rules:
        return np.zeros(n_source, dtype=np.int64), np.zeros(n_target, dtype=np.int64)
    key = np.zeros(total, dtype=np.int64)
    radix = 1
    for rule in level.rules:
        if rule.column not in by_name:
            raise CvplError(f"parameter levels: column {rule.column!r} is not a quasi-identifier")
        if cache is not None and rule in cache:
            codes = cache[rule]
        else:
            codes = _codes(by_name[rule.column], rule)
            if cache is not None:
                cache[rule] = codes
        card = int(codes.max()) + 1
        if radix * card >= 2**62:  # re-densify before the mixed radix overflows
            key = np.unique(key, return_inverse=True)[1].astype(np.int64)
            radix = int(key.max()) + 1
        key = key + codes * radix
        radix *= card
    key = np.unique(key, return_inverse=True)[1].astype(np.int64)
    return key[:n_source], key[n_source:]


def check_nested(levels_keys: Sequence[tuple[np.ndarray, np.ndarray]]) -> bool:
    """True if every block of each level lies inside one block of the next (on these records)."""
    for (fs, ft), (cs, ct) in zip(levels_keys, levels_keys[1:], strict=False):
        fine = np.concatenate([fs, ft]).astype(np.int64)
        coarse = np.concatenate([cs, ct]).astype(np.int64)
        # nested <=> every fine block maps to exactly one coarse block
        pairs = np.unique(fine * (int(coarse.max()) + 1) + coarse)
        if len(pairs) != len(np.unique(fine)):
            return False
    return True


def subblock(
    source_keys: np.ndarray,
    target_keys: np.ndarray,
    source_order: np.ndarray,
    target_order: np.ndarray,
    quantile: float = 0.95,
    min_size: int = 64,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Split blocks larger than the ``quantile`` of block sizes into equal-count slices.

    Block size is source + target records. An oversized block of size m is cut into
    ceil(m / cap) slices of consecutive values of ``*_order`` (a 1-D score per record, e.g. the
    first principal component), cap = max(quantile of sizes, min_size). Near neighbours mostly
    share a slice, but pairs across a slice boundary are lost: the structural recall of the
    sub-blocked keys measures the loss. Returns the new keys and the number of blocks split.
    """
    ns = len(source_keys)
    keys = np.concatenate([source_keys, target_keys])
    score = np.concatenate([source_order, target_order]).astype(np.float64)
    _, inv, counts = np.unique(keys, return_inverse=True, return_counts=True)
    cap = max(float(np.quantile(counts, quantile)), float(min_size))
    big = counts > cap
    parts = np.where(big, np.ceil(counts / cap), 1).astype(np.int64)
    order = np.lexsort((score, inv))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - starts[inv[order]]
    slice_id = rank * parts[inv] // counts[inv]
    combined = inv.astype(np.int64) * int(parts.max()) + slice_id
    new = np.unique(combined, return_inverse=True)[1].astype(np.int64)
    return new[:ns], new[ns:], int(big.sum())
