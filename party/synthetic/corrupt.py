"""Record corruption: the typing, scanning, hearing and data-entry errors that make linkage fuzzy.

`Corruptor(seed).corrupt(record, n_errors)` returns a copy of a person record (a mapping of column name
to string) with `n_errors` errors applied one after another. Each error first picks a field (weighted:
names most often, then date of birth and address), then an operator that applies to that field's kind:

- text fields (given_name, surname, street_address, suburb and any unknown column): character
  insertion, deletion, substitution, transposition of two adjacent characters, an OCR confusion
  (e.g. "m" <-> "rn", "cl" <-> "d", "l" <-> "1"), a phonetic variant (a spelling-variant table such as
  catherine/katherine, then rules such as "ph" <-> "f", "ck" -> "k", doubled/single consonants), a
  keyboard typo (a key adjacent on a QWERTY keyboard), or a missing value;
- name fields additionally: given name and surname swapped;
- dob (YYYY-MM-DD): a date typo (day and month swapped, day or month or year off by one, the last
  two year digits transposed, one digit mistyped), always giving a valid date, or a missing value;
- postcode: digit substitution, transposition, keyboard typo (adjacent digit), missing;
- sex, state: missing value.

An operator that cannot change the chosen value (e.g. no OCR-confusable character in it) is replaced
by another applicable one, so every error changes the record whenever the record has any non-empty
corruptible field. Determinism: the same seed and the same sequence of calls give the same output.
The model follows the error classes of the GeCo / FEBRL data generators (Christen & Vatsalan,
"Flexible and extensible generation and corruption of personal data", CIKM 2013).
"""

from __future__ import annotations

import datetime as _dt
import random
from collections.abc import Mapping, Sequence

from party.errors import PprlError

LETTERS = "abcdefghijklmnopqrstuvwxyz"
DIGITS = "0123456789"

TEXT_OPERATORS = (
    "insert",
    "delete",
    "substitute",
    "transpose",
    "ocr",
    "phonetic",
    "keyboard",
    "missing",
)
NAME_OPERATORS = (*TEXT_OPERATORS, "swap_names")
OPERATORS = (*NAME_OPERATORS, "date")

# Relative operator weights (only operators applicable to the chosen field take part).
OPERATOR_WEIGHTS = {
    "insert": 1.0,
    "delete": 1.0,
    "substitute": 1.0,
    "transpose": 0.8,
    "ocr": 0.6,
    "phonetic": 1.2,
    "keyboard": 1.0,
    "missing": 0.5,
    "swap_names": 0.3,
    "date": 3.0,
}

# Relative field weights; columns not listed (and not ids) weigh DEFAULT_FIELD_WEIGHT.
FIELD_WEIGHTS = {
    "given_name": 0.25,
    "surname": 0.25,
    "dob": 0.15,
    "street_address": 0.15,
    "suburb": 0.08,
    "postcode": 0.07,
    "sex": 0.025,
    "state": 0.025,
}
DEFAULT_FIELD_WEIGHT = 0.1
ID_COLUMNS = frozenset({"rec_id", "id", "record_id", "entity_id"})

NAME_FIELDS = frozenset({"given_name", "surname"})
DIGIT_FIELDS = frozenset({"postcode"})
MISSING_ONLY_FIELDS = frozenset({"sex", "state"})

OCR_CONFUSIONS = (
    ("rn", "m"),
    ("m", "rn"),
    ("cl", "d"),
    ("d", "cl"),
    ("vv", "w"),
    ("w", "vv"),
    ("l", "1"),
    ("1", "l"),
    ("i", "l"),
    ("l", "i"),
    ("o", "0"),
    ("0", "o"),
    ("s", "5"),
    ("5", "s"),
    ("b", "6"),
    ("6", "b"),
    ("g", "9"),
    ("9", "g"),
    ("e", "c"),
    ("c", "e"),
    ("h", "b"),
    ("n", "h"),
    ("u", "v"),
    ("v", "u"),
    ("z", "2"),
    ("2", "z"),
    ("8", "3"),
    ("3", "8"),
    ("q", "g"),
    ("ii", "u"),
)

# Whole-value spelling variants (either direction), tried before the rules below.
NAME_VARIANTS = (
    ("catherine", "katherine", "kathryn", "catharine"),
    ("steven", "stephen"),
    ("geoffrey", "jeffrey", "jeffery"),
    ("philip", "phillip"),
    ("sean", "shaun", "shawn"),
    ("brian", "bryan"),
    ("alan", "allan", "allen"),
    ("carl", "karl"),
    ("eric", "erik"),
    ("sara", "sarah"),
    ("ann", "anne"),
    ("lee", "leigh"),
    ("john", "jon"),
    ("mark", "marc"),
    ("nicole", "nichole"),
    ("rebecca", "rebekah"),
    ("tracey", "tracy"),
    ("kylie", "kyley"),
    ("kerry", "kerrie"),
    ("vicki", "vicky", "vickie"),
    ("zoe", "zoey"),
    ("isabella", "isabela"),
    ("lachlan", "lochlan"),
    ("jayden", "jaden", "jaiden"),
    ("aiden", "aidan"),
    ("mitchell", "mitchel"),
    ("thompson", "thomson"),
    ("smith", "smyth"),
    ("reid", "reed", "read"),
    ("clarke", "clark"),
    ("gray", "grey"),
    ("mcdonald", "macdonald"),
    ("o'brien", "obrien", "o brien"),
    ("o'connor", "oconnor", "o conner"),
    ("nguyen", "nguyn"),
    ("mohammed", "mohamed", "muhammad"),
    ("stewart", "stuart"),
    ("anderson", "andersen"),
    ("peterson", "petersen"),
)
_VARIANT_OF: dict[str, tuple[str, ...]] = {}
for _group in NAME_VARIANTS:
    for _name in _group:
        _VARIANT_OF[_name] = tuple(v for v in _group if v != _name)

# (pattern, replacement) spelling rules that sound alike.
PHONETIC_RULES = (
    ("ph", "f"),
    ("f", "ph"),
    ("ck", "k"),
    ("ck", "c"),
    ("k", "ck"),
    ("c", "k"),
    ("k", "c"),
    ("ie", "y"),
    ("y", "ie"),
    ("ey", "y"),
    ("ee", "ea"),
    ("ea", "ee"),
    ("ou", "ow"),
    ("th", "t"),
    ("sch", "sh"),
    ("sh", "sch"),
    ("z", "s"),
    ("s", "z"),
    ("x", "ks"),
    ("ks", "x"),
    ("qu", "kw"),
    ("gh", "g"),
    ("mb", "m"),
    ("kn", "n"),
    ("wr", "r"),
    ("ae", "e"),
    ("ai", "ay"),
    ("ay", "ai"),
    ("mac", "mc"),
    ("mc", "mac"),
    ("son", "sen"),
    ("sen", "son"),
    ("ll", "l"),
    ("tt", "t"),
    ("nn", "n"),
    ("ss", "s"),
    ("rr", "r"),
    ("l", "ll"),
    ("t", "tt"),
    ("n", "nn"),
    ("i", "y"),
    ("y", "i"),
    ("er", "a"),
)

_QWERTY_ROWS = ("1234567890", "qwertyuiop", "asdfghjkl", "zxcvbnm")


def _keyboard_neighbours() -> dict[str, str]:
    pos = {ch: (r, c) for r, row in enumerate(_QWERTY_ROWS) for c, ch in enumerate(row)}
    out: dict[str, str] = {}
    for ch, (r, c) in pos.items():
        near = []
        for other, (r2, c2) in pos.items():
            # Same row: one key left or right; adjacent row: the keys touching (staggered layout).
            if other != ch and (
                (r2 == r and abs(c2 - c) == 1) or (abs(r2 - r) == 1 and c2 - c in (-1, 0, 1))
            ):
                near.append(other)
        out[ch] = "".join(sorted(near))
    return out


KEYBOARD_NEIGHBOURS = _keyboard_neighbours()


class CorruptionError(PprlError):
    """An invalid corruption request (unknown operator, field or parameter)."""


class Corruptor:
    """Applies random realistic errors to person records; deterministic for a given seed.

    `operators` restricts the operators used (default: all in OPERATORS); `field_weights` overrides
    FIELD_WEIGHTS (a weight of 0 excludes a field).
    """

    def __init__(
        self,
        seed: int | None = 0,
        *,
        operators: Sequence[str] | None = None,
        field_weights: Mapping[str, float] | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        ops = tuple(operators) if operators is not None else OPERATORS
        unknown = [op for op in ops if op not in OPERATOR_WEIGHTS]
        if unknown:
            raise CorruptionError(
                f"unknown corruption operator(s) {unknown}; known: {', '.join(OPERATORS)}"
            )
        if not ops:
            raise CorruptionError("at least one corruption operator is required")
        self.operators = ops
        self.field_weights = dict(FIELD_WEIGHTS)
        if field_weights is not None:
            for name, w in field_weights.items():
                if not w >= 0:
                    raise CorruptionError(f"field weight for {name!r} must be >= 0")
                self.field_weights[name] = float(w)

    # -- public API ---------------------------------------------------------------------------
    def corrupt(self, record: Mapping[str, str], n_errors: int = 1) -> dict[str, str]:
        """A copy of `record` with `n_errors` errors applied (id columns are never touched)."""
        if n_errors < 0:
            raise CorruptionError(f"n_errors must be >= 0, got {n_errors}")
        out = {k: ("" if v is None else str(v)) for k, v in record.items()}
        for _ in range(n_errors):
            self._one_error(out)
        return out

    def apply(self, operator: str, record: Mapping[str, str], field: str) -> dict[str, str]:
        """A copy of `record` with `operator` applied to `field` (unchanged if not applicable)."""
        if operator not in OPERATOR_WEIGHTS:
            raise CorruptionError(f"unknown corruption operator {operator!r}")
        if field not in record:
            raise CorruptionError(f"record has no field {field!r}")
        out = {k: ("" if v is None else str(v)) for k, v in record.items()}
        self._apply(operator, out, field)
        return out

    # -- internals ----------------------------------------------------------------------------
    def _applicable(self, field: str) -> tuple[str, ...]:
        if field in MISSING_ONLY_FIELDS:
            kinds: tuple[str, ...] = ("missing",)
        elif field == "dob":
            kinds = ("date", "missing")
        elif field in DIGIT_FIELDS:
            kinds = ("substitute", "transpose", "keyboard", "missing")
        elif field in NAME_FIELDS:
            kinds = NAME_OPERATORS
        else:
            kinds = TEXT_OPERATORS
        return tuple(op for op in kinds if op in self.operators)

    def _one_error(self, rec: dict[str, str]) -> None:
        fields = [
            f
            for f in rec
            if f not in ID_COLUMNS
            and rec[f]
            and self.field_weights.get(f, DEFAULT_FIELD_WEIGHT) > 0
            and self._applicable(f)
        ]
        if not fields:
            return
        weights = [self.field_weights.get(f, DEFAULT_FIELD_WEIGHT) for f in fields]
        # Pick a field, then an operator; fall back to other operators/fields until one changes it.
        order = self._weighted_order(fields, weights)
        for field in order:
            ops = list(self._applicable(field))
            op_order = self._weighted_order(ops, [OPERATOR_WEIGHTS[o] for o in ops])
            for op in op_order:
                if self._apply(op, rec, field):
                    return

    def _weighted_order(self, items: list[str], weights: list[float]) -> list[str]:
        """A random permutation of items where heavier items tend to come first."""
        # Efraimidis-Spirakis weighted sampling without replacement: key = u^(1/w).
        keyed = [(self.rng.random() ** (1.0 / w), it) for it, w in zip(items, weights, strict=True)]
        keyed.sort(reverse=True)
        return [it for _, it in keyed]

    def _apply(self, op: str, rec: dict[str, str], field: str) -> bool:
        """Apply op to rec[field] in place; True iff the record changed."""
        value = rec[field]
        if op == "swap_names":
            g, s = rec.get("given_name", ""), rec.get("surname", "")
            if "given_name" not in rec or "surname" not in rec or g == s:
                return False
            rec["given_name"], rec["surname"] = s, g
            return True
        if not value:
            return False
        alphabet = DIGITS if field in DIGIT_FIELDS or value.isdigit() else LETTERS
        new: str | None
        if op == "missing":
            new = ""
        elif op == "insert":
            new = self._insert(value, alphabet)
        elif op == "delete":
            new = self._delete(value)
        elif op == "substitute":
            new = self._substitute(value, alphabet)
        elif op == "transpose":
            new = self._transpose(value)
        elif op == "ocr":
            new = self._ocr(value)
        elif op == "phonetic":
            new = self._phonetic(value)
        elif op == "keyboard":
            new = self._keyboard(value, alphabet)
        elif op == "date":
            new = self._date(value)
        else:  # pragma: no cover - guarded by the constructor
            raise CorruptionError(f"unknown corruption operator {op!r}")
        if new is None or new == value:
            return False
        rec[field] = new
        return True

    def _insert(self, v: str, alphabet: str) -> str:
        i = self.rng.randint(0, len(v))
        return v[:i] + self.rng.choice(alphabet) + v[i:]

    def _delete(self, v: str) -> str | None:
        if len(v) < 2:
            return None
        i = self.rng.randrange(len(v))
        return v[:i] + v[i + 1 :]

    def _substitute(self, v: str, alphabet: str) -> str:
        i = self.rng.randrange(len(v))
        choices = alphabet.replace(v[i], "") if v[i] in alphabet else alphabet
        return v[:i] + self.rng.choice(choices) + v[i + 1 :]

    def _transpose(self, v: str) -> str | None:
        spots = [i for i in range(len(v) - 1) if v[i] != v[i + 1]]
        if not spots:
            return None
        i = self.rng.choice(spots)
        return v[:i] + v[i + 1] + v[i] + v[i + 2 :]

    def _replace_at_random_occurrence(self, v: str, rules: Sequence[tuple[str, str]]) -> str | None:
        spots = []
        for pat, rep in rules:
            start = v.find(pat)
            while start >= 0:
                spots.append((start, pat, rep))
                start = v.find(pat, start + 1)
        if not spots:
            return None
        i, pat, rep = self.rng.choice(spots)
        return v[:i] + rep + v[i + len(pat) :]

    def _ocr(self, v: str) -> str | None:
        return self._replace_at_random_occurrence(v, OCR_CONFUSIONS)

    def _phonetic(self, v: str) -> str | None:
        variants = _VARIANT_OF.get(v.lower())
        if variants and self.rng.random() < 0.7:
            return self.rng.choice(variants)
        return self._replace_at_random_occurrence(v, PHONETIC_RULES)

    def _keyboard(self, v: str, alphabet: str) -> str | None:
        # Digit-only values get digit neighbours (a postcode typed on the number row).
        near = {
            i: "".join(c for c in KEYBOARD_NEIGHBOURS.get(ch.lower(), "") if c in alphabet)
            for i, ch in enumerate(v)
        }
        spots = [i for i, n in near.items() if n]
        if not spots:
            return None
        i = self.rng.choice(spots)
        return v[:i] + self.rng.choice(near[i]) + v[i + 1 :]

    def _date(self, v: str) -> str | None:
        try:
            d = _dt.date.fromisoformat(v)
        except ValueError:
            # Not an ISO date: fall back to a digit typo.
            digits = [i for i, ch in enumerate(v) if ch.isdigit()]
            if not digits:
                return None
            i = self.rng.choice(digits)
            return v[:i] + self.rng.choice(DIGITS.replace(v[i], "")) + v[i + 1 :]
        kinds = ["swap_day_month", "day", "month", "year", "year_digits", "digit"]
        self.rng.shuffle(kinds)
        for kind in kinds:
            new = self._date_kind(d, kind)
            if new is not None and new != d:
                return new.isoformat()
        return None

    def _date_kind(self, d: _dt.date, kind: str) -> _dt.date | None:
        def make(y: int, m: int, day: int) -> _dt.date | None:
            try:
                return _dt.date(y, m, day)
            except ValueError:
                return None

        step = self.rng.choice((-1, 1))
        if kind == "swap_day_month":
            return make(d.year, d.day, d.month)
        if kind == "day":
            return make(d.year, d.month, d.day + step)
        if kind == "month":
            return make(d.year, d.month + step, d.day)
        if kind == "year":
            return make(d.year + step, d.month, d.day)
        if kind == "year_digits":
            y = f"{d.year:04d}"
            return make(int(y[:2] + y[3] + y[2]), d.month, d.day)
        # One digit of YYYYMMDD mistyped, keeping a valid date.
        s = f"{d.year:04d}{d.month:02d}{d.day:02d}"
        for _ in range(10):
            i = self.rng.randrange(8)
            t = s[:i] + self.rng.choice(DIGITS.replace(s[i], "")) + s[i + 1 :]
            got = make(int(t[:4]), int(t[4:6]), int(t[6:]))
            if got is not None and got.year >= 1000:
                return got
        return None
