"""Schema version 2: per-feature bit budgets, column mapping, LSH blocking, all pairs, phonetic codes."""

from typing import Any

import jellyfish
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding import bits, reference
from party.encoding.blocking import (
    LshKeyer,
    all_pairs_digest,
    lsh_positions,
    phonetic_letters,
)
from party.encoding.encoder import Encoder
from party.encoding.schema import HASH_SCHEMES, SchemaError, parse_schema

SECRET = bytes(range(32))
VALUE = st.one_of(
    st.sampled_from(["", "NA", "Anne-Marie", "Zoë", "O'Brien", "1987-05-03", "9eorgia"]),
    st.text(alphabet="abcxyzÄéß -.'0123", max_size=14),
)
COLUMNS = {"a": "a", "b": "Col B", "c": "c"}


@st.composite
def v2_schemas(draw: st.DrawFn) -> dict[str, Any]:
    features = []
    for name, column in COLUMNS.items():
        strategy = (
            {"bitsPerFeature": draw(st.integers(1, 60))}
            if draw(st.booleans())
            else {"bitsPerToken": draw(st.integers(1, 8))}
        )
        feat: dict[str, Any] = {
            "identifier": name,
            "comparison": {"n": draw(st.integers(1, 3)), "positional": draw(st.booleans())},
            "strategy": strategy,
            "missingValue": {"sentinels": ["", "NA"], "policy": "empty"},
        }
        if column != name:
            feat["column"] = column
        features.append(feat)
    blocking: list[dict[str, Any]] = []
    if draw(st.booleans()):
        blocking.append({"name": "sx", "parts": [{"field": "b", "function": "soundex"}]})
        lsh_fields = draw(st.sampled_from([[], ["a"], ["b", "c"]]))
        blocking.append(
            {
                "name": "lsh",
                "lsh": {
                    "bands": draw(st.integers(1, 4)),
                    "bitsPerBand": draw(st.integers(1, 40)),
                    "fields": lsh_fields,
                },
            }
        )
    return {
        "version": 2,
        "l": draw(st.sampled_from([32, 100, 256])),
        "hashing": {"scheme": draw(st.sampled_from(HASH_SCHEMES))},
        "features": features,
        "blocking": blocking,
    }


@settings(max_examples=30, deadline=None)
@given(
    v2_schemas(),
    st.lists(st.fixed_dictionaries({c: VALUE for c in COLUMNS.values()}), min_size=1, max_size=5),
)
def test_fast_encoder_equals_reference_on_v2_schemas(raw, rows):
    schema = parse_schema(raw)
    records = Encoder(schema, SECRET).encode_rows(rows)
    got = bits.unpack_rows(records.filters, schema.output_bits)
    assert records.block_digests.shape == (len(rows), schema.digest_width)
    for i, row in enumerate(rows):
        assert got[i].tolist() == reference.ref_encode(schema, SECRET, row)
        assert records.block_digests[i].tolist() == reference.ref_block_digests(schema, SECRET, row)


# --------------------------------------------------------------------- bits per feature
@pytest.mark.parametrize(
    ("budget", "tokens", "expected"),
    [
        (10, 3, [4, 3, 3]),  # residue goes to the first tokens (clkhash BitsPerFeatureStrategy)
        (9, 3, [3, 3, 3]),  # exact division: no residue
        (2, 5, [1, 1, 0, 0, 0]),  # fewer bits than tokens: the last tokens set nothing
        (1, 1, [1]),
        (7, 0, []),
    ],
)
def test_bits_per_feature_spreads_the_budget_like_clkhash(budget, tokens, expected):
    spec = parse_schema(
        {
            "version": 2,
            "l": 64,
            "features": [{"identifier": "x", "strategy": {"bitsPerFeature": budget}}],
        }
    ).fields[0]
    assert spec.token_ks(tokens) == expected
    assert sum(spec.token_ks(tokens)) == (budget if tokens else 0)


def test_bits_per_feature_makes_field_weight_independent_of_value_length():
    raw = {
        "version": 2,
        "l": 4096,
        "features": [{"identifier": "x", "strategy": {"bitsPerFeature": 120}}],
        "blocking": [],
    }
    enc = Encoder(parse_schema(raw), SECRET)
    short = enc.value_positions("x", "al").size  # 3 padded bigrams: 40 positions each
    long = enc.value_positions("x", "bartholomew-featherstonehaugh").size  # 30 bigrams, 4 each
    # Without collisions both would set exactly 120 bits; in 4096 bits a few collide.
    assert 110 <= short <= 120 and 110 <= long <= 120
    per_token = Encoder(
        parse_schema(dict(raw, features=[{"identifier": "x", "strategy": {"bitsPerToken": 4}}])),
        SECRET,
    )
    assert (
        per_token.value_positions("x", "bartholomew-featherstonehaugh").size
        > 3 * per_token.value_positions("x", "al").size
    )


def test_version_2_keys_in_a_version_1_schema_are_errors():
    raw = {
        "version": 1,
        "l": 64,
        "features": [
            {"identifier": "x", "column": "X", "strategy": {"bitsPerFeature": 10}},
        ],
        "blocking": [{"name": "l", "lsh": {"bands": 2, "bitsPerBand": 8}}],
    }
    with pytest.raises(SchemaError) as err:
        parse_schema(raw)
    text = str(err.value)
    for where in ("column", "bitsPerFeature", "lsh"):
        assert f"{where}: needs schema version 2" in text or f".{where}: needs" in text
    assert parse_schema(dict(raw, version=2)).version == 2


def test_v2_problems_are_reported_together():
    raw = {
        "version": 2,
        "l": 64,
        "features": [
            {"identifier": "x", "strategy": {"bitsPerFeature": 10, "bitsPerToken": 2}},
            {"identifier": "y", "column": "x"},
            {"identifier": "z", "column": ""},
        ],
        "blocking": [
            {"name": "l", "lsh": {"bands": 0, "bitsPerBand": 65}},
            {"name": "m", "lsh": {"fields": ["nope"]}},
            {"name": "n", "lsh": {}, "parts": []},
        ],
    }
    with pytest.raises(SchemaError) as err:
        parse_schema(raw)
    problems = err.value.problems
    expected = [
        "field 'x' strategy: give one of bitsPerFeature, bitsPerToken and weight",
        "field 'z'.column: must be a non-empty string",
        "blocking key 'l' lsh.bands: must be between 1 and 64, got 0",
        "blocking key 'l' lsh.bitsPerBand: must be between 1 and 64, got 65",
        "blocking key 'm' lsh.fields: 'nope' is not a feature",
        "blocking key 'n': give either parts or lsh, not both",
        "features: column 'x' is read by more than one field",
    ]
    for e in expected:
        assert any(p.startswith(e) for p in problems), (e, problems)


def test_v2_schema_round_trips_and_v1_canonical_json_is_unchanged():
    v2 = {
        "version": 2,
        "l": 128,
        "features": [
            {"identifier": "given", "column": "First Name", "strategy": {"bitsPerFeature": 90}},
            {"identifier": "dob"},
        ],
        "blocking": [{"name": "l", "lsh": {"bands": 3, "bitsPerBand": 12, "fields": ["given"]}}],
    }
    schema = parse_schema(v2)
    assert parse_schema(schema.to_dict()) == schema
    assert schema.column_of("given") == "First Name" and schema.column_of("other") == "other"
    assert schema.digest_width == 3
    v1 = {"version": 1, "l": 128, "features": [{"identifier": "given"}]}
    canonical = parse_schema(v1).to_canonical_json().decode()
    assert "column" not in canonical and "bitsPerFeature" not in canonical
    assert '"blocking":[]' in canonical


# --------------------------------------------------------------------- blocking
def test_phonetic_codes_survive_digits_and_non_ascii_initials():
    assert phonetic_letters("9eorgia") == "georgia"
    assert phonetic_letters("Émile") == phonetic_letters("emile") == "emile"
    assert phonetic_letters("Øystein Ærø-Łukasz") == "oysteinaerolukasz"
    assert phonetic_letters("d'SSouza 4") == "dssouzaa"
    assert phonetic_letters("1234") == "lzea"  # digits read as the letters OCR confuses them with
    assert phonetic_letters("---") == ""
    raw = {
        "version": 2,
        "l": 64,
        "features": [{"identifier": "s"}],
        "blocking": [{"name": "sx", "parts": [{"field": "s", "function": "soundex"}]}],
    }
    enc = Encoder(parse_schema(raw), SECRET)
    d = enc.encode_rows(
        [{"s": "georgia"}, {"s": "9eorgia"}, {"s": "Émile"}, {"s": "emile"}, {"s": "--"}]
    )
    col = d.block_digests[:, 0].tolist()
    assert col[0] == col[1] and col[2] == col[3] and col[0] != col[2]
    assert col[4] == 0  # no letters: no value
    assert jellyfish.soundex("georgia") != jellyfish.soundex("eorgia")  # what the digit cost before


def test_all_pairs_schema_puts_every_record_in_one_keyed_block():
    raw = {"version": 1, "l": 64, "features": [{"identifier": "s"}]}
    enc = Encoder(parse_schema(raw), SECRET)
    d = enc.encode_rows([{"s": "a"}, {"s": "b"}, {"s": ""}]).block_digests
    assert d.shape == (3, 1)
    assert set(d[:, 0].tolist()) == {all_pairs_digest(SECRET)}
    assert all_pairs_digest(SECRET) != 0
    assert all_pairs_digest(SECRET) != all_pairs_digest(bytes(32))


def test_lsh_positions_are_keyed_and_band_digests_track_the_sampled_bits():
    pos = lsh_positions("lsh", SECRET, 64, 5, 20)  # 100 positions: two keyed permutations
    assert pos.shape == (5, 20)
    assert sorted(pos.ravel()[:64].tolist()) == list(range(64))
    assert not np.array_equal(pos, lsh_positions("lsh", bytes(32), 64, 5, 20))
    assert not np.array_equal(pos, lsh_positions("other", SECRET, 64, 5, 20))
    raw = {
        "version": 2,
        "l": 64,
        "features": [{"identifier": "s"}],
        "blocking": [{"name": "lsh", "lsh": {"bands": 2, "bitsPerBand": 8}}],
    }
    schema = parse_schema(raw)
    keyer = LshKeyer(schema.blocking[0], schema, SECRET)
    rng = np.random.default_rng(3)
    u = rng.integers(0, 2, size=(4, 64), dtype=np.uint8)
    sampled = set(keyer.positions[0].tolist())
    outside = next(p for p in range(64) if p not in sampled)
    u[1] = u[0]
    u[1, outside] ^= 1  # differs only outside band 0
    u[2] = u[0]
    u[2, keyer.positions[0, 3]] ^= 1  # differs in band 0
    u[3] = 0  # empty filter
    d = keyer.digests(bits.pack_rows(u))
    assert d[0, 0] == d[1, 0] and d[0, 0] != d[2, 0]
    assert d[3].tolist() == [0, 0]
    values = keyer.band_values(bits.pack_rows(u[:1]))
    assert int(values[0, 0]) == sum(int(u[0, p]) << j for j, p in enumerate(keyer.positions[0]))
