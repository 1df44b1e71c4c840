"""Target, min_parties and solver in the parameters (proto/linkage.py, digest) and at the node."""

from __future__ import annotations

import hashlib
import json
import pathlib
from typing import Any

import pytest

from party.node.node import InvalidParameters, protocol_parameters
from proto import linkage

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "examples" / "schema.json").read_text())


def params(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "version": 1,
        "parties": ["party-a", "party-b", "party-c", "party-d"],  # l = 1024 splits in 4
        "schema": SCHEMA,
        "match_threshold": 0.8,
        "segment_threshold": 0.0,
    }
    obj.update(changes)
    return obj


def digest(obj: dict[str, Any]) -> str:
    return linkage.parameters_digest(linkage.parameters_from_mapping(obj))


def test_target_all_digest_is_unchanged_and_any_is_covered_with_resolved_defaults() -> None:
    base = digest(params(target="all"))
    bare = params(target="all")
    del bare["target"]
    # target all's canonical object has no target keys: its digests are those of before targets
    assert (
        linkage.parameters_digest(linkage.parameters_from_mapping(params(target="all")))
        == hashlib.sha256(
            linkage.canonical_json(bare | {"one_to_one": True, "max_block_size": None})
        ).hexdigest()
    )
    any2 = digest(params(target="any"))
    assert any2 != base
    assert digest(params()) == any2  # no target in the file: the default, any
    assert digest(params(target="any", min_parties=2, solver="guarded")) == any2
    assert digest(params(target="any", min_parties=3)) != any2
    assert digest(params(target="any", solver="greedy")) != any2
    canon = linkage.canonical_json(
        linkage.parameters_to_mapping(linkage.parameters_from_mapping(params(target="any")))
    )
    assert b'"min_parties":2' in canon and b'"solver":"guarded"' in canon


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (dict(target="some"), "target must be one of"),
        (dict(target="any", min_parties=1), "min_parties must be an integer in 2..P=4"),
        (dict(target="any", min_parties=5), "min_parties must be an integer in 2..P=4"),
        (dict(target="any", solver="hungarian"), "solver must be one of"),
        (dict(target="all", min_parties=2), "only used with target 'any'"),
    ],
)
def test_bad_target_in_a_parameters_file_is_named(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(linkage.ParametersFormatError, match=words):
        linkage.parameters_from_mapping(params(**changes))


def test_node_checks_a_target_message_it_did_not_build_itself() -> None:
    """A coordinator could send any field values: the party's own check names them at Propose."""
    msg = linkage.parameters_from_mapping(params(target="any"))
    msg.min_parties = 9
    with pytest.raises(InvalidParameters, match="min_parties"):
        protocol_parameters(msg)
    msg.min_parties, msg.solver = 2, "hungarian"
    with pytest.raises(InvalidParameters, match="solver"):
        protocol_parameters(msg)
    msg.solver, msg.target = "", "some"
    with pytest.raises(InvalidParameters, match="target"):
        protocol_parameters(msg)
    # target any runs in mode segments
    msg.target = "any"
    assert protocol_parameters(msg)[1].target == "any"
    msg.mode, msg.segment_threshold = "mpc3", 0.0  # and in mode mpc3 (party.mpc.pairs)
    assert protocol_parameters(msg)[1].mode == "mpc3"
    explicit_all = linkage.parameters_from_mapping(params(target="all"))
    assert protocol_parameters(explicit_all)[1].target == "all"
    # a file without target: the default, any with m = 2 (the node sees it written out)
    assert protocol_parameters(linkage.parameters_from_mapping(params()))[1].target == "any"
