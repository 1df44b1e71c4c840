"""The versioned linkage schema: its JSON format, validation (every problem at once) and digest.

Format (version 1; version 2 adds the keys marked [v2] below). A JSON object; concepts and key names follow the clkhash v3 schema where that
costs nothing (``features``, ``identifier``, ``comparison`` with ``n``/``positional``,
``strategy`` with ``bitsPerToken``, ``missingValue``), so users of that tool recognise them::

    {
      "version": 1,
      "l": 1024,                              # filter length in bits BEFORE hardening
      "hashing": {"scheme": "hmac-sha256-random", "k": 20},
      "hardening": {"xorFold": false, "balance": false, "blip": null},
      "features": [
        {
          "identifier": "first_name",         # field name (and CSV column unless "column" is given)
          "column": "FirstName",               # [v2] optional: the CSV column holding this field
          "normalisation": {"nfkc": true, "case": "fold", "stripAccents": false,
                            "punctuation": "remove", "whitespace": "collapse",
                            "replacements": [["ß", "ss"]]},
          "comparison": {"type": "ngram", "n": 2, "padding": true, "positional": false},
          "strategy": {"bitsPerToken": 20}     # k for this field, or {"weight": 1.5}: k = round(w * hashing.k)
                                               # [v2] or {"bitsPerFeature": 200}: see below
          "missingValue": {"sentinels": ["", "NA"], "policy": "empty"},   # or "skip" / "error"
          "validation": {"maxLength": 100, "pattern": "^[^0-9]*$", "onInvalid": "error"},  # or "skip"
          "salt": {"field": "birth_year"}      # optional: append another column's value to each q-gram
        }
      ],
      "blocking": [
        {"name": "sdx_last_yob", "parts": [{"field": "last_name", "function": "soundex"},
                                          {"field": "dob", "function": "year"}]},
        {"name": "lsh", "lsh": {"bands": 8, "bitsPerBand": 24, "fields": ["first_name"]}}   # [v2]
      ]
    }

Per-feature bit budget [v2] (clkhash's ``bitsPerFeature``). A value with T q-grams (duplicates
counted) sets ``bitsPerFeature`` hash positions in all: every q-gram gets ``bitsPerFeature // T``
positions and the first ``bitsPerFeature % T`` q-grams one more, so a field's weight in the filter no
longer grows with the length of its value. The positions of a q-gram with k hashes are the first k
of its keyed hash stream. ``FieldSpec.k`` of such a field is the nominal k of a value of
``NOMINAL_TOKENS`` q-grams (what the audit and the BLIP epsilon use).

LSH blocking [v2] (``party.encoding.blocking``): ``bands`` digests per record, band b being the
keyed digest of ``bitsPerBand`` bits of the record's filter (before hardening, restricted to the
listed ``fields``, default all) at positions drawn by a keyed permutation. Each band is one more
blocking pass (one more digest column).

No blocking keys (``"blocking": []`` or absent) means all pairs: the encoder emits one keyed digest
shared by every record, so every record is in one block.

Defaults: ``hashing.scheme`` ``hmac-sha256-random``, ``hashing.k`` 20, normalisation as above,
``comparison`` bigrams with padding, ``strategy`` weight 1 (so k = hashing.k), ``missingValue``
sentinels ``[""]`` with policy ``empty``, no validation, no salt, no hardening, no blocking keys.
BLIP is ``{"flipProbability": f}`` with 0 < f < 0.5. Blocking functions: ``exact``, ``soundex``,
``nysiis``, ``metaphone``, ``prefix`` (needs ``length``), ``year`` (a 4-digit year found in a date
such as ``1987-05-03`` or ``03/05/1987``), ``postcode_prefix`` (needs ``length``; spaces removed),
``day_month`` (a date's digits other than its year), ``number`` (the first run of digits).

Digest. ``LinkageSchema.to_canonical_json`` writes the fully resolved schema (all defaults filled
in, per-field k resolved) as compact JSON with sorted keys; ``digest`` is the SHA-256 hex of the
line ``blockingDigest=<hashing.BLOCKING_DIGEST_SCHEME>\n`` followed by it, so a schema digests
differently under another blocking-digest scheme and encodings made under one are never taken for
the other's. Two files
that differ only in spelling out defaults therefore have the same digest.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from party.encoding.hashing import BLOCKING_DIGEST_SCHEME
from party.errors import PprlError

SCHEMA_VERSION = 2  # the newest version; 1 is still read (and written back unchanged)
SCHEMA_VERSIONS = (1, 2)
NOMINAL_TOKENS = 8
MAX_BITS_PER_FEATURE = 20_000
MAX_LSH_BANDS = 64
HASH_SCHEMES = ("hmac-sha256-random", "hmac-sha256-double", "mmh3-double")
DEFAULT_SCHEME = "hmac-sha256-random"
DEFAULT_K = 20
CASE_MODES = ("fold", "lower", "upper", "none")
PUNCTUATION_MODES = ("remove", "space", "keep")
WHITESPACE_MODES = ("collapse", "remove", "keep")
MISSING_POLICIES = ("empty", "skip", "error")
INVALID_POLICIES = ("error", "skip")
BLOCKING_FUNCTIONS = (
    "exact",
    "soundex",
    "nysiis",
    "metaphone",
    "prefix",
    "year",
    "postcode_prefix",
    "day_month",
    "number",
)
_NEEDS_LENGTH = ("prefix", "postcode_prefix")
MAX_FILTER_BITS = 1 << 20
MAX_K = 1000


class SchemaError(PprlError, ValueError):
    """A linkage schema is invalid; ``problems`` lists every problem, each naming its field."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(
            f"invalid linkage schema {source}: {len(self.problems)} problem(s):\n{lines}"
        )


@dataclass(frozen=True)
class NormalisationSpec:
    """How a field's value is normalised before q-gram splitting (applied in this order)."""

    nfkc: bool = True  # 1. Unicode NFKC
    case: str = "fold"  # 2. str.casefold / lower / upper / none
    replacements: tuple[tuple[str, str], ...] = ()  # 3. literal replacements, in order
    strip_accents: bool = False  # 4. NFKD, drop combining marks, NFC
    punctuation: str = "remove"  # 5. Unicode P*/S* characters: remove / replace by space / keep
    whitespace: str = "collapse"  # 6. collapse runs to one space and strip / remove all / keep


@dataclass(frozen=True)
class FieldSpec:
    """One encoded field (CSV column)."""

    name: str
    q: int = 2
    padding: bool = True
    positional: bool = False
    k: int = DEFAULT_K  # resolved hash count for this field
    weight: float | None = None  # the weight k was derived from, if any
    normalisation: NormalisationSpec = field(default_factory=NormalisationSpec)
    missing_sentinels: tuple[str, ...] = ("",)
    missing_policy: str = "empty"
    max_length: int | None = None
    pattern: str | None = None
    on_invalid: str = "error"
    salt_field: str | None = None
    column: str | None = None  # CSV column when it differs from the field name [v2]
    bits_per_feature: int | None = None  # total hash positions per value [v2]

    @property
    def source_column(self) -> str:
        """The CSV column this field is read from."""
        return self.column if self.column is not None else self.name

    def token_ks(self, tokens: int) -> list[int]:
        """Hash count of each of a value's ``tokens`` q-grams (in order)."""
        if self.bits_per_feature is None:
            return [self.k] * tokens
        if tokens == 0:
            return []
        base, extra = divmod(self.bits_per_feature, tokens)
        return [base + 1] * extra + [base] * (tokens - extra)


@dataclass(frozen=True)
class HashingSpec:
    scheme: str = DEFAULT_SCHEME
    k: int = DEFAULT_K  # default k, scaled by field weights


@dataclass(frozen=True)
class HardeningSpec:
    xor_fold: bool = False  # fold the l-bit filter to l/2 bits (applied first)
    balance: bool = False  # append the complement, then a keyed permutation (doubles the length)
    blip_flip_probability: float | None = None  # BLIP randomised response (applied last)


@dataclass(frozen=True)
class BlockingPart:
    field: str
    function: str
    length: int | None = None


@dataclass(frozen=True)
class LshSpec:
    """Hamming LSH over the filter: ``bands`` digests of ``bits_per_band`` sampled bits each."""

    bands: int
    bits_per_band: int
    fields: tuple[str, ...] = ()  # features whose bits make the filter sampled; () = all


@dataclass(frozen=True)
class BlockingKeySpec:
    name: str
    parts: tuple[BlockingPart, ...]
    lsh: LshSpec | None = None

    @property
    def width(self) -> int:
        """Number of digest columns (blocking passes) this key contributes."""
        return self.lsh.bands if self.lsh is not None else 1


@dataclass(frozen=True)
class LinkageSchema:
    version: int
    fields: tuple[FieldSpec, ...]
    filter_bits: int  # l before hardening
    hashing: HashingSpec
    hardening: HardeningSpec
    blocking: tuple[BlockingKeySpec, ...]

    @property
    def output_bits(self) -> int:
        """Length of the filters the encoder emits (after XOR-folding and balancing)."""
        bits = self.filter_bits
        if self.hardening.xor_fold:
            bits //= 2
        if self.hardening.balance:
            bits *= 2
        return bits

    def field_spec(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def column_of(self, name: str) -> str:
        """The CSV column of a field name (a name that is no feature is a column itself)."""
        try:
            return self.field_spec(name).source_column
        except KeyError:
            return name

    @property
    def digest_width(self) -> int:
        """Columns of the block-digest matrix: one per pass, 1 for all pairs (no keys)."""
        return max(1, sum(b.width for b in self.blocking))

    def to_dict(self) -> dict[str, Any]:
        """The fully resolved schema in the JSON format (parse_schema(to_dict()) == self)."""
        features = []
        for f in self.fields:
            n = f.normalisation
            feat: dict[str, Any] = {
                "identifier": f.name,
                "normalisation": {
                    "nfkc": n.nfkc,
                    "case": n.case,
                    "replacements": [list(r) for r in n.replacements],
                    "stripAccents": n.strip_accents,
                    "punctuation": n.punctuation,
                    "whitespace": n.whitespace,
                },
                "comparison": {
                    "type": "ngram",
                    "n": f.q,
                    "padding": f.padding,
                    "positional": f.positional,
                },
                "strategy": {"bitsPerFeature": f.bits_per_feature}
                if f.bits_per_feature is not None
                else {"bitsPerToken": f.k}
                if f.weight is None
                else {"weight": f.weight, "bitsPerToken": f.k},
                "missingValue": {
                    "sentinels": list(f.missing_sentinels),
                    "policy": f.missing_policy,
                },
                "validation": {
                    "maxLength": f.max_length,
                    "pattern": f.pattern,
                    "onInvalid": f.on_invalid,
                },
                "salt": None if f.salt_field is None else {"field": f.salt_field},
            }
            if f.column is not None:
                feat["column"] = f.column
            features.append(feat)
        blip = self.hardening.blip_flip_probability
        return {
            "version": self.version,
            "l": self.filter_bits,
            "hashing": {"scheme": self.hashing.scheme, "k": self.hashing.k},
            "hardening": {
                "xorFold": self.hardening.xor_fold,
                "balance": self.hardening.balance,
                "blip": None if blip is None else {"flipProbability": blip},
            },
            "features": features,
            "blocking": [_blocking_dict(b) for b in self.blocking],
        }

    def to_canonical_json(self) -> bytes:
        return json.dumps(
            self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8")

    def digest(self) -> str:
        """SHA-256 hex of the canonical JSON: the identity every party checks."""
        tag = f"blockingDigest={BLOCKING_DIGEST_SCHEME}\n".encode()  # see the module docstring
        return hashlib.sha256(tag + self.to_canonical_json()).hexdigest()


def _blocking_dict(b: BlockingKeySpec) -> dict[str, Any]:
    if b.lsh is not None:
        return {
            "name": b.name,
            "lsh": {
                "bands": b.lsh.bands,
                "bitsPerBand": b.lsh.bits_per_band,
                "fields": list(b.lsh.fields),
            },
        }
    return {
        "name": b.name,
        "parts": [
            {"field": p.field, "function": p.function}
            | ({} if p.length is None else {"length": p.length})
            for p in b.parts
        ],
    }


class _Checker:
    """Collects problems while reading a JSON object, so all of them are reported together."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def add(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def obj(self, value: Any, where: str) -> Mapping[str, Any] | None:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.add(where, f"must be an object, got {_type_name(value)}")
            return None
        return value

    def known_keys(self, obj: Mapping[str, Any], where: str, allowed: Sequence[str]) -> None:
        for key in obj:
            if key not in allowed:
                self.add(where, f"unknown key {key!r} (allowed: {', '.join(allowed)})")

    def boolean(self, obj: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
        value = obj.get(key, default)
        if not isinstance(value, bool):
            self.add(f"{where}.{key}", f"must be true or false, got {_type_name(value)}")
            return default
        return value

    def integer(
        self,
        obj: Mapping[str, Any],
        key: str,
        where: str,
        default: int | None,
        lo: int,
        hi: int,
    ) -> int | None:
        value = obj.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(f"{where}.{key}", f"must be an integer, got {_type_name(value)}")
            return default
        if not lo <= value <= hi:
            self.add(f"{where}.{key}", f"must be between {lo} and {hi}, got {value}")
            return default
        return value

    def choice(
        self, obj: Mapping[str, Any], key: str, where: str, default: str, allowed: Sequence[str]
    ) -> str:
        value = obj.get(key, default)
        if value not in allowed:
            self.add(
                f"{where}.{key}",
                f"must be one of {', '.join(allowed)}, got {_short(value)}",
            )
            return default
        return str(value)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _short(value: Any) -> str:
    """A schema value quoted for an error message (schema values are not record data)."""
    text = json.dumps(value, ensure_ascii=False) if _jsonable(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


_TOP_KEYS = ("version", "l", "hashing", "hardening", "features", "blocking")
_FEATURE_KEYS = (
    "identifier",
    "column",
    "normalisation",
    "comparison",
    "strategy",
    "missingValue",
    "validation",
    "salt",
)


def _parse_normalisation(c: _Checker, raw: Any, where: str) -> NormalisationSpec:
    obj = c.obj(raw, where)
    if obj is None:
        return NormalisationSpec()
    c.known_keys(
        obj, where, ("nfkc", "case", "replacements", "stripAccents", "punctuation", "whitespace")
    )
    replacements: list[tuple[str, str]] = []
    raw_rep = obj.get("replacements", [])
    if not isinstance(raw_rep, list):
        c.add(f"{where}.replacements", "must be an array of [from, to] string pairs")
    else:
        for i, pair in enumerate(raw_rep):
            if (
                not isinstance(pair, list | tuple)
                or len(pair) != 2
                or not all(isinstance(s, str) for s in pair)
            ):
                c.add(f"{where}.replacements[{i}]", "must be a [from, to] pair of strings")
            elif pair[0] == "":
                c.add(f"{where}.replacements[{i}]", "the string to replace must not be empty")
            else:
                replacements.append((pair[0], pair[1]))
    return NormalisationSpec(
        nfkc=c.boolean(obj, "nfkc", where, True),
        case=c.choice(obj, "case", where, "fold", CASE_MODES),
        replacements=tuple(replacements),
        strip_accents=c.boolean(obj, "stripAccents", where, False),
        punctuation=c.choice(obj, "punctuation", where, "remove", PUNCTUATION_MODES),
        whitespace=c.choice(obj, "whitespace", where, "collapse", WHITESPACE_MODES),
    )


def _parse_feature(c: _Checker, raw: Any, index: int, default_k: int) -> FieldSpec | None:
    label = f"features[{index}]"
    if not isinstance(raw, Mapping):
        c.add(label, f"must be an object, got {_type_name(raw)}")
        return None
    name = raw.get("identifier")
    if not isinstance(name, str) or not name.strip():
        c.add(f"{label}.identifier", "must be a non-empty string (the CSV column name)")
        name = f"#{index}"
    where = f"field {name!r}"
    c.known_keys(raw, where, _FEATURE_KEYS)
    norm = _parse_normalisation(c, raw.get("normalisation"), f"{where} normalisation")

    q, padding, positional = 2, True, False
    comp = c.obj(raw.get("comparison"), f"{where} comparison")
    if comp is not None:
        cw = f"{where} comparison"
        c.known_keys(comp, cw, ("type", "n", "padding", "positional"))
        if comp.get("type", "ngram") != "ngram":
            c.add(f"{cw}.type", f"only 'ngram' is supported, got {_short(comp.get('type'))}")
        q = c.integer(comp, "n", cw, 2, 1, 10) or 2
        padding = c.boolean(comp, "padding", cw, True)
        positional = c.boolean(comp, "positional", cw, False)

    k, weight = default_k, None
    bits_per_feature: int | None = None
    strat = c.obj(raw.get("strategy"), f"{where} strategy")
    if strat is not None:
        sw = f"{where} strategy"
        c.known_keys(strat, sw, ("bitsPerToken", "weight", "bitsPerFeature"))
        if "bitsPerFeature" in strat:
            bits_per_feature = c.integer(strat, "bitsPerFeature", sw, None, 1, MAX_BITS_PER_FEATURE)
            if "weight" in strat or "bitsPerToken" in strat:
                c.add(sw, "give one of bitsPerFeature, bitsPerToken and weight")
            elif bits_per_feature is not None:
                k = max(1, round(bits_per_feature / NOMINAL_TOKENS))
        raw_w = strat.get("weight")
        if raw_w is not None:
            if isinstance(raw_w, bool) or not isinstance(raw_w, int | float):
                c.add(f"{sw}.weight", f"must be a number, got {_type_name(raw_w)}")
            elif not (math.isfinite(raw_w) and raw_w > 0):
                c.add(f"{sw}.weight", f"must be a positive number, got {raw_w}")
            else:
                weight = float(raw_w)
                k = max(1, round(weight * default_k))
                if k > MAX_K:
                    c.add(f"{sw}.weight", f"gives k={k}, more than {MAX_K}")
        if "bitsPerToken" in strat:
            explicit = c.integer(strat, "bitsPerToken", sw, None, 1, MAX_K)
            if explicit is not None:
                if weight is not None and explicit != k:
                    c.add(
                        sw,
                        f"bitsPerToken={explicit} contradicts weight={weight} "
                        f"(which gives k={k}); give one of them",
                    )
                k = explicit

    sentinels: tuple[str, ...] = ("",)
    policy = "empty"
    miss = c.obj(raw.get("missingValue"), f"{where} missingValue")
    if miss is not None:
        mw = f"{where} missingValue"
        c.known_keys(miss, mw, ("sentinels", "policy"))
        raw_s = miss.get("sentinels", [""])
        if not isinstance(raw_s, list) or not all(isinstance(s, str) for s in raw_s):
            c.add(f"{mw}.sentinels", "must be an array of strings")
        else:
            sentinels = tuple(raw_s)
        policy = c.choice(miss, "policy", mw, "empty", MISSING_POLICIES)

    max_length, pattern, on_invalid = None, None, "error"
    val = c.obj(raw.get("validation"), f"{where} validation")
    if val is not None:
        vw = f"{where} validation"
        c.known_keys(val, vw, ("maxLength", "pattern", "onInvalid"))
        max_length = c.integer(val, "maxLength", vw, None, 1, 1_000_000)
        raw_p = val.get("pattern")
        if raw_p is not None:
            if not isinstance(raw_p, str):
                c.add(f"{vw}.pattern", f"must be a string, got {_type_name(raw_p)}")
            else:
                try:
                    re.compile(raw_p)
                    pattern = raw_p
                except re.error as exc:
                    c.add(f"{vw}.pattern", f"is not a valid regular expression ({exc})")
        on_invalid = c.choice(val, "onInvalid", vw, "error", INVALID_POLICIES)

    column = None
    if "column" in raw:
        raw_col = raw.get("column")
        if not isinstance(raw_col, str) or not raw_col.strip():
            c.add(f"{where}.column", "must be a non-empty string (a CSV column name)")
        elif raw_col != name:
            column = raw_col

    salt_field = None
    salt = c.obj(raw.get("salt"), f"{where} salt")
    if salt:
        c.known_keys(salt, f"{where} salt", ("field",))
        sf = salt.get("field")
        if not isinstance(sf, str) or not sf:
            c.add(f"{where} salt.field", "must be a column name")
        elif sf == name:
            c.add(f"{where} salt.field", "a field cannot be salted with itself")
        else:
            salt_field = sf

    return FieldSpec(
        name=name,
        q=q,
        padding=padding,
        positional=positional,
        k=k,
        weight=weight,
        normalisation=norm,
        missing_sentinels=sentinels,
        missing_policy=policy,
        max_length=max_length,
        pattern=pattern,
        on_invalid=on_invalid,
        salt_field=salt_field,
        column=column,
        bits_per_feature=bits_per_feature,
    )


def _parse_blocking(c: _Checker, raw: Any, index: int) -> BlockingKeySpec | None:
    label = f"blocking[{index}]"
    if not isinstance(raw, Mapping):
        c.add(label, f"must be an object, got {_type_name(raw)}")
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        c.add(f"{label}.name", "must be a non-empty string")
        name = f"#{index}"
    where = f"blocking key {name!r}"
    c.known_keys(raw, where, ("name", "parts", "lsh"))
    if "lsh" in raw:
        if "parts" in raw:
            c.add(where, "give either parts or lsh, not both")
            return None
        lsh = _parse_lsh(c, raw.get("lsh"), f"{where} lsh")
        return None if lsh is None else BlockingKeySpec(name, (), lsh)
    raw_parts = raw.get("parts")
    if not isinstance(raw_parts, list) or not raw_parts:
        c.add(f"{where}.parts", "must be a non-empty array")
        return None
    parts: list[BlockingPart] = []
    for j, rp in enumerate(raw_parts):
        pw = f"{where} parts[{j}]"
        if not isinstance(rp, Mapping):
            c.add(pw, f"must be an object, got {_type_name(rp)}")
            continue
        c.known_keys(rp, pw, ("field", "function", "length"))
        fld = rp.get("field")
        if not isinstance(fld, str) or not fld:
            c.add(f"{pw}.field", "must be a column name")
            continue
        fn = c.choice(rp, "function", pw, "", BLOCKING_FUNCTIONS)
        if not fn:
            continue
        length = c.integer(rp, "length", pw, None, 1, 100)
        if fn in _NEEDS_LENGTH and length is None and "length" not in rp:
            c.add(f"{pw}.length", f"function {fn!r} needs a length")
            continue
        if fn not in _NEEDS_LENGTH and "length" in rp:
            c.add(f"{pw}.length", f"function {fn!r} takes no length")
            continue
        parts.append(BlockingPart(fld, fn, length))
    return BlockingKeySpec(name, tuple(parts))


def _parse_lsh(c: _Checker, raw: Any, where: str) -> LshSpec | None:
    obj = c.obj(raw, where)
    if obj is None:
        return None
    c.known_keys(obj, where, ("bands", "bitsPerBand", "fields"))
    before = len(c.problems)
    bands = c.integer(obj, "bands", where, 8, 1, MAX_LSH_BANDS) or 8
    per_band = c.integer(obj, "bitsPerBand", where, 24, 1, 64) or 24
    raw_fields = obj.get("fields", [])
    if not isinstance(raw_fields, list) or not all(isinstance(f, str) and f for f in raw_fields):
        c.add(f"{where}.fields", "must be an array of feature names")
        raw_fields = []
    if len(c.problems) > before:
        return None
    return LshSpec(bands, per_band, tuple(raw_fields))


_V2_ONLY = "needs schema version 2"


def _check_v2(
    c: _Checker, version: int, fields: Sequence[FieldSpec], blocking: Sequence[BlockingKeySpec]
) -> None:
    """Version-2 keys in a version-1 schema are an error (a v1 file reads as it always did)."""
    if version >= 2:
        return
    for f in fields:
        if f.column is not None:
            c.add(f"field {f.name!r}.column", _V2_ONLY)
        if f.bits_per_feature is not None:
            c.add(f"field {f.name!r} strategy.bitsPerFeature", _V2_ONLY)
    for b in blocking:
        if b.lsh is not None:
            c.add(f"blocking key {b.name!r}.lsh", _V2_ONLY)


def parse_schema(obj: Mapping[str, Any], source: str = "<schema>") -> LinkageSchema:
    """Validate a decoded JSON schema; raise SchemaError listing every problem."""
    c = _Checker()
    if not isinstance(obj, Mapping):
        raise SchemaError(source, [f"top level: must be an object, got {_type_name(obj)}"])
    c.known_keys(obj, "top level", _TOP_KEYS)
    version = obj.get("version")
    if isinstance(version, bool) or version not in SCHEMA_VERSIONS:
        c.add("version", f"must be 1 or {SCHEMA_VERSION}, got {_short(version)}")
        version = SCHEMA_VERSION
    if "l" not in obj:
        c.add("l", "is required (filter length in bits)")
    filter_bits = c.integer(obj, "l", "schema", 1024, 8, MAX_FILTER_BITS) or 1024

    hashing = HashingSpec()
    h = c.obj(obj.get("hashing"), "hashing")
    if h is not None:
        c.known_keys(h, "hashing", ("scheme", "k"))
        hashing = HashingSpec(
            scheme=c.choice(h, "scheme", "hashing", DEFAULT_SCHEME, HASH_SCHEMES),
            k=c.integer(h, "k", "hashing", DEFAULT_K, 1, MAX_K) or DEFAULT_K,
        )

    hardening = HardeningSpec()
    hd = c.obj(obj.get("hardening"), "hardening")
    if hd is not None:
        c.known_keys(hd, "hardening", ("xorFold", "balance", "blip"))
        xor_fold = c.boolean(hd, "xorFold", "hardening", False)
        balance = c.boolean(hd, "balance", "hardening", False)
        flip: float | None = None
        blip = hd.get("blip")
        if blip is not None:
            if not isinstance(blip, Mapping):
                c.add("hardening.blip", "must be an object {flipProbability: f} or null")
            else:
                c.known_keys(blip, "hardening.blip", ("flipProbability",))
                f = blip.get("flipProbability")
                if isinstance(f, bool) or not isinstance(f, int | float) or not 0 < f < 0.5:
                    c.add(
                        "hardening.blip.flipProbability",
                        f"must be a number with 0 < f < 0.5, got {_short(f)}",
                    )
                else:
                    flip = float(f)
        if xor_fold and filter_bits % 2:
            c.add("hardening.xorFold", f"needs an even filter length l, got l={filter_bits}")
        hardening = HardeningSpec(xor_fold, balance, flip)

    fields: list[FieldSpec] = []
    raw_features = obj.get("features")
    if not isinstance(raw_features, list) or not raw_features:
        c.add("features", "must be a non-empty array of field definitions")
    else:
        seen: set[str] = set()
        for i, rf in enumerate(raw_features):
            spec = _parse_feature(c, rf, i, hashing.k)
            if spec is None:
                continue
            if spec.name in seen:
                c.add(f"field {spec.name!r}", "is defined more than once")
            seen.add(spec.name)
            fields.append(spec)

    blocking: list[BlockingKeySpec] = []
    raw_blocking = obj.get("blocking", [])
    if not isinstance(raw_blocking, list):
        c.add("blocking", "must be an array of blocking-key definitions")
    else:
        names: set[str] = set()
        for i, rb in enumerate(raw_blocking):
            spec_b = _parse_blocking(c, rb, i)
            if spec_b is None:
                continue
            if spec_b.name in names:
                c.add(f"blocking key {spec_b.name!r}", "is defined more than once")
            names.add(spec_b.name)
            blocking.append(spec_b)

    feature_names = {f.name for f in fields}
    for b in blocking:
        if b.lsh is not None:
            for fname in b.lsh.fields:
                if fname not in feature_names:
                    c.add(f"blocking key {b.name!r} lsh.fields", f"{fname!r} is not a feature")
    users: dict[str, set[str]] = {}
    for f in fields:
        users.setdefault(f.source_column, set()).add(f.name)
    for col, names_of in sorted(users.items()):
        if len(names_of) > 1:
            c.add("features", f"column {col!r} is read by more than one field")
    _check_v2(c, int(version), fields, blocking)
    if c.problems:
        raise SchemaError(source, c.problems)
    return LinkageSchema(
        version=int(version),
        fields=tuple(fields),
        filter_bits=filter_bits,
        hashing=hashing,
        hardening=hardening,
        blocking=tuple(blocking),
    )


def load_schema(path: str | Path) -> LinkageSchema:
    """Read and validate a schema file; every failure is a SchemaError naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(str(p), ["file not found"]) from None
    except OSError as exc:
        raise SchemaError(str(p), [f"cannot read file ({exc.strerror})"]) from None
    except UnicodeDecodeError:
        raise SchemaError(str(p), ["file is not valid UTF-8"]) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(
            str(p), [f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]
        ) from None
    return parse_schema(obj, source=str(p))
