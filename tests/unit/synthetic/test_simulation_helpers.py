"""Harness helpers: schema length adjustment, party names, secrets, parameters file, set comparison."""

import json

import pytest

from party.protocol.classify import MatchRow
from party.synthetic.network_sim import canonical_sets, parameters_object
from party.synthetic.simulation import (
    SimulationConfig,
    SimulationError,
    coarse_schema_path,
    default_schema_path,
    load_schema_for,
    party_name,
    simulation_secret,
)


@pytest.mark.parametrize("parties", [2, 3, 5, 7])
def test_schema_length_is_made_divisible_by_p(parties):
    schema, obj, note = load_schema_for(None, parties)
    assert schema.output_bits % parties == 0
    assert obj["l"] == schema.filter_bits
    assert (note == "") == (1024 % parties == 0)
    assert schema.output_bits - 1024 < parties


def test_shipped_schemas_load():
    for path in (default_schema_path(), coarse_schema_path()):
        schema, _, _ = load_schema_for(path, 3)
        assert {f.name for f in schema.fields} >= {"given_name", "surname", "dob"}


def test_schema_errors(tmp_path):
    with pytest.raises(SimulationError, match="cannot read schema"):
        load_schema_for(tmp_path / "missing.json", 3)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SimulationError, match="not valid JSON"):
        load_schema_for(bad, 3)


def test_names_secret_and_parameters():
    assert [party_name(i) for i in range(3)] == ["party-a", "party-b", "party-c"]
    with pytest.raises(SimulationError):
        party_name(26)
    assert simulation_secret(1) == simulation_secret(1) != simulation_secret(2)
    assert len(simulation_secret(0)) == 32
    cfg = SimulationConfig(parties=3, match_threshold=0.85)
    obj = parameters_object(cfg, {"l": 1026})
    assert obj["parties"] == ["party-a", "party-b", "party-c"]
    assert obj["segment_threshold"] == pytest.approx(0.75)
    json.dumps(obj)


def test_canonical_sets_ignore_linkage_ids():
    a = [[MatchRow("L1", 0.9, "x0")], [MatchRow("L1", 0.9, "x1")]]
    b = [[MatchRow("L7", 0.9, "x0")], [MatchRow("L7", 0.9, "x1")]]
    c = [[MatchRow("L7", 0.91, "x0")], [MatchRow("L7", 0.91, "x1")]]
    assert canonical_sets(a) == canonical_sets(b) != canonical_sets(c)
