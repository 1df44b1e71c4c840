"""Normalisation of field values and their split into q-grams (the tokens that get hashed).

Normalisation applies, in order: Unicode NFKC; case (casefold / lower / upper / none); the custom
literal replacements in order; optional accent stripping (NFKD, drop combining marks, NFC);
punctuation (Unicode categories P* and S*: remove / replace by a space / keep); whitespace
(collapse runs to one space and strip / remove all / keep).

Q-grams. With padding, ``q - 1`` copies of ``_`` are added at both ends (so first and last letters
get their own grams). The value's q-grams are the substrings of length q, deduplicated in order of
first occurrence; a non-empty value shorter than q (no padding) is its own single gram; an empty
value has none. Positional q-grams are written ``<index>:<gram>``. A salted field appends
``U+001F`` and the salt value (normalised the same way) to every gram. Grams are hashed as UTF-8.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
import unicodedata
from collections.abc import Callable

from party.encoding.schema import FieldSpec, NormalisationSpec

PAD = "_"
SALT_SEPARATOR = "\x1f"
DEFAULT_NORMALISATION = NormalisationSpec()


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


class _PunctTable(dict[int, str | None]):
    """A str.translate table built lazily: punctuation/symbol code points map to ``replacement``,
    others to themselves (so translate runs in C after the first sight of each character)."""

    def __init__(self, replacement: str | None) -> None:
        super().__init__()
        self.replacement = replacement

    def __missing__(self, code: int) -> str | None:
        ch = chr(code)
        value = self.replacement if _is_punct(ch) else ch
        self[code] = value
        return value


_REMOVE_PUNCT = _PunctTable(None)
_SPACE_PUNCT = _PunctTable(" ")


def valid_text(value: str) -> bool:
    """False if the value holds lone surrogates, i.e. bytes that were not valid UTF-8 (CSV files
    are read with errors="surrogateescape" so such bytes can be reported with row and field)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def normalise(value: str, spec: NormalisationSpec) -> str:
    """The normalised form of one value (see the module docstring for the steps)."""
    s = unicodedata.normalize("NFKC", value) if spec.nfkc else value
    if spec.case == "fold":
        s = s.casefold()
    elif spec.case == "lower":
        s = s.lower()
    elif spec.case == "upper":
        s = s.upper()
    for old, new in spec.replacements:
        s = s.replace(old, new)
    if spec.strip_accents:
        s = unicodedata.normalize(
            "NFC",
            "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch)),
        )
    if spec.punctuation == "remove":
        s = s.translate(_REMOVE_PUNCT)
    elif spec.punctuation == "space":
        s = s.translate(_SPACE_PUNCT)
    if spec.whitespace == "collapse":
        s = " ".join(s.split())
    elif spec.whitespace == "remove":
        s = "".join(s.split())
    return s


_SEP = "\0"  # joins a batch's values: nothing normalises to or from NUL, and it blocks composition
_SPACES = re.compile(
    r"\s+"
)  # the whitespace str.split() splits on (the tests check every code point)
_SPACED_SEP = re.compile(" ?\0 ?")


def normalise_many(values: list[str], spec: NormalisationSpec) -> list[str]:
    """``[normalise(v, spec) for v in values]``, each step run once over the values joined with
    NUL. Every step maps a NUL-free value independently of its neighbours: NFKC/NFKD/NFC do not
    compose across a NUL (a starter that composes with nothing), case mapping and punctuation
    are per character (NUL has no case and is a control character), a replacement without NUL
    cannot match across it, and whitespace runs never contain it. Values containing NUL, or a
    replacement with NUL or an empty pattern, take the per-value path."""
    joined = _SEP.join(values)
    if (
        not values
        or joined.count(_SEP) != len(values) - 1
        or any(not old or _SEP in old + new for old, new in spec.replacements)
    ):
        return [normalise(v, spec) for v in values]
    s = normalise(joined, dataclasses.replace(spec, whitespace="keep"))
    if spec.whitespace == "collapse":
        s = _SPACED_SEP.sub(_SEP, _SPACES.sub(" ", s))
        s = s[s.startswith(" ") : len(s) - s.endswith(" ")]
    elif spec.whitespace == "remove":
        s = _SPACES.sub("", s)
    out = s.split(_SEP)
    if len(out) != len(values):  # not expected (see above); the exact path decides
        return [normalise(v, spec) for v in values]
    return out


NormaliserMemos = dict[NormalisationSpec, dict[str, str]]  # spec -> raw value -> normalised
MAX_MEMO = 200_000  # values per normalisation spec; the memo is cleared when full


def memoised_normaliser(
    spec: NormalisationSpec, memos: NormaliserMemos | None = None
) -> Callable[[str], str]:
    """``normalise(., spec)`` with a memo: ``memos[spec]``, which an encoder shares between its
    field encoders and blocking-key parts and drops with itself (normalisation is a pure
    function), or a private one."""
    memo = ({} if memos is None else memos).setdefault(spec, {})

    def norm(value: str) -> str:
        out = memo.get(value)
        if out is None:
            if len(memo) >= MAX_MEMO:
                memo.clear()
            out = memo[value] = normalise(value, spec)
        return out

    return norm


def memoised_normaliser_many(
    spec: NormalisationSpec, memos: NormaliserMemos | None = None
) -> Callable[[list[str]], list[str]]:
    """``normalise_many(., spec)`` through a memo, as ``memoised_normaliser``."""
    memo = ({} if memos is None else memos).setdefault(spec, {})

    def norm_many(values: list[str]) -> list[str]:
        got = list(map(memo.get, values))
        if None not in got:
            return got  # type: ignore[return-value]
        if len(memo) + len(values) > MAX_MEMO:
            memo.clear()
            got = [None] * len(values)
        miss = [v for v, g in zip(values, got, strict=True) if g is None]
        normalised = normalise_many(miss, spec)
        memo.update(zip(miss, normalised, strict=True))
        if len(miss) == len(values):
            return normalised
        return list(map(memo.__getitem__, values))

    return norm_many


def qgram_list(
    normalised: str, q: int, padding: bool = True, positional: bool = False
) -> list[str]:
    """All q-grams of an already normalised value, in order, duplicates kept."""
    if not normalised:
        return []
    if padding and q > 1:
        pad = PAD * (q - 1)
        s = pad + normalised + pad
    else:
        s = normalised
    if len(s) <= q:
        grams = [s]
    elif q == 1:
        grams = list(s)
    elif q == 2:
        grams = list(map(operator.add, s, s[1:]))
    else:
        grams = [s[i : i + q] for i in range(len(s) - q + 1)]
    if positional:
        grams = [f"{i}:{g}" for i, g in enumerate(grams)]
    return grams


def qgrams(normalised: str, q: int, padding: bool = True, positional: bool = False) -> list[str]:
    """The distinct q-grams of an already normalised value, in order of first occurrence."""
    return list(dict.fromkeys(qgram_list(normalised, q, padding, positional)))


def field_qgram_list(
    spec: FieldSpec,
    value: str,
    salt: str | None = None,
    norm: Callable[[str], str] | None = None,
) -> list[str]:
    """field_qgrams with duplicates kept (what the encoder hashes; duplicates set no new bits).
    ``norm``: the field's normalisation as a function (e.g. memoised), default ``normalise``."""
    if norm is None:
        norm = functools.partial(normalise, spec=spec.normalisation)
    grams = qgram_list(norm(value), spec.q, spec.padding, spec.positional)
    if spec.salt_field is not None:
        suffix = SALT_SEPARATOR + norm(salt or "")
        grams = [g + suffix for g in grams]
    return grams


def field_qgrams(spec: FieldSpec, value: str, salt: str | None = None) -> list[str]:
    """Normalised (and salted) distinct q-grams of one field value; ``salt`` is the raw salt value."""
    return list(dict.fromkeys(field_qgram_list(spec, value, salt)))
