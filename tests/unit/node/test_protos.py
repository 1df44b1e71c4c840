"""The committed generated stubs equal a fresh generation, and the parameters digest is canonical."""

from __future__ import annotations

import filecmp
import pathlib
import subprocess
import sys

import pytest

from proto import common_pb2, linkage

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_committed_stubs_match_regeneration(tmp_path):
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    generated = sorted((tmp_path / "proto").glob("*_pb2*.py*"))
    assert len(generated) == 9
    for path in generated:
        committed = ROOT / "proto" / path.name
        assert committed.exists(), f"{path.name} is not committed"
        assert filecmp.cmp(path, committed, shallow=False), f"{path.name} is stale: regenerate"


def _params(**over):
    obj = {
        "version": 1,
        "parties": ["a", "b", "c"],
        "schema": {"z": 1, "a": [1, 2], "name": "Zoë"},
        "match_threshold": 0.8,
        "segment_threshold": 0.7,
    }
    obj.update(over)
    return obj


def test_digest_is_independent_of_key_order_and_whitespace():
    a = linkage.parameters_from_mapping(_params())
    b = linkage.parameters_from_mapping(dict(reversed(list(_params().items()))))
    assert linkage.parameters_digest(a) == linkage.parameters_digest(b)
    c = linkage.parameters_from_mapping(_params(match_threshold=0.81))
    assert linkage.parameters_digest(a) != linkage.parameters_digest(c)
    d = linkage.parameters_from_mapping(_params(parties=["b", "a", "c"]))
    assert linkage.parameters_digest(a) != linkage.parameters_digest(d)


def test_digest_survives_the_wire():
    a = linkage.parameters_from_mapping(_params())
    again = common_pb2.LinkageParameters.FromString(a.SerializeToString())
    assert linkage.parameters_digest(again) == linkage.parameters_digest(a)


def test_malformed_parameters_list_every_problem():
    with pytest.raises(linkage.ParametersFormatError) as err:
        linkage.parameters_from_mapping(
            _params(parties=["a"], match_threshold=2, extra=1, max_block_size=-1)
        )
    msg = str(err.value)
    for needle in ("at least 2", "match_threshold", "unknown keys", "max_block_size"):
        assert needle in msg


def test_schema_path_is_relative_to_parameters_file(tmp_path):
    (tmp_path / "s.json").write_text('{"version": 1}')
    (tmp_path / "p.json").write_text(
        '{"parties": ["a", "b"], "schema": "s.json", "match_threshold": 0.8, '
        '"segment_threshold": 0.0}'
    )
    params = linkage.load_parameters(tmp_path / "p.json")
    assert params.schema_json == '{"version":1}'
