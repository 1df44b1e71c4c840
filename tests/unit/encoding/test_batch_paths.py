"""The encoder's batch paths (many values per call) equal the per-value definitions they speed up,
on random text: ASCII (the fast paths), NUL (their separator), and non-ASCII (the fallbacks)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding.blocking import (
    part_function,
    part_values,
    phonetic_letters,
    phonetic_letters_many,
)
from party.encoding.schema import parse_schema

ASCII = st.text(alphabet=st.characters(max_codepoint=127), max_size=12)
ANY = st.text(max_size=12)
VALUES = st.lists(st.one_of(ASCII, ANY), max_size=30)
WORDS = ["Smith", "O'Neil-Smyth", "9eorgia", "  ", "", "12a Queen St.", "Zoë", "Müller", "a\0b"]


@settings(max_examples=300, deadline=None)
@given(st.lists(ASCII, max_size=30))
def test_phonetic_letters_many_equal_per_value_on_ascii(values: list[str]) -> None:
    assert phonetic_letters_many(values) == [phonetic_letters(v) for v in values]


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_phonetic_letters_many_equal_per_value(values: list[str]) -> None:
    assert phonetic_letters_many(values) == [phonetic_letters(v) for v in values]


def test_phonetic_letters_many_known_values() -> None:
    assert phonetic_letters_many(WORDS) == [phonetic_letters(v) for v in WORDS]
    assert phonetic_letters_many(["1234", "d'SSouza 4", "---"]) == ["lzea", "dssouzaa", ""]
    assert phonetic_letters_many([]) == []


SCHEMA = parse_schema(
    {
        "version": 1,
        "l": 128,
        "features": [
            {"identifier": "name"},
            {"identifier": "dob", "normalisation": {"punctuation": "remove"}},
        ],
        "blocking": [
            {
                "name": f"k{i}",
                "parts": [{"field": field, "function": fn, **({"length": 2} if ln else {})}],
            }
            for i, (field, fn, ln) in enumerate(
                [
                    ("name", "soundex", False),
                    ("name", "nysiis", False),
                    ("name", "metaphone", False),
                    ("name", "exact", False),
                    ("name", "prefix", True),
                    ("dob", "year", False),
                    ("dob", "day_month", False),
                    ("dob", "number", False),
                    ("other", "soundex", False),
                    ("other", "postcode_prefix", True),
                ]
            )
        ],
    }
)


@settings(max_examples=100, deadline=None)
@given(VALUES)
def test_part_values_equal_part_function(values: list[str]) -> None:
    values = values + WORDS
    for key in SCHEMA.blocking:
        (part,) = key.parts
        one = part_function(part, SCHEMA)
        assert part_values(part, SCHEMA)(values) == [one(v) for v in values], part.function
