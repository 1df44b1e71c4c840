"""The fast encoder equals the plain-Python reference on random schemas, secrets and records."""

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding import bits, hashing, reference
from party.encoding.encoder import Encoder
from party.encoding.schema import HASH_SCHEMES, parse_schema

FIELDS = ("a", "b", "c")
# Values mix letters, accents, digits, punctuation, spaces and the missing sentinel.
VALUE = st.one_of(
    st.sampled_from(["", " ", "NA", "Anne-Marie", "Zoë", "O'Brien", "1987-05-03", "ß"]),
    st.text(alphabet="abcxyzÄéß -.'0123", max_size=12),
)


@st.composite
def schema_dicts(draw: st.DrawFn) -> dict[str, Any]:
    scheme = draw(st.sampled_from(HASH_SCHEMES))
    xor_fold = draw(st.booleans())
    balance = draw(st.booleans())
    l_bits = draw(st.sampled_from([64, 100, 130, 256, 1000]))
    features = []
    for name in FIELDS:
        feat: dict[str, Any] = {
            "identifier": name,
            "comparison": {
                "n": draw(st.integers(1, 3)),
                "padding": draw(st.booleans()),
                "positional": draw(st.booleans()),
            },
            "strategy": {"bitsPerToken": draw(st.integers(1, 12))},
            "normalisation": {
                "case": draw(st.sampled_from(["fold", "none"])),
                "punctuation": draw(st.sampled_from(["remove", "space", "keep"])),
                "stripAccents": draw(st.booleans()),
            },
            "missingValue": {"sentinels": ["", "NA"], "policy": "empty"},
        }
        features.append(feat)
    if draw(st.booleans()):
        features[0]["salt"] = {"field": "c"}
    return {
        "version": 1,
        "l": l_bits,
        "hashing": {"scheme": scheme},
        "hardening": {"xorFold": xor_fold, "balance": balance},
        "features": features,
        "blocking": [
            {"name": "sx", "parts": [{"field": "a", "function": "soundex"}]},
            {
                "name": "pre_year",
                "parts": [
                    {"field": "b", "function": "prefix", "length": 2},
                    {"field": "c", "function": "year"},
                ],
            },
        ],
    }


@settings(max_examples=40, deadline=None)
@given(
    schema_dicts(),
    st.binary(min_size=16, max_size=40),
    st.lists(st.fixed_dictionaries({f: VALUE for f in FIELDS}), min_size=1, max_size=6),
)
def test_fast_encoder_equals_reference(raw_schema, secret, rows):
    schema = parse_schema(raw_schema)
    enc = Encoder(schema, secret)
    records = enc.encode_rows(rows)
    assert records.filter_bits == schema.output_bits
    got = bits.unpack_rows(records.filters, schema.output_bits)
    for i, row in enumerate(rows):
        assert got[i].tolist() == reference.ref_encode(schema, secret, row)
        assert records.block_digests[i].tolist() == reference.ref_block_digests(schema, secret, row)
    assert records.popcounts.tolist() == [int(r.sum()) for r in got]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(HASH_SCHEMES),
    st.binary(min_size=16, max_size=32),
    st.text(min_size=1, max_size=5),
    st.integers(1, 5000),
    st.integers(1, 60),
)
def test_position_functions_equal_reference(scheme, secret, gram, nbits, k):
    key = hashing.field_key(secret, scheme, "f")
    fast = hashing.SCHEME_FUNCTIONS[scheme](key, gram.encode("utf-8"), nbits, k)
    assert fast == reference.ref_positions(scheme, key, gram, nbits, k)
    assert len(fast) == k and all(0 <= p < nbits for p in fast)


@settings(max_examples=10, deadline=None)
@given(st.binary(min_size=16, max_size=32), st.integers(2, 300))
def test_keyed_permutation_equals_reference_and_is_a_permutation(secret, nbits):
    perm = hashing.keyed_permutation(secret, nbits)
    assert perm == reference.ref_permutation(secret, nbits)
    assert sorted(perm) == list(range(nbits))


def test_encoder_audit_api_matches_filters():
    schema = parse_schema(
        {
            "version": 1,
            "l": 512,
            "features": [{"identifier": "a"}, {"identifier": "b"}],
        }
    )
    secret = b"s" * 16
    enc = Encoder(schema, secret)
    rec = enc.encode_rows([{"a": "Peter", "b": "Smith"}])
    grams = enc.field_qgrams("a", "Peter")
    assert grams == ["_p", "pe", "et", "te", "er", "r_"]
    union = np.unique(np.concatenate([enc.qgram_positions("a", g) for g in grams]))
    assert np.array_equal(union, enc.value_positions("a", "Peter"))
    both = np.union1d(enc.value_positions("a", "Peter"), enc.value_positions("b", "Smith"))
    assert np.array_equal(bits.rows_from_positions([both], 512), rec.filters)
    assert np.array_equal(enc.harden(rec.filters), rec.filters)
