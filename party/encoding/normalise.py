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

import unicodedata

from party.encoding.schema import FieldSpec, NormalisationSpec

PAD = "_"
SALT_SEPARATOR = "\x1f"
DEFAULT_NORMALISATION = NormalisationSpec()


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "PS"


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
        s = "".join(ch for ch in s if not _is_punct(ch))
    elif spec.punctuation == "space":
        s = "".join(" " if _is_punct(ch) else ch for ch in s)
    if spec.whitespace == "collapse":
        s = " ".join(s.split())
    elif spec.whitespace == "remove":
        s = "".join(s.split())
    return s


def qgrams(normalised: str, q: int, padding: bool = True, positional: bool = False) -> list[str]:
    """The distinct q-grams of an already normalised value, in order of first occurrence."""
    if not normalised:
        return []
    s = PAD * (q - 1) + normalised + PAD * (q - 1) if padding and q > 1 else normalised
    grams = [s] if len(s) < q else [s[i : i + q] for i in range(len(s) - q + 1)]
    if positional:
        grams = [f"{i}:{g}" for i, g in enumerate(grams)]
    return list(dict.fromkeys(grams))


def field_qgrams(spec: FieldSpec, value: str, salt: str | None = None) -> list[str]:
    """Normalised (and salted) q-grams of one field value; ``salt`` is the raw salt value."""
    grams = qgrams(normalise(value, spec.normalisation), spec.q, spec.padding, spec.positional)
    if spec.salt_field is not None:
        suffix = SALT_SEPARATOR + normalise(salt or "", spec.normalisation)
        grams = [g + suffix for g in grams]
    return grams
