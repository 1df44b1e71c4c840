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
- ``postcode_prefix``: the first ``length`` characters with whitespace removed, upper-cased;
- ``day_month``: the digits of a date other than its year (``1987-05-03`` and ``19870503`` give
  ``0503``, ``03/05/1987`` gives ``0305``), so a mistyped year keeps the key; '' when ``year`` finds
  no year;
- ``number``: the first run of digits in the value (the house number of ``12a queen street``: ``12``).

If any part is empty (missing value, no year found, empty code) the record has no value for that
key and its digest is 0. Otherwise the digest of the part values p_1..p_m (in the key's part
order) is ``CBC-MAC_K(X(p_1), ..., X(p_m))`` with ``K = HKDF(secret, "blocking-prf", name)``,
``X(p) = SHA-256(UTF-8 p)[0:16]`` and AES-256, truncated to 64 bits, 0 mapped to 1 (scheme
``sha256-aes256-cbcmac/1``, exact definition and security argument in ``party.encoding.hashing``).
The key name is in the HKDF info, so equal values under different keys give unrelated digests.

LSH keys (``{"name": N, "lsh": {"bands": B, "bitsPerBand": r, "fields": [...]}}``; Hamming LSH,
Indyk & Motwani 1998, on Bloom filters as in Durham 2012 and Karapiperis & Verykios 2015). The
sampled filter is the record's l-bit CLK before hardening and BLIP, made only of the listed
features' bits (all features when none are listed). Positions: ``keyed_shuffle(HKDF(secret,
"blocking", N), l, b"lsh" || round_be32)`` for round = 0, 1, ... concatenated, cut into B bands of
r positions in order. Band b's value is the r sampled bits as an integer (bit j = the j-th position);
its digest is ``AES_K(b || value)`` (both as little-endian uint64, ``K = HKDF(secret,
"blocking-prf", N)``), bytes 0-7 read little-endian, 0 mapped to 1; a record whose sampled filter is all zero has digest 0 in every band. Two
filters agree on a band with probability about (1 - h)^r, h the fraction of bits where they differ,
so true matches share some band among B with high probability while unrelated records rarely do.

All pairs. A schema without blocking keys gets one digest column holding
the digest of the one-part value ``""`` under the key name ``*all-pairs*`` for every record: one
block.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from typing import Any

import jellyfish
import numpy as np

from party.encoding._numba_bits import gather_bands
from party.encoding.hashing import (
    blocking_prf_key,
    cbc_mac_digests,
    derive_key,
    keyed_shuffle,
    lsh_band_digests,
    part_block,
    value_blocks,
)
from party.encoding.normalise import (
    DEFAULT_NORMALISATION,
    NormaliserMemos,
    memoised_normaliser,
    memoised_normaliser_many,
    valid_text,
)
from party.encoding.schema import (
    BlockingKeySpec,
    BlockingPart,
    LinkageSchema,
    NormalisationSpec,
)

_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)|^(\d{4})\d{4}$")
_NOT_ASCII_LETTER = re.compile(r"[^a-z]+")
_NOT_DIGIT = re.compile(r"[^0-9]+")
_DIGITS = re.compile(r"[0-9]+")
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
    if not s.isascii():  # ASCII has no combining marks and is its own NFKD
        s = "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch))
    return _NOT_ASCII_LETTER.sub("", s)


# ASCII fast path of phonetic_letters: drop bytes other than letters, digits and the separator
# NUL, then map upper case to lower case and digits to their letters (as _PHONETIC_TRANSLATE).
_KEEP = set(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz\0")
_PHONETIC_DELETE = bytes(b for b in range(256) if b not in _KEEP)
_PHONETIC_BYTES = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", b"abcdefghijklmnopqrstuvwxyzolzeasbtbg"
)


def phonetic_letters_many(values: list[str]) -> list[str]:
    """``[phonetic_letters(v) for v in values]``; all-ASCII input in three C calls (ASCII
    casefolds to lower case and is its own NFKD, so only the translation and the letter filter
    remain), joined with NUL as the separator (any NUL in a value: the per-value path)."""
    joined = "\0".join(values)
    if values and joined.isascii() and joined.count("\0") == len(values) - 1:
        data = joined.encode("ascii").translate(_PHONETIC_BYTES, _PHONETIC_DELETE)
        return data.decode("ascii").split("\0")
    return [phonetic_letters(v) for v in values]


def year_of(raw: str) -> str:
    """The first stand-alone 4-digit run (or the year of a ``YYYYMMDD`` value), else ''."""
    m = _YEAR.search(raw.strip())
    if not m:
        return ""
    return m.group(1) or m.group(2)


def day_month_of(raw: str) -> str:
    """The digits of a date other than its year (``year_of``), else ''."""
    value = raw.strip()
    m = _YEAR.search(value)
    if not m:
        return ""
    if m.group(2):  # YYYYMMDD
        return value[4:]
    return _NOT_DIGIT.sub("", value[: m.start(1)] + value[m.end(1) :])


_NOT_DIGIT_OR_SEP = re.compile(r"[^0-9\0]+")


_DATE_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9]


def _plain_dates(raws: list[str]) -> list[bool]:
    """Which values are ``DDDD?DD?DD`` in ASCII (D a digit 0-9, ? any other character): for
    them ``year_of`` is the first four characters and ``day_month_of`` characters 5-6 and 8-9
    (no surrounding space; the first alternative of ``_YEAR`` matches at position 0)."""
    plain = np.zeros(len(raws), dtype=bool)
    ten = np.flatnonzero(np.fromiter(map(len, raws), dtype=np.int64, count=len(raws)) == 10)
    if not ten.size:
        return plain.tolist()
    cand = list(map(raws.__getitem__, ten.tolist()))
    ascii_ = np.fromiter(map(str.isascii, cand), dtype=bool, count=len(cand))
    text = "".join(compress(cand, ascii_.tolist())).encode("ascii")
    chars = np.frombuffer(text, dtype=np.uint8).reshape(-1, 10)
    digit = (chars >= ord("0")) & (chars <= ord("9"))
    ok = digit[:, _DATE_DIGITS].all(axis=1) & ~digit[:, 4] & ~digit[:, 7]
    plain[ten[ascii_]] = ok
    return plain.tolist()


def years(raws: list[str]) -> list[str]:
    """``[year_of(r) for r in raws]``; plain dates (``_plain_dates``) by slicing."""
    return [r[:4] if p else year_of(r) for r, p in zip(raws, _plain_dates(raws), strict=True)]


def day_months(raws: list[str]) -> list[str]:
    """``[day_month_of(r) for r in raws]``; plain dates (``_plain_dates``) by slicing, the digit
    filter of the others run once over their joined rests."""
    search = _YEAR.search
    out: list[str] = []
    rests: list[str] = []
    at: list[int] = []
    for raw, plain in zip(raws, _plain_dates(raws), strict=True):
        if plain:
            out.append(raw[5:7] + raw[8:10])
            continue
        value = raw.strip()
        m = search(value)
        if m is None or m.group(2):
            out.append(value[4:] if m is not None else "")
            continue
        at.append(len(out))
        out.append("")
        rests.append(value[: m.start(1)] + value[m.end(1) :])
    joined = "\0".join(rests)
    if rests and joined.count("\0") == len(rests) - 1:
        digits = _NOT_DIGIT_OR_SEP.sub("", joined).split("\0")
    else:
        digits = [_NOT_DIGIT.sub("", r) for r in rests]
    for i, d in zip(at, digits, strict=True):
        out[i] = d
    return out


def first_number(value: str) -> str:
    """The first run of digits in a value, else ''."""
    m = _DIGITS.search(value)
    return m.group(0) if m else ""


def _normalisation_of(part: BlockingPart, schema: LinkageSchema) -> NormalisationSpec:
    """The part's field normalisation when the column is an encoded feature, else the default."""
    try:
        return schema.field_spec(part.field).normalisation
    except KeyError:
        return DEFAULT_NORMALISATION


def part_function(
    part: BlockingPart, schema: LinkageSchema, memos: NormaliserMemos | None = None
) -> Callable[[str], str]:
    """The raw column value -> part value function of one blocking-key part (``memos``: the
    normalisation memos to share, see ``memoised_normaliser``)."""
    norm_of = memoised_normaliser(_normalisation_of(part, schema), memos)
    fn = part.function
    length = part.length or 0
    if fn == "exact":
        return lambda v: norm_of(v)
    if fn == "soundex":
        return lambda v: _phonetic(jellyfish.soundex, norm_of(v))
    if fn == "nysiis":
        return lambda v: _phonetic(jellyfish.nysiis, norm_of(v))
    if fn == "metaphone":
        return lambda v: _phonetic(jellyfish.metaphone, norm_of(v))
    if fn == "prefix":
        return lambda v: norm_of(v)[:length]
    if fn == "year":
        return year_of
    if fn == "postcode_prefix":
        return lambda v: "".join(v.split()).upper()[:length]
    if fn == "day_month":
        return day_month_of
    if fn == "number":
        return lambda v: first_number(norm_of(v))
    raise ValueError(f"unknown blocking function {fn!r}")


_PHONETIC_CODES: dict[str, Callable[[str], str]] = {
    "soundex": jellyfish.soundex,
    "nysiis": jellyfish.nysiis,
    "metaphone": jellyfish.metaphone,
}


def part_values(
    part: BlockingPart, schema: LinkageSchema, memos: NormaliserMemos | None = None
) -> Callable[[list[str]], list[str]]:
    """``part_function`` over a list of raw values at once (what the encoder calls): equal to
    ``[part_function(part, schema)(v) for v in values]`` with fewer Python calls per value."""
    norm_many = memoised_normaliser_many(_normalisation_of(part, schema), memos)
    fn = part.function
    length = part.length or 0
    code = _PHONETIC_CODES.get(fn)
    if code is not None:

        def phonetic(values: list[str]) -> list[str]:
            letters = phonetic_letters_many(norm_many(values))
            return [code(x) if x else "" for x in letters]

        return phonetic
    if fn == "exact":
        return norm_many
    if fn == "prefix":
        return lambda values: [v[:length] for v in norm_many(values)]
    if fn == "number":
        digits = _DIGITS.search
        return lambda values: [m.group() if (m := digits(v)) else "" for v in norm_many(values)]
    if fn == "year":
        return years
    if fn == "day_month":
        return day_months
    one = part_function(part, schema, memos)
    return lambda values: list(map(one, values))


def _phonetic(code: Callable[[str], str], value: str) -> str:
    letters = phonetic_letters(value)
    return code(letters) if letters else ""


class InvalidText(ValueError):
    """A blocking-key column value is not valid UTF-8 (the caller names row and field)."""


class _ColumnIds:
    """Raw value of one column -> a dense id, shared by every blocking-key part that reads the
    column; bounded: when full it is cleared and ``generation`` changes (parts then start over)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.ids: dict[str, int] = {}
        self.generation = 0
        self._last: tuple[list[str], np.ndarray] | None = None

    def of(self, uniques: list[str]) -> np.ndarray:
        """(len(uniques),) int64 ids of the values (the last list's ids are reused as they are)."""
        if self._last is not None and self._last[0] is uniques:
            return self._last[1]
        ids = self.ids
        if len(ids) + len(uniques) > self.limit:
            ids.clear()
            self.generation += 1
        out = np.fromiter(map(ids.get, uniques, repeat(-1)), dtype=np.int64, count=len(uniques))
        new = np.flatnonzero(out < 0)
        if new.size:
            values = list(map(uniques.__getitem__, new.tolist()))
            first = len(ids)
            ids.update(zip(dict.fromkeys(values), range(first, first + len(values)), strict=False))
            out[new] = np.fromiter(map(ids.__getitem__, values), dtype=np.int64, count=new.size)
        self._last = (uniques, out)
        return out


class _PartBlocks:
    """X(part value) of one part for every column id computed so far (all zero: empty value)."""

    def __init__(self) -> None:
        self.generation = -1
        self.blocks = np.zeros((0, 2), dtype=np.uint64)
        self.done = np.zeros(0, dtype=bool)
        # when a list: every block of new entries is also appended to it (raw values, blocks),
        # for lanes that share first sight
        self.fresh: list[tuple[list[str], np.ndarray]] | None = None

    def fit(self, generation: int, size: int) -> None:
        """Start over after the column ids were cleared; grow to ``size`` ids."""
        if generation != self.generation:
            self.generation = generation
            self.blocks = np.zeros((0, 2), dtype=np.uint64)
            self.done = np.zeros(0, dtype=bool)
        if size > self.done.size:
            cap = max(size, 2 * self.done.size)
            blocks = np.zeros((cap, 2), dtype=np.uint64)
            blocks[: self.blocks.shape[0]] = self.blocks
            done = np.zeros(cap, dtype=bool)
            done[: self.done.size] = self.done
            self.blocks, self.done = blocks, done


class BlockingKeyer:
    """Computes the digests of one blocking key, memoising each raw column value's part block."""

    MAX_CACHE = 200_000
    _EMPTY = bytes(16)  # the block of an empty part value (no record value for the key)

    def __init__(
        self,
        spec: BlockingKeySpec,
        schema: LinkageSchema,
        secret: bytes,
        shared_memos: dict[Any, Any] | None = None,
        norm_memos: NormaliserMemos | None = None,
    ) -> None:
        """``shared_memos`` lets the keys of one encoder share their memos: per column, the ids
        of its raw values; per part (e.g. the year of birth), X(part value) by column id; and
        (entry None) part value -> X(part value) for every part."""
        self.spec = spec
        self.columns = tuple(schema.column_of(p.field) for p in spec.parts)
        self._functions = [part_function(p, schema, norm_memos) for p in spec.parts]
        self._batch_functions = [part_values(p, schema, norm_memos) for p in spec.parts]
        self._key = blocking_prf_key(secret, spec.name)
        memos = {} if shared_memos is None else shared_memos
        self._column_ids: list[_ColumnIds] = [
            memos.setdefault(("column", c), _ColumnIds(self.MAX_CACHE)) for c in self.columns
        ]
        self._part_memo: list[_PartBlocks] = [
            memos.setdefault(p, _PartBlocks()) for p in spec.parts
        ]
        self._value_memo: dict[str, bytes] = memos.setdefault(None, {})

    def value(self, raw: tuple[str, ...]) -> str | None:
        """The joined blocking-key value of a record's raw part columns, or None if missing."""
        parts = [f(v) for f, v in zip(self._functions, raw, strict=True)]
        if not all(parts):
            return None
        return "\x1f".join(parts)

    def digest(self, raw: tuple[str, ...]) -> int:
        """The digest of one record's raw part columns (0 = no value)."""
        return int(self.column_digests([([v], np.zeros(1, dtype=np.int64)) for v in raw])[0])

    def _part_blocks(self, i: int, uniques: list[str]) -> np.ndarray:
        """(len(uniques), 2) uint64 blocks X(part value) of part i's distinct raw values; all zero
        for an empty part value. Memoised across batches (bounded) by column id."""
        column = self._column_ids[i]
        ids = column.of(uniques)
        memo = self._part_memo[i]
        memo.fit(column.generation, len(column.ids))
        need = np.flatnonzero(~memo.done[ids])
        if need.size:
            miss = list(map(uniques.__getitem__, need.tolist()))
            parts = self._batch_functions[i](miss)
            blocks = self._value_memo
            if len(blocks) >= self.MAX_CACHE:
                blocks.clear()
            new = [p for p in dict.fromkeys(parts) if p and p not in blocks]
            blocks.update(zip(new, map(part_block, new), strict=True))
            data = b"".join(map(blocks.get, parts, repeat(self._EMPTY)))  # type: ignore[arg-type]
            memo.blocks[ids[need]] = np.frombuffer(data, dtype="<u8").reshape(need.size, 2)
            memo.done[ids[need]] = True
            if memo.fresh is not None:
                memo.fresh.append((miss, memo.blocks[ids[need]]))
        return memo.blocks[ids]

    def column_digests(
        self,
        columns: Sequence[tuple[list[str], np.ndarray]],
        checked: bool = False,
        shared: dict[Any, Any] | None = None,
    ) -> np.ndarray:
        """(n,) uint64 digests of n rows given column by column as (distinct values, each row's
        index into them), one column per part: equal to ``digest`` of every row's raw tuple.

        Each part function and SHA-256 run once per distinct column value (memoised across
        calls); the keyed step is one AES call per part over all rows (hashing module
        docstring). Raises InvalidText if any value is not valid UTF-8 (unless ``checked``: the
        caller has checked every value). ``shared``: a dict the caller passes to every key's
        call for the same columns (one batch), so a part that several keys have in common is
        looked up and gathered once; it must not outlive those column lists."""
        blocks: list[np.ndarray] = []
        empty: np.ndarray | None = None
        for i, (uniques, indices) in enumerate(columns):
            if not checked and not all(map(valid_text, uniques)):
                raise InvalidText("blocking-key column value is not valid UTF-8")
            ck = (self.spec.parts[i], id(uniques), id(indices))
            got = None if shared is None else shared.get(ck)
            if got is None:
                distinct = self._part_blocks(i, uniques)
                x = distinct[indices]
                none = (distinct == 0).all(axis=1)[indices]  # per distinct value, then gathered
                if shared is not None:  # holding the lists keeps their ids unique meanwhile
                    shared[ck] = (x, none, uniques, indices)
            else:
                x, none = got[0], got[1]
            empty = none if empty is None else empty | none
            blocks.append(x)
        out = cbc_mac_digests(self._key, blocks)
        if empty is not None:
            out[empty] = 0
        return out


def all_pairs_digest(secret: bytes) -> int:
    """The one digest every record gets when the schema has no blocking keys: that of the
    one-part value ``""`` under the key name ``*all-pairs*``."""
    key = blocking_prf_key(secret, ALL_PAIRS_KEY)
    return int(cbc_mac_digests(key, [value_blocks([""])])[0])


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
        self._key = blocking_prf_key(secret, spec.name)

    def band_values(self, filters: np.ndarray) -> np.ndarray:
        """(n, B) uint64: each band's sampled bits as an integer (bit j = position j)."""
        return gather_bands(np.ascontiguousarray(filters, dtype=np.uint64), self.positions)

    def digests(self, filters: np.ndarray) -> np.ndarray:
        """(n, B) uint64 digests of (n, words_for(l)) filters; 0 for an all-zero filter."""
        out = lsh_band_digests(self._key, self.band_values(filters))
        out[~filters.any(axis=1)] = 0
        return out
