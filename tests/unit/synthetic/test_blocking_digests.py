"""Block digests from column values (no filters) equal the encoder's; the blocking functions."""

from __future__ import annotations

import numpy as np
import pytest

from party.encoding.blocking import day_month_of, first_number
from party.encoding.encoder import Encoder
from party.encoding.schema import parse_schema
from party.synthetic.blocking_recall import digests_of_columns
from party.synthetic.generator import generate

SECRET = b"k" * 32
FEATURES = [
    {"identifier": "given_name", "comparison": {"type": "ngram", "n": 2}},
    {"identifier": "surname", "comparison": {"type": "ngram", "n": 2}},
    {
        "identifier": "dob",
        "comparison": {"type": "ngram", "n": 1, "positional": True},
        "normalisation": {"punctuation": "remove"},
    },
    {"identifier": "street_address", "comparison": {"type": "ngram", "n": 2}},
]


def _schema(blocking: list[dict[str, object]]) -> dict[str, object]:
    return {"version": 2, "l": 256, "features": FEATURES, "blocking": blocking}


def _key(name: str, *parts: tuple[str, str] | tuple[str, str, int]) -> dict[str, object]:
    """A blocking key from (field, function[, length]) parts."""
    return {
        "name": name,
        "parts": [
            {"field": p[0], "function": p[1]} | ({"length": p[2]} if len(p) > 2 else {})
            for p in parts
        ],
    }


def test_digests_of_columns_equal_the_encoders():
    """Every non-LSH blocking function, parts that are features and parts that are plain columns."""
    blocking = [
        _key("dm_addr", ("dob", "day_month"), ("street_address", "soundex"), ("suburb", "nysiis")),
        _key(
            "num_pc",
            ("street_address", "number"),
            ("postcode", "postcode_prefix", 3),
            ("dob", "year"),
        ),
        _key("names", ("given_name", "prefix", 2), ("surname", "metaphone"), ("state", "exact")),
    ]
    schema = parse_schema(_schema(blocking))
    ds = generate(3, 400, corruption=0.5, seed=3, households=0.3)
    for table in ds.tables:
        want = Encoder(schema, SECRET).encode_rows(table.rows(), id_column="rec_id")
        got = digests_of_columns(schema, SECRET, table.columns)
        assert got.dtype == np.uint64 and got.shape == (len(table), 3)
        assert np.array_equal(got, want.block_digests)
        assert np.count_nonzero(got == 0) > 0  # corrupted (missing) values give no key


def test_digests_of_columns_all_pairs_and_lsh():
    ds = generate(2, 50, seed=1)
    all_pairs = parse_schema(_schema([]))
    want = Encoder(all_pairs, SECRET).encode_rows(ds.tables[0].rows(), id_column="rec_id")
    got = digests_of_columns(all_pairs, SECRET, ds.tables[0].columns)
    assert np.array_equal(got, want.block_digests) and got.shape == (50, 1)
    lsh = parse_schema(_schema([{"name": "lsh", "lsh": {"bands": 2, "bitsPerBand": 8}}]))
    with pytest.raises(ValueError, match="LSH"):
        digests_of_columns(lsh, SECRET, ds.tables[0].columns)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("1987-05-03", "0503"),
        ("19870503", "0503"),
        ("03/05/1987", "0305"),
        ("8001-05-03", "0503"),  # a mistyped year keeps the key
        ("87-05-03", ""),  # no 4-digit year: no value
        ("", ""),
    ],
)
def test_day_month(raw: str, want: str):
    assert day_month_of(raw) == want


@pytest.mark.parametrize(
    ("raw", "want"),
    [("12a queen street", "12"), ("unit 3 / 45 high st", "3"), ("queen street", ""), ("", "")],
)
def test_number(raw: str, want: str):
    assert first_number(raw) == want
