"""Known-answer vectors (tests/data/kat_encoding.json): every scheme, hardening and blocking function.

The vectors pin every implicit default: UTF-8 + NFKC + case folding, padding, HKDF inputs, the
big-endian reading of HMAC output, mmh3 signedness, bit order (bits.row_to_hex), the balancing
permutation and BLIP (with an injected ``numpy.random.default_rng(seed)``, all records of a vector
encoded in one call). They were produced by this encoder and are also checked against the
independent reference implementation. Regenerate (only for a deliberate format change, which also
needs a schema version bump) with ``.venv/bin/python -m tests.unit.encoding.test_kat --write``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from party.encoding import bits, hashing, reference
from party.encoding.encoder import Encoder
from party.encoding.schema import parse_schema

KAT_PATH = Path(__file__).resolve().parents[2] / "data" / "kat_encoding.json"
SECRET = bytes(range(32))

RECORDS = [
    {"first": "Anne-Marie", "last": "O'Brien", "dob": "1987-05-03", "pc": "AB1 2CD"},
    {"first": "ＪＯＨＡＮＮ", "last": "Straße", "dob": "03/05/1987", "pc": "xy9 8zz"},
    {"first": "Zoë", "last": "ﬁnn", "dob": "", "pc": ""},
]


def _schema(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "version": 1,
        "l": 256,
        "hashing": {"scheme": "hmac-sha256-random", "k": 6},
        "features": [
            {"identifier": "first", "normalisation": {"stripAccents": True}},
            {"identifier": "last", "strategy": {"weight": 1.5}},
            {
                "identifier": "dob",
                "comparison": {"n": 2, "padding": False},
                "strategy": {"bitsPerToken": 4},
            },
            {"identifier": "pc", "comparison": {"n": 3}, "normalisation": {"whitespace": "remove"}},
        ],
        "blocking": [
            {"name": "sdx", "parts": [{"field": "last", "function": "soundex"}]},
            {"name": "nys", "parts": [{"field": "last", "function": "nysiis"}]},
            {"name": "mph", "parts": [{"field": "first", "function": "metaphone"}]},
            {"name": "exact_first", "parts": [{"field": "first", "function": "exact"}]},
            {
                "name": "pre_yob",
                "parts": [
                    {"field": "first", "function": "prefix", "length": 2},
                    {"field": "dob", "function": "year"},
                ],
            },
            {"name": "pc3", "parts": [{"field": "pc", "function": "postcode_prefix", "length": 3}]},
        ],
    }
    for key, value in over.items():
        if key == "salt":
            base["features"][1]["salt"] = {"field": value}
        elif key == "positional":
            base["features"][0]["comparison"] = {"n": 2, "positional": True}
        else:
            base[key] = value
    return base


CASES: list[tuple[str, dict[str, Any], int | None]] = [
    ("random-default", _schema(), None),
    ("double-hmac", _schema(hashing={"scheme": "hmac-sha256-double", "k": 6}), None),
    ("mmh3-double", _schema(hashing={"scheme": "mmh3-double", "k": 6}), None),
    ("xor-fold", _schema(hardening={"xorFold": True}), None),
    ("balance", _schema(hardening={"balance": True}), None),
    ("fold-then-balance", _schema(l=200, hardening={"xorFold": True, "balance": True}), None),
    ("salted-last-with-dob", _schema(salt="dob"), None),
    ("positional-first", _schema(positional=True), None),
    ("blip-seeded", _schema(hardening={"blip": {"flipProbability": 0.1}}), 20251130),
    (
        "blip-balance-mmh3",
        _schema(
            hashing={"scheme": "mmh3-double", "k": 6},
            hardening={"balance": True, "blip": {"flipProbability": 0.25}},
        ),
        7,
    ),
]


def _schema_v2(**over: Any) -> dict[str, Any]:
    """Version 2: per-feature bit budgets, LSH bands (all features, and one feature only)."""
    base = _schema(**over)
    base["version"] = 2
    base["features"][0]["strategy"] = {"bitsPerFeature": 40}
    base["features"][2]["strategy"] = {"bitsPerFeature": 17}
    base["blocking"] = base["blocking"][3:] + [
        {"name": "lsh", "lsh": {"bands": 4, "bitsPerBand": 64}},
        {"name": "lsh_first", "lsh": {"bands": 3, "bitsPerBand": 1, "fields": ["first"]}},
    ]
    return base


CASES += [
    ("v2-bits-per-feature-lsh", _schema_v2(), None),
    ("v2-all-pairs", {**_schema_v2(), "blocking": []}, None),
]

POSITION_CASES = [
    (scheme, gram, nbits, k)
    for scheme in hashing.SCHEME_FUNCTIONS
    for gram, nbits, k in [("_a", 1024, 20), ("ß_", 1000, 7), ("0:jo", 97, 3)]
]


def _encoder(raw: dict[str, Any], seed: int | None) -> Encoder:
    rng = None if seed is None else np.random.default_rng(seed)
    return Encoder(parse_schema(raw), SECRET, blip_rng=rng)


def build_vectors() -> dict[str, Any]:
    vectors = []
    for name, raw, seed in CASES:
        enc = _encoder(raw, seed)
        rec = enc.encode_rows(RECORDS)
        vectors.append(
            {
                "name": name,
                "schema": raw,
                "schema_digest": enc.schema.digest(),
                "blip_seed": seed,
                "records": RECORDS,
                "expected": [
                    {
                        "filter_hex": bits.row_to_hex(rec.filters[i]),
                        "popcount": int(rec.popcounts[i]),
                        "block_digests": [str(int(d)) for d in rec.block_digests[i]],
                    }
                    for i in range(len(RECORDS))
                ],
            }
        )
    positions = []
    for scheme, gram, nbits, k in POSITION_CASES:
        key = hashing.field_key(SECRET, scheme, "first")
        positions.append(
            {
                "scheme": scheme,
                "field": "first",
                "key_hex": key.hex(),
                "gram": gram,
                "l": nbits,
                "k": k,
                "positions": hashing.SCHEME_FUNCTIONS[scheme](key, gram.encode(), nbits, k),
            }
        )
    return {
        "about": "Known-answer vectors for party.encoding; see tests/unit/encoding/test_kat.py. "
        "filter_hex is bits.row_to_hex of the output filter; block digests are decimal u64.",
        "secret_hex": SECRET.hex(),
        "vectors": vectors,
        "positions": positions,
    }


@pytest.fixture(scope="module")
def kat() -> dict[str, Any]:
    return json.loads(KAT_PATH.read_text(encoding="utf-8"))


def test_kat_covers_every_scheme_and_hardening(kat):
    schemes = {v["schema"].get("hashing", {}).get("scheme") for v in kat["vectors"]}
    assert schemes == set(hashing.SCHEME_FUNCTIONS)
    hard = [v["schema"].get("hardening", {}) for v in kat["vectors"]]
    assert any(h.get("xorFold") for h in hard)
    assert any(h.get("balance") for h in hard)
    assert any(h.get("blip") for h in hard)
    assert any("salt" in f for v in kat["vectors"] for f in v["schema"]["features"])


@pytest.mark.parametrize("index", range(len(CASES)))
def test_filter_vectors(kat, index):
    vec = kat["vectors"][index]
    assert bytes.fromhex(kat["secret_hex"]) == SECRET
    enc = _encoder(vec["schema"], vec["blip_seed"])
    assert enc.schema.digest() == vec["schema_digest"]
    rec = enc.encode_rows(vec["records"])
    for i, exp in enumerate(vec["expected"]):
        assert bits.row_to_hex(rec.filters[i]) == exp["filter_hex"], (vec["name"], i)
        assert int(rec.popcounts[i]) == exp["popcount"]
        assert [str(int(d)) for d in rec.block_digests[i]] == exp["block_digests"]
        if vec["blip_seed"] is None:  # the reference has no BLIP
            ref = reference.ref_encode(enc.schema, SECRET, vec["records"][i])
            assert bits.row_to_hex(bits.pack_rows(np.array([ref]))[0]) == exp["filter_hex"]
            assert [
                str(d) for d in reference.ref_block_digests(enc.schema, SECRET, vec["records"][i])
            ] == exp["block_digests"]


def test_position_vectors(kat):
    assert len(kat["positions"]) == len(POSITION_CASES)
    for vec in kat["positions"]:
        key = hashing.field_key(SECRET, vec["scheme"], vec["field"])
        assert key.hex() == vec["key_hex"]
        got = hashing.SCHEME_FUNCTIONS[vec["scheme"]](key, vec["gram"].encode(), vec["l"], vec["k"])
        assert got == vec["positions"]
        assert reference.ref_positions(vec["scheme"], key, vec["gram"], vec["l"], vec["k"]) == got


def test_blip_vector_differs_from_unnoised_encoding(kat):
    vec = next(v for v in kat["vectors"] if v["name"] == "blip-seeded")
    raw = dict(vec["schema"])
    raw["hardening"] = {}
    plain = _encoder(raw, None).encode_rows(vec["records"])
    flipped = [
        bin(int(bits.row_to_hex(plain.filters[i]), 16) ^ int(e["filter_hex"], 16)).count("1")
        for i, e in enumerate(vec["expected"])
    ]
    # f = 0.1 on 256 bits: about 26 flips per record; none and all are both wrong
    assert all(5 < f < 60 for f in flipped)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        KAT_PATH.parent.mkdir(parents=True, exist_ok=True)
        KAT_PATH.write_text(
            json.dumps(build_vectors(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(f"wrote {KAT_PATH}")
    else:
        print("usage: python -m tests.unit.encoding.test_kat --write")
