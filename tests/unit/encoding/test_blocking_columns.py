"""Blocking digests computed column-wise (distinct values, distinct part combinations) equal the
row-by-row definition, including empty parts, memo reuse across calls and the unpacked path."""

import numpy as np
import pytest

from party.encoding.blocking import BlockingKeyer, InvalidText
from party.encoding.schema import parse_schema

SECRET = bytes(range(200, 232))
SURNAMES = ["Smith", "Smyth", "", "O'Neil", "1234", "Müller", "Mueller", "Li", "  ", "Zoë"]
DOBS = ["1987-05-03", "03/05/1987", "19870503", "", "n/a", "2001-12-31", "1930-01-01"]
POSTCODES = ["2600", " 26 01", "", "3000", "NW1 6XE"]


def _keyers() -> list[BlockingKeyer]:
    schema = parse_schema(
        {
            "version": 1,
            "l": 128,
            "features": [{"identifier": "surname"}, {"identifier": "dob"}],
            "blocking": [
                {
                    "name": "sx_year",
                    "parts": [
                        {"field": "surname", "function": "soundex"},
                        {"field": "dob", "function": "year"},
                    ],
                },
                {
                    "name": "dob_pc",
                    "parts": [
                        {"field": "dob", "function": "exact"},
                        {"field": "postcode", "function": "postcode_prefix", "length": 2},
                    ],
                },
                {"name": "surname", "parts": [{"field": "surname", "function": "exact"}]},
            ],
        }
    )
    return [BlockingKeyer(b, schema, SECRET) for b in schema.blocking]


def _columns(rng: np.random.Generator, n: int) -> dict[str, list[str]]:
    return {
        "surname": [str(rng.choice(SURNAMES)) for _ in range(n)],
        "dob": [str(rng.choice(DOBS)) for _ in range(n)],
        "postcode": [str(rng.choice(POSTCODES)) for _ in range(n)],
    }


def _encode(values: list[str]) -> tuple[list[str], np.ndarray]:
    seen: dict[str, int] = {}
    idx = [seen.setdefault(v, len(seen)) for v in values]
    return list(seen), np.asarray(idx, dtype=np.int64)


def test_column_digests_equal_row_digests() -> None:
    rng = np.random.default_rng(1)
    for keyer in _keyers():
        reference = _keyers()[[k.spec.name for k in _keyers()].index(keyer.spec.name)]
        for call in range(3):  # memo tables carry over between calls
            cols = _columns(rng, 400 + call)
            got = keyer.column_digests([_encode(cols[c]) for c in keyer.columns])
            rows = list(zip(*(cols[c] for c in keyer.columns), strict=True))
            want = np.array([reference.digest(r) for r in rows], dtype=np.uint64)
            np.testing.assert_array_equal(got, want)
            assert (got == 0).any() and (got != 0).any()


def test_column_digests_reject_bad_utf8_and_handle_no_rows() -> None:
    keyer = _keyers()[0]
    with pytest.raises(InvalidText):
        keyer.column_digests(
            [(["ok", "bad\udcff"], np.array([0, 1])), (["1987"], np.array([0, 0]))]
        )
    empty = keyer.column_digests([([], np.zeros(0, dtype=np.int64))] * 2)
    assert empty.shape == (0,) and empty.dtype == np.uint64
