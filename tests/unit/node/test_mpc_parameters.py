"""Mode and compute parties in the parameters (proto/linkage.py) and the helper role (party/config.py)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from party.config import ConfigError, load_party_config
from proto import linkage

ROOT = pathlib.Path(__file__).resolve().parents[3]


def params(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "version": 1,
        "parties": ["party-a", "party-b", "party-c"],
        "schema": {"version": 3, "l": 1024},
        "match_threshold": 0.8,
        "segment_threshold": 0.0,
    }
    obj.update(changes)
    return obj


def digest(obj: dict[str, Any]) -> str:
    return linkage.parameters_digest(linkage.parameters_from_mapping(obj))


def test_segments_digest_is_unchanged_by_the_mode_field() -> None:
    """Mode segments leaves the canonical JSON as before modes existed (kat vectors stay valid)."""
    kat = json.loads((ROOT / "tests" / "data" / "kat_protocol.json").read_text())
    vector = kat["vectors"][0]
    obj = json.loads(vector["parameters_canonical_json"])
    assert "mode" not in obj and "compute_parties" not in obj
    # a parameters file without "target" is target any: these vectors are target all
    assert digest({**obj, "target": "all"}) == vector["parameters_digest"]
    assert digest({**obj, "mode": "segments", "target": "all"}) == vector["parameters_digest"]


def test_mpc3_digest_covers_mode_and_resolved_compute_parties() -> None:
    seg = digest(params())
    mpc = digest(params(mode="mpc3"))
    assert mpc != seg
    # Naming the default compute parties explicitly is the same agreement.
    assert digest(params(mode="mpc3", compute_parties=["party-a", "party-b", "party-c"])) == mpc
    # Another order or another helper is another agreement.
    assert digest(params(mode="mpc3", compute_parties=["party-b", "party-a", "party-c"])) != mpc
    canon = linkage.canonical_json(
        linkage.parameters_to_mapping(linkage.parameters_from_mapping(params(mode="mpc3")))
    )
    assert b'"compute_parties":["party-a","party-b","party-c"]' in canon
    assert b'"mode":"mpc3"' in canon


def test_helper_is_a_participant_but_not_a_party() -> None:
    msg = linkage.parameters_from_mapping(
        params(
            parties=["party-a", "party-b"],
            mode="mpc3",
            compute_parties=["party-a", "party-b", "helper"],
        )
    )
    assert list(msg.parties) == ["party-a", "party-b"]
    assert linkage.compute_party_names(msg) == ("party-a", "party-b", "helper")
    assert linkage.participants(msg) == ("party-a", "party-b", "helper")
    seg = linkage.parameters_from_mapping(params())
    assert linkage.compute_party_names(seg) == ()
    assert linkage.participants(seg) == ("party-a", "party-b", "party-c")


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"mode": "mpc4"}, "mode must be one of"),
        ({"compute_parties": ["party-a", "party-b", "party-c"]}, "empty unless mode is mpc3"),
        ({"mode": "mpc3", "compute_parties": ["party-a", "party-b"]}, "exactly 3 distinct"),
        ({"mode": "mpc3", "compute_parties": ["party-a", "party-a", "x"]}, "exactly 3 distinct"),
        ({"mode": "mpc3", "compute_parties": "party-a"}, "list of non-empty names"),
        ({"mode": "mpc3", "parties": ["party-a", "party-b"]}, "must name 3 compute parties"),
    ],
)
def test_invalid_mode_settings_name_the_key(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(linkage.ParametersFormatError, match=problem):
        linkage.parameters_from_mapping(params(**changes))


HELPER = """
[node]
name = "helper"
role = "compute"
listen = "127.0.0.1:0"
coordinator = "127.0.0.1:50060"
[tls]
ca = "ca.pem"
cert = "h.pem"
key = "h.key"
"""


def test_helper_role_needs_no_data_table(tmp_path: pathlib.Path) -> None:
    for name in ("ca.pem", "h.pem", "h.key"):
        (tmp_path / name).write_text("x")
    (tmp_path / "helper.toml").write_text(HELPER)
    cfg = load_party_config(tmp_path / "helper.toml", env={})
    assert cfg.is_compute_only and cfg.role == "compute"
    (tmp_path / "bad.toml").write_text(HELPER.replace('"compute"', '"oracle"'))
    with pytest.raises(ConfigError, match="node.role"):
        load_party_config(tmp_path / "bad.toml", env={})
    # A data party (the default role) still needs its data table.
    (tmp_path / "party.toml").write_text(HELPER.replace('role = "compute"\n', ""))
    with pytest.raises(ConfigError, match="data.csv: required"):
        load_party_config(tmp_path / "party.toml", env={})
