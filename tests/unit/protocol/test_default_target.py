"""The shipped default linkage target is "any" with min_parties 2, wherever a run is configured."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from party.protocol import params as params_module
from party.protocol.engine import PartyEngine
from party.protocol.errors import ParameterError, ProtocolError
from party.protocol.pair_engine import PairEngine
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable
from proto import common_pb2, linkage
from tests.scripts import load_script

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "examples" / "schema.json").read_text())


def file_object(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "version": 1,
        "parties": ["party-a", "party-b", "party-c"],
        "schema": SCHEMA,
        "match_threshold": 0.8,
        "segment_threshold": 0.0,
    }
    obj.update(changes)
    return obj


def test_protocol_parameters_default_to_target_any_with_groups_of_two_or_more() -> None:
    p = ProtocolParameters(("a", "b", "c"), 96, 0.8, 0.7)
    assert (p.target, p.min_parties, p.solver) == ("any", 2, "guarded")
    assert params_module.DEFAULT_TARGET == "any" and params_module.DEFAULT_MIN_PARTIES == 2
    explicit = ProtocolParameters(("a", "b", "c"), 96, 0.8, 0.7, target="all")
    assert explicit.target == "all"


def test_a_parameters_file_without_target_means_any_written_explicitly_into_the_message() -> None:
    msg = linkage.parameters_from_mapping(file_object())
    assert (msg.target, msg.min_parties, msg.solver) == ("any", 2, "guarded")
    assert linkage.target_of(msg) == "any"
    same = linkage.parameters_from_mapping(file_object(target="any", min_parties=2))
    assert linkage.parameters_digest(msg) == linkage.parameters_digest(same)
    # "all" must be asked for; on the wire it stays the empty field (digests of target all unchanged).
    all_msg = linkage.parameters_from_mapping(file_object(target="all"))
    assert all_msg.target == "" and linkage.target_of(all_msg) == "all"
    assert linkage.parameters_digest(all_msg) != linkage.parameters_digest(msg)
    assert linkage.DEFAULT_TARGET == params_module.DEFAULT_TARGET


def test_the_message_field_keeps_its_wire_meaning_empty_is_all() -> None:
    assert linkage.target_of(common_pb2.LinkageParameters()) == "all"


def test_the_example_parameters_file_runs_the_default_target() -> None:
    msg = linkage.load_parameters(ROOT / "examples" / "parameters.json")
    assert linkage.target_of(msg) == "any" and msg.min_parties == 2


def test_simulate_defaults_to_target_any_with_min_parties_two() -> None:
    args = load_script("simulate").build_parser().parse_args([])
    assert (args.target, args.min_parties) == ("any", 2)
    assert load_script("simulate").build_parser().parse_args(["--target", "all"]).target == "all"


def test_target_any_beyond_64_parties_is_refused_before_any_engine_starts() -> None:
    names = tuple(f"p{i}" for i in range(65))
    with pytest.raises(ParameterError, match="at most 64 parties, got P=65"):
        ProtocolParameters(names, 65 * 8, 0.8, 0.0)
    assert ProtocolParameters(names, 65 * 8, 0.8, 0.0, target="all").party_count == 65
    obj = file_object(parties=[f"party-{i}" for i in range(65)])
    with pytest.raises(linkage.ParametersFormatError, match="at most 64 parties, got 65"):
        linkage.parameters_from_mapping(obj)
    assert linkage.MAX_ANY_PARTIES == params_module.MAX_ANY_PARTIES


@dataclass(frozen=True)
class Table:
    record_ids: tuple[str, ...]
    filters: np.ndarray
    filter_bits: int
    block_digests: np.ndarray


def _table(n: int = 4, bits: int = 96) -> EncodedTable:
    rng = np.random.default_rng(0)
    return Table(
        record_ids=tuple(f"r{i}" for i in range(n)),
        filters=rng.integers(0, 2**32, size=(n, (bits + 63) // 64), dtype=np.uint64),
        filter_bits=bits,
        block_digests=np.ones((n, 1), dtype=np.uint64),
    )


def test_each_engine_refuses_parameters_of_the_other_target() -> None:
    any_params = ProtocolParameters(("a", "b", "c"), 96, 0.8, 0.7)
    all_params = ProtocolParameters(("a", "b", "c"), 96, 0.8, 0.7, target="all")
    with pytest.raises(ProtocolError, match="PartyEngine runs target 'all'"):
        PartyEngine(0, any_params, _table())
    with pytest.raises(ProtocolError, match="target 'any'"):
        PairEngine(0, all_params, _table())
    assert PartyEngine(0, all_params, _table()).TARGET == "all"
    assert PairEngine(0, any_params, _table()).TARGET == "any"


@pytest.mark.parametrize("target", ["all", "any", None])
def test_a_message_round_trips_through_its_parameters_file_object(target: str | None) -> None:
    """The coordinator re-parses every StartRun message as a file: target all (empty field, no
    target key in the canonical object) must stay all, not become the file default."""
    obj = file_object() if target is None else file_object(target=target)
    msg = linkage.parameters_from_mapping(obj)
    again = linkage.parameters_from_mapping(linkage.parameters_file_object(msg))
    assert linkage.parameters_digest(again) == linkage.parameters_digest(msg)
    assert linkage.target_of(again) == (target or "any")
    wire_all = common_pb2.LinkageParameters()
    wire_all.CopyFrom(linkage.parameters_from_mapping(file_object(target="all")))
    assert (
        linkage.target_of(linkage.parameters_from_mapping(linkage.parameters_file_object(wire_all)))
        == "all"
    )
