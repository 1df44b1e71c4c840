"""party.mpc reproduces tests/data/kat_mpc.json byte for byte (scripts/gen_kat_mpc.py, independent)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pathlib
from types import ModuleType

import numpy as np
import pytest

from party.mpc.compute import ComputeParty
from party.mpc.driver import drive
from party.mpc.gates import Round
from party.mpc.inputs import InputShare, share_records
from party.mpc.keys import ComputeKeys
from party.mpc.threshold import threshold_test
from party.protocol.params import ProtocolParameters

ROOT = pathlib.Path(__file__).resolve().parents[3]
KAT = json.loads((ROOT / "tests" / "data" / "kat_mpc.json").read_text())


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_kat_mpc", ROOT / "scripts" / "gen_kat_mpc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def _rows(hexes: list[str]) -> np.ndarray:
    return np.stack([np.frombuffer(bytes.fromhex(h), dtype="<u8").astype(np.uint64) for h in hexes])


def _hex(rows: np.ndarray) -> list[str]:
    return [r.astype("<u8").tobytes().hex() for r in rows]


def _params() -> ProtocolParameters:
    p = KAT["parameters"]
    return ProtocolParameters(
        tuple(f"p{j}" for j in range(p["parties"])),
        p["filter_bits"],
        p["match_threshold"],
        0.0,
        p["one_to_one"],
        mode="mpc3",
        target="all",
    )


def _shares() -> list[list[InputShare]]:
    params = _params()
    return [_share_vector(v, params, v["seed"]) for v in KAT["shares"]]


def _share_vector(v: dict, params: ProtocolParameters, seed: str) -> list[InputShare]:
    """share_records of one "shares" vector's records with the random stream of ``seed``."""
    return share_records(
        v["source"],
        params,
        np.array(v["pseudonyms"], dtype=np.uint64),
        np.array(v["block_digests"], dtype=np.uint64),
        _rows(v["filters_hex"]),
        np.array(v["counts"], dtype=np.int64),
        GEN.Stream(seed),
    )


def test_threshold_matches_the_vector():
    p = KAT["parameters"]
    t = threshold_test(p["parties"], p["filter_bits"], p["match_threshold"])
    assert (t.numerator, t.denominator, t.width) == (p["numerator"], p["denominator"], p["width"])


def test_share_layout():
    for v, shares in zip(KAT["shares"], _shares(), strict=True):
        for want, got in zip(v["targets"], shares, strict=True):
            assert got.target == want["target"] and got.source == v["source"]
            assert [_hex(f) for f in got.filters] == want["filters_hex"]
            assert [c.tolist() for c in got.counts] == want["counts"]


def _spy(sent: list[str], gen):
    """Pass a compute party's rounds through, keeping each payload's hex."""
    incoming = None
    try:
        while True:
            rnd: Round = gen.send(incoming)
            sent.append(rnd.payload.hex())
            incoming = yield rnd
    except StopIteration as stop:
        return stop.value


def test_circuit_rounds_and_outcome():
    params = _params()
    keys = [bytes.fromhex(h) for h in KAT["circuit"]["keys_hex"]]
    cps = [ComputeParty(i, params, ComputeKeys(keys[i], keys[(i + 1) % 3])) for i in range(3)]
    for shares in _shares():
        for s in shares:
            cps[s.target].receive_input(s)
    sent: list[list[str]] = [[], [], []]
    outcomes = drive([_spy(sent[i], cps[i].run()) for i in range(3)])
    assert sent == KAT["circuit"]["sent_hex"]
    cls = outcomes[0].classification
    want = KAT["circuit"]["matches"]
    assert cls.sets_summed == KAT["circuit"]["candidate_sets"]
    assert cls.candidates.tolist() == [m["pseudonyms"] for m in want]
    assert cls.similarities.tolist() == [m["dice"] for m in want]
    assert cls.linkage_ids.tolist() == [m["linkage_id"] for m in want]


@pytest.mark.slow
def test_generator_reproduces_the_file():
    assert json.loads(json.dumps(GEN.build())) == KAT


def _any_params() -> ProtocolParameters:
    return dataclasses.replace(_params(), target="any", min_parties=2, solver="greedy")


def test_target_any_count_terms_and_pair_circuit():
    """Vector "any": pair-test count terms (offset at every party with x = 0), the P = 2 circuit's
    round payloads per pair of parties, and the matched pairs."""
    from party.mpc.pairs import PairComputeParty

    params = _any_params()
    vec = KAT["any"]
    t = threshold_test(2, params.filter_bits, params.match_threshold)
    assert (t.numerator, t.denominator, t.width) == tuple(
        vec["parameters"][k] for k in ("numerator", "denominator", "width")
    )
    keys = [bytes.fromhex(h) for h in KAT["circuit"]["keys_hex"]]
    cps = [PairComputeParty(i, params, ComputeKeys(keys[i], keys[(i + 1) % 3])) for i in range(3)]
    for v, want in zip(KAT["shares"], vec["shares"], strict=True):
        shares = _share_vector(v, params, want["seed"])
        terms = shares[0].counts[0] ^ shares[1].counts[0] ^ shares[2].counts[0]
        assert terms.tolist() == want["count_terms"]
        for s in shares:
            cps[s.target].receive_input(s)
    sent: list[list[str]] = [[], [], []]
    outcomes = drive([_spy(sent[i], cps[i].run()) for i in range(3)])
    assert sent == vec["sent_hex"]
    want = [(*m["pair"], m["dice"]) for m in vec["matched_pairs"]]
    assert outcomes[0].pairs() == want
