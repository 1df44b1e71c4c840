"""Linkage schema: defaults, canonical digest, and every validation error with its message."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from party.encoding.schema import (
    DEFAULT_K,
    SchemaError,
    load_schema,
    parse_schema,
)

MINIMAL: dict[str, Any] = {"version": 1, "l": 1024, "features": [{"identifier": "name"}]}


def _problems(obj: Any) -> list[str]:
    with pytest.raises(SchemaError) as info:
        parse_schema(obj, source="test.json")
    err = info.value
    assert str(len(err.problems)) in str(err) and "test.json" in str(err)
    for p in err.problems:
        assert p in str(err)
    return err.problems


def test_minimal_schema_gets_defaults():
    s = parse_schema(MINIMAL)
    f = s.fields[0]
    assert (s.filter_bits, s.output_bits, s.hashing.scheme, s.hashing.k) == (
        1024,
        1024,
        "hmac-sha256-random",
        DEFAULT_K,
    )
    assert (f.name, f.q, f.padding, f.positional, f.k, f.weight) == (
        "name",
        2,
        True,
        False,
        20,
        None,
    )
    assert f.normalisation.nfkc and f.normalisation.case == "fold"
    assert (f.missing_sentinels, f.missing_policy, f.on_invalid) == (("",), "empty", "error")
    assert s.blocking == () and s.hardening.blip_flip_probability is None


def test_digest_ignores_spelled_out_defaults_and_round_trips():
    s = parse_schema(MINIMAL)
    assert parse_schema(s.to_dict()) == s
    assert parse_schema(json.loads(s.to_canonical_json())).digest() == s.digest()
    spelled = copy.deepcopy(MINIMAL)
    spelled["hashing"] = {"scheme": "hmac-sha256-random", "k": 20}
    spelled["features"][0]["comparison"] = {"type": "ngram", "n": 2, "padding": True}
    assert parse_schema(spelled).digest() == s.digest()
    changed = copy.deepcopy(MINIMAL)
    changed["l"] = 1000
    assert parse_schema(changed).digest() != s.digest()


def test_weight_sets_k_and_output_bits_follow_hardening():
    obj = copy.deepcopy(MINIMAL)
    obj["hashing"] = {"k": 10}
    obj["features"] = [
        {"identifier": "a", "strategy": {"weight": 1.5}},
        {"identifier": "b", "strategy": {"bitsPerToken": 7}},
        {"identifier": "c"},
    ]
    obj["hardening"] = {"xorFold": True, "balance": True}
    s = parse_schema(obj)
    assert [f.k for f in s.fields] == [15, 7, 10]
    assert s.output_bits == 1024
    obj["hardening"] = {"xorFold": True}
    assert parse_schema(obj).output_bits == 512
    obj["hardening"] = {"balance": True}
    assert parse_schema(obj).output_bits == 2048
    assert parse_schema(parse_schema(obj).to_dict()) == parse_schema(obj)


def test_every_problem_is_reported_at_once_with_its_field():
    bad = {
        "version": 3,
        "l": 3,
        "hashing": {"scheme": "md5", "k": 0},
        "hardening": {"xorFold": "yes", "blip": {"flipProbability": 0.7}, "extra": 1},
        "features": [
            {
                "identifier": "given",
                "comparison": {"type": "exact", "n": 11},
                "strategy": {"weight": -1},
                "normalisation": {"case": "title", "replacements": [["", "x"], "ab"]},
                "missingValue": {"sentinels": "NA", "policy": "ignore"},
                "validation": {"pattern": "(", "maxLength": 0, "onInvalid": "warn"},
                "salt": {"field": "given"},
                "colour": "red",
            },
            {"identifier": "given"},
            {"identifier": ""},
            "surname",
        ],
        "blocking": [
            {"name": "b1", "parts": [{"field": "given", "function": "caverphone"}]},
            {"name": "b2", "parts": [{"field": "given", "function": "prefix"}]},
            {"name": "b3", "parts": [{"field": "given", "function": "soundex", "length": 2}]},
            {"name": "b4", "parts": []},
        ],
        "unknown": True,
    }
    problems = _problems(bad)
    expected = [
        "top level: unknown key 'unknown'",
        "version: must be 1 or 2, got 3",
        "schema.l: must be between 8 and",
        "hashing.scheme: must be one of",
        "hashing.k: must be between 1 and",
        "hardening: unknown key 'extra'",
        "hardening.xorFold: must be true or false",
        "hardening.blip.flipProbability: must be a number with 0 < f < 0.5, got 0.7",
        "field 'given': unknown key 'colour'",
        "field 'given' comparison.type: only 'ngram' is supported",
        "field 'given' comparison.n: must be between 1 and 10, got 11",
        "field 'given' strategy.weight: must be a positive number, got -1",
        "field 'given' normalisation.case: must be one of fold, lower, upper, none",
        "field 'given' normalisation.replacements[0]: the string to replace must not be empty",
        "field 'given' normalisation.replacements[1]: must be a [from, to] pair of strings",
        "field 'given' missingValue.sentinels: must be an array of strings",
        "field 'given' missingValue.policy: must be one of empty, skip, error",
        "field 'given' validation.maxLength: must be between 1 and",
        "field 'given' validation.pattern: is not a valid regular expression",
        "field 'given' validation.onInvalid: must be one of error, skip",
        "field 'given' salt.field: a field cannot be salted with itself",
        "field 'given': is defined more than once",
        "features[2].identifier: must be a non-empty string",
        "features[3]: must be an object, got string",
        "blocking key 'b1' parts[0].function: must be one of",
        "blocking key 'b2' parts[0].length: function 'prefix' needs a length",
        "blocking key 'b3' parts[0].length: function 'soundex' takes no length",
        "blocking key 'b4'.parts: must be a non-empty array",
    ]
    for e in expected:
        assert any(p.startswith(e) for p in problems), (e, problems)
    assert len(problems) == len(expected)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "top level: must be an object, got array"),
        ({"version": 1, "features": [{"identifier": "a"}]}, "l: is required"),
        ({"version": 1, "l": 1024}, "features: must be a non-empty array"),
        ({"version": 1, "l": 1024, "features": []}, "features: must be a non-empty array"),
        ({**MINIMAL, "l": 1023, "hardening": {"xorFold": True}}, "needs an even filter length"),
        ({**MINIMAL, "l": True}, "schema.l: must be an integer, got boolean"),
        ({**MINIMAL, "hashing": "fast"}, "hashing: must be an object, got string"),
        ({**MINIMAL, "hardening": {"blip": 0.1}}, "hardening.blip: must be an object"),
        ({**MINIMAL, "blocking": {}}, "blocking: must be an array"),
        ({**MINIMAL, "blocking": [3]}, "blocking[0]: must be an object, got number"),
        (
            {**MINIMAL, "blocking": [{"parts": [{"function": "year"}]}]},
            "blocking[0].name: must be a non-empty string",
        ),
        (
            {**MINIMAL, "blocking": [{"name": "x", "parts": [{"function": "year"}]}]},
            "blocking key 'x' parts[0].field: must be a column name",
        ),
        (
            {
                **MINIMAL,
                "blocking": [
                    {"name": "x", "parts": [{"field": "a", "function": "year"}]},
                    {"name": "x", "parts": [{"field": "a", "function": "year"}]},
                ],
            },
            "blocking key 'x': is defined more than once",
        ),
        (
            {
                **MINIMAL,
                "features": [{"identifier": "a", "strategy": {"weight": 2, "bitsPerToken": 3}}],
            },
            "field 'a' strategy: bitsPerToken=3 contradicts weight=2.0",
        ),
        (
            {**MINIMAL, "features": [{"identifier": "a", "strategy": {"weight": 1000}}]},
            "field 'a' strategy.weight: gives k=20000",
        ),
        (
            {**MINIMAL, "features": [{"identifier": "a", "strategy": {"weight": "x"}}]},
            "field 'a' strategy.weight: must be a number, got string",
        ),
        (
            {**MINIMAL, "features": [{"identifier": "a", "salt": {"field": ""}}]},
            "field 'a' salt.field: must be a column name",
        ),
        (
            {**MINIMAL, "features": [{"identifier": "a", "normalisation": []}]},
            "field 'a' normalisation: must be an object, got array",
        ),
        (
            {**MINIMAL, "features": [{"identifier": "a", "validation": {"pattern": 5}}]},
            "field 'a' validation.pattern: must be a string, got number",
        ),
        (
            {**MINIMAL, "features": [{"identifier": "a", "normalisation": {"replacements": 1}}]},
            "field 'a' normalisation.replacements: must be an array",
        ),
    ],
)
def test_single_problem_messages(obj, message):
    problems = _problems(obj)
    assert any(message in p for p in problems), problems


def test_load_schema_file_errors(tmp_path):
    with pytest.raises(SchemaError, match="file not found"):
        load_schema(tmp_path / "none.json")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"version": 1,\n "l": }')
    with pytest.raises(SchemaError, match=r"not valid JSON: .* at line 2 column"):
        load_schema(bad_json)
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"x": "\xe9"}')
    with pytest.raises(SchemaError, match="not valid UTF-8"):
        load_schema(latin)
    with pytest.raises(SchemaError, match="cannot read file"):
        load_schema(tmp_path)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(MINIMAL))
    assert load_schema(good) == parse_schema(MINIMAL)


@pytest.mark.parametrize(
    "path", sorted((Path(__file__).resolve().parents[3] / "examples").glob("schema*.json"))
)
def test_example_schemas_are_valid(path):
    schema = load_schema(path)
    assert schema.output_bits % 2 == 0 and parse_schema(schema.to_dict()) == schema
