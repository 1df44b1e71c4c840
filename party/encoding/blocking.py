"""Blocking keys: functions of field values whose keyed 64-bit digests are all that leaves the party.

A blocking key is a list of parts ``(field, function[, length])``. Each part's column value is first
normalised (with that field's schema normalisation when the column is an encoded feature, else the
default normalisation), then the function is applied:

- ``exact``: the normalised value;
- ``soundex`` / ``nysiis`` / ``metaphone``: the phonetic code from ``jellyfish`` (of the letters only);
- ``prefix``: the first ``length`` characters;
- ``year``: the first 4-digit run in the raw value (``1987-05-03``, ``03/05/1987``, ``19870503``);
- ``postcode_prefix``: the first ``length`` characters with whitespace removed, upper-cased.

If any part is empty (missing value, no year found, empty code) the record has no value for that
key and its digest is 0. Otherwise the parts are joined with U+001F and the key value is
``hashing.blocking_digest(HKDF(secret, "blocking", name), joined)``: HMAC-SHA256 truncated to 64
bits, 0 mapped to 1. The key name is in the HKDF info, so equal values under different keys give
unrelated digests.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import jellyfish
import numpy as np

from party.encoding.hashing import blocking_digest, derive_key
from party.encoding.normalise import DEFAULT_NORMALISATION, normalise, valid_text
from party.encoding.schema import BlockingKeySpec, BlockingPart, LinkageSchema

_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)|^(\d{4})\d{4}$")
_LETTERS = re.compile(r"[^\W\d_]+")


def _letters(s: str) -> str:
    return "".join(_LETTERS.findall(s))


def year_of(raw: str) -> str:
    """The first stand-alone 4-digit run (or the year of a ``YYYYMMDD`` value), else ''."""
    m = _YEAR.search(raw.strip())
    if not m:
        return ""
    return m.group(1) or m.group(2)


def part_function(part: BlockingPart, schema: LinkageSchema) -> Callable[[str], str]:
    """The raw column value -> part value function of one blocking-key part."""
    try:
        norm = schema.field_spec(part.field).normalisation
    except KeyError:
        norm = DEFAULT_NORMALISATION
    fn = part.function
    length = part.length or 0
    if fn == "exact":
        return lambda v: normalise(v, norm)
    if fn == "soundex":
        return lambda v: _phonetic(jellyfish.soundex, normalise(v, norm))
    if fn == "nysiis":
        return lambda v: _phonetic(jellyfish.nysiis, normalise(v, norm))
    if fn == "metaphone":
        return lambda v: _phonetic(jellyfish.metaphone, normalise(v, norm))
    if fn == "prefix":
        return lambda v: normalise(v, norm)[:length]
    if fn == "year":
        return year_of
    if fn == "postcode_prefix":
        return lambda v: "".join(v.split()).upper()[:length]
    raise ValueError(f"unknown blocking function {fn!r}")


def _phonetic(code: Callable[[str], str], value: str) -> str:
    letters = _letters(value)
    return code(letters) if letters else ""


class InvalidText(ValueError):
    """A blocking-key column value is not valid UTF-8 (the caller names row and field)."""


class BlockingKeyer:
    """Computes the digests of one blocking key, memoising part values and digests."""

    MAX_CACHE = 200_000
    MAX_PACKED_KEY = 2**62  # part codes are packed into one int64 below this

    def __init__(self, spec: BlockingKeySpec, schema: LinkageSchema, secret: bytes) -> None:
        self.spec = spec
        self.columns = tuple(p.field for p in spec.parts)
        self._functions = [part_function(p, schema) for p in spec.parts]
        self._key = derive_key(secret, "blocking", spec.name)
        self._cache: dict[tuple[str, ...], int] = {}
        self._part_memo: list[dict[str, str]] = [{} for _ in spec.parts]  # raw -> part value
        self._joined: dict[str, int] = {}  # joined key value -> digest

    def value(self, raw: tuple[str, ...]) -> str | None:
        """The joined blocking-key value of a record's raw part columns, or None if missing."""
        parts = [f(v) for f, v in zip(self._functions, raw, strict=True)]
        if not all(parts):
            return None
        return "\x1f".join(parts)

    def digest(self, raw: tuple[str, ...]) -> int:
        """The digest of one record's raw part columns (0 = no value)."""
        d = self._cache.get(raw)
        if d is None:
            if not all(map(valid_text, raw)):
                raise InvalidText("blocking-key column value is not valid UTF-8")
            v = self.value(raw)
            d = 0 if v is None else blocking_digest(self._key, v)
            if len(self._cache) >= self.MAX_CACHE:
                self._cache.clear()
            self._cache[raw] = d
        return d

    def column_digests(self, columns: Sequence[tuple[list[str], np.ndarray]]) -> np.ndarray:
        """(n,) uint64 digests of n rows given column by column as (distinct values, each row's
        index into them), one column per part: equal to ``digest`` of every row's raw tuple.

        Each part function runs once per distinct column value (memoised across calls) and the
        HMAC once per distinct combination of part values, so the cost follows the number of
        distinct keys, not of rows. Raises InvalidText if any value is not valid UTF-8."""
        codes: list[np.ndarray] = []  # per part: each row's code of its part value
        values: list[list[str]] = []  # per part: the distinct part values
        for i, (uniques, indices) in enumerate(columns):
            if not all(map(valid_text, uniques)):
                raise InvalidText("blocking-key column value is not valid UTF-8")
            memo = self._part_memo[i]
            if len(memo) >= self.MAX_CACHE:
                memo.clear()
            fn = self._functions[i]
            part = [memo[u] if u in memo else memo.setdefault(u, fn(u)) for u in uniques]
            seen: dict[str, int] = {}
            ucode = np.fromiter(
                (seen.setdefault(v, len(seen)) for v in part), dtype=np.int64, count=len(part)
            )
            codes.append(ucode[indices])
            values.append(list(seen))
        n = int(codes[0].size) if codes else 0
        key = np.zeros(n, dtype=np.int64)
        for c, vals in zip(codes, values, strict=True):
            if key.size and (int(key.max()) + 1) * len(vals) >= self.MAX_PACKED_KEY:
                return self._combo_digests(np.stack(codes, axis=1), values)
            key = key * len(vals) + c
        uniq, inverse = np.unique(key, return_inverse=True)
        combos = np.empty((uniq.size, len(values)), dtype=np.int64)
        rest = uniq.copy()
        for i in range(len(values) - 1, -1, -1):
            combos[:, i] = rest % len(values[i])
            rest //= len(values[i])
        return self._joined_digests(combos, values)[inverse.reshape(-1)]

    def _combo_digests(self, row_codes: np.ndarray, values: list[list[str]]) -> np.ndarray:
        combos, inverse = np.unique(row_codes, axis=0, return_inverse=True)
        return self._joined_digests(combos, values)[inverse.reshape(-1)]

    def _joined_digests(self, combos: np.ndarray, values: list[list[str]]) -> np.ndarray:
        """Digest of each row of part-value codes (0 if any part value is empty), memoised."""
        cache = self._joined
        if len(cache) >= self.MAX_CACHE:
            cache.clear()
        out = np.zeros(combos.shape[0], dtype=np.uint64)
        parts = [[vals[c] for c in combos[:, i].tolist()] for i, vals in enumerate(values)]
        for j, tup in enumerate(zip(*parts, strict=True)):
            if not all(tup):
                continue
            joined = "\x1f".join(tup)
            d = cache.get(joined)
            if d is None:
                d = cache[joined] = blocking_digest(self._key, joined)
            out[j] = d
        return out

    def digests(self, raws: list[tuple[str, ...]]) -> list[int]:
        """digest() of many records, with the memo lookups done in bulk."""
        out: list[int | None] = list(map(self._cache.get, raws))
        if None in out:
            for j, d in enumerate(out):
                if d is None:
                    out[j] = self.digest(raws[j])
        return out  # type: ignore[return-value]
