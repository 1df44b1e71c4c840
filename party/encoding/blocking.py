"""Blocking keys: functions of field values whose keyed 64-bit digests are all that leaves the party.

A blocking key is a list of parts ``(field, function[, length])``. Each part's column value is first
normalised (with that field's schema normalisation when the column is an encoded feature, else the
default normalisation), then the function is applied:

- ``exact``: the normalised value;
- ``soundex`` / ``nysiis`` / ``metaphone``: the phonetic code from ``jellyfish`` of the value made
  phonetic-safe (``phonetic_letters``): accents stripped and a few non-ASCII letters transliterated
  (so ``Émile`` and ``Emile`` share a code), digits read as the letters OCR confuses them with
  (``9eorgia`` -> ``georgia``: ``0 o, 1 l, 2 z, 3 e, 4 a, 5 s, 6 b, 7 t, 8 b, 9 g``), then ASCII
  letters only;
- ``prefix``: the first ``length`` characters;
- ``year``: the first 4-digit run in the raw value (``1987-05-03``, ``03/05/1987``, ``19870503``);
- ``postcode_prefix``: the first ``length`` characters with whitespace removed, upper-cased.

If any part is empty (missing value, no year found, empty code) the record has no value for that
key and its digest is 0. Otherwise the parts are joined with U+001F and the key value is
``hashing.blocking_digest(HKDF(secret, "blocking", name), joined)``: HMAC-SHA256 truncated to 64
bits, 0 mapped to 1. The key name is in the HKDF info, so equal values under different keys give
unrelated digests.

LSH keys (``{"name": N, "lsh": {"bands": B, "bitsPerBand": r, "fields": [...]}}``; Hamming LSH,
Indyk & Motwani 1998, on Bloom filters as in Durham 2012 and Karapiperis & Verykios 2015). The
sampled filter is the record's l-bit CLK before hardening and BLIP, made only of the listed
features' bits (all features when none are listed). Positions: ``keyed_shuffle(HKDF(secret,
"blocking", N), l, b"lsh" || round_be32)`` for round = 0, 1, ... concatenated, cut into B bands of
r positions in order. Band b's value is the r sampled bits as an integer (bit j = the j-th position);
its digest is ``blocking_digest(HKDF(secret, "blocking", N + "/band" + b), the value as 8
little-endian bytes)``; a record whose sampled filter is all zero has digest 0 in every band. Two
filters agree on a band with probability about (1 - h)^r, h the fraction of bits where they differ,
so true matches share some band among B with high probability while unrelated records rarely do.

All pairs. A schema without blocking keys gets one digest column holding
``blocking_digest(HKDF(secret, "blocking", "*all-pairs*"), "")`` for every record: one block.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

import jellyfish
import numpy as np

from party.encoding import bits
from party.encoding.hashing import blocking_digest, derive_key, keyed_shuffle
from party.encoding.normalise import DEFAULT_NORMALISATION, normalise, valid_text
from party.encoding.schema import BlockingKeySpec, BlockingPart, LinkageSchema

_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)|^(\d{4})\d{4}$")
_NOT_ASCII_LETTER = re.compile(r"[^a-z]+")
# Digits as the letters OCR and typing confuse them with; letters with no NFKD decomposition.
_PHONETIC_TRANSLATE = str.maketrans(
    {
        "0": "o",
        "1": "l",
        "2": "z",
        "3": "e",
        "4": "a",
        "5": "s",
        "6": "b",
        "7": "t",
        "8": "b",
        "9": "g",
        "ß": "ss",
        "æ": "ae",
        "œ": "oe",
        "ø": "o",
        "đ": "d",
        "ð": "d",
        "þ": "th",
        "ł": "l",
        "ı": "i",
    }
)
ALL_PAIRS_KEY = "*all-pairs*"


def phonetic_letters(value: str) -> str:
    """The ASCII letters a phonetic code is taken of (see the module docstring)."""
    s = value.casefold().translate(_PHONETIC_TRANSLATE)
    s = "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch))
    return _NOT_ASCII_LETTER.sub("", s)


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
    letters = phonetic_letters(value)
    return code(letters) if letters else ""


class InvalidText(ValueError):
    """A blocking-key column value is not valid UTF-8 (the caller names row and field)."""


class BlockingKeyer:
    """Computes the digests of one blocking key, memoising part values and digests."""

    MAX_CACHE = 200_000
    MAX_PACKED_KEY = 2**62  # part codes are packed into one int64 below this

    def __init__(self, spec: BlockingKeySpec, schema: LinkageSchema, secret: bytes) -> None:
        self.spec = spec
        self.columns = tuple(schema.column_of(p.field) for p in spec.parts)
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


def all_pairs_digest(secret: bytes) -> int:
    """The one digest every record gets when the schema has no blocking keys."""
    return blocking_digest(derive_key(secret, "blocking", ALL_PAIRS_KEY), "")


def lsh_positions(name: str, secret: bytes, nbits: int, bands: int, per_band: int) -> np.ndarray:
    """(bands, per_band) sampled bit positions of an LSH key (see the module docstring)."""
    key = derive_key(secret, "blocking", name)
    need = bands * per_band
    out: list[int] = []
    rnd = 0
    while len(out) < need:
        out.extend(keyed_shuffle(key, nbits, b"lsh" + rnd.to_bytes(4, "big")))
        rnd += 1
    return np.asarray(out[:need], dtype=np.int64).reshape(bands, per_band)


class LshKeyer:
    """The B band digests of one LSH blocking key, from the records' filters before hardening."""

    def __init__(self, spec: BlockingKeySpec, schema: LinkageSchema, secret: bytes) -> None:
        assert spec.lsh is not None
        self.spec = spec
        lsh = spec.lsh
        self.fields = lsh.fields or tuple(f.name for f in schema.fields)
        self.nbits = schema.filter_bits
        self.positions = lsh_positions(spec.name, secret, self.nbits, lsh.bands, lsh.bits_per_band)
        self._band_keys = [
            derive_key(secret, "blocking", f"{spec.name}/band{b}") for b in range(lsh.bands)
        ]
        self._weights = np.left_shift(np.uint64(1), np.arange(lsh.bits_per_band, dtype=np.uint64))

    def band_values(self, filters: np.ndarray) -> np.ndarray:
        """(n, B) uint64: each band's sampled bits as an integer (bit j = position j)."""
        u = bits.unpack_rows(filters, self.nbits)
        sel = u[:, self.positions].astype(np.uint64)  # (n, B, r)
        return (sel * self._weights).sum(axis=2, dtype=np.uint64)

    def digests(self, filters: np.ndarray) -> np.ndarray:
        """(n, B) uint64 digests of (n, words_for(l)) filters; 0 for an all-zero filter."""
        values = self.band_values(filters)
        empty = ~filters.any(axis=1)
        out = np.zeros(values.shape, dtype=np.uint64)
        for b, key in enumerate(self._band_keys):
            uniq, inverse = np.unique(values[:, b], return_inverse=True)
            d = np.fromiter(
                (blocking_digest(key, v.to_bytes(8, "little")) for v in uniq.tolist()),
                dtype=np.uint64,
                count=uniq.size,
            )
            out[:, b] = d[inverse.reshape(-1)]
        out[empty] = 0
        return out
