"""The implementation against the committed protocol known-answer vectors (tests/data/kat_protocol.json).

The file is written by scripts/gen_kat_protocol.py from reference code that imports nothing from
the project (its own plain encoder and plain-integer protocol arithmetic). These tests require the production encoder, PartyEngine (every
kernel), wire encoder, parameters digest and key confirmation to reproduce it exactly, and check
the vectors' internal consistency (masked = mask + sum mod 2^64, per-hop c_i, Dice) from the
specification alone, so a change of any pinned behaviour fails here.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from party.encoding import bits
from party.encoding.encoder import Encoder
from party.encoding.schema import parse_schema
from party.node import wire
from party.node.keyconfirm import key_confirmation
from party.protocol.blocks import common_blocks
from party.protocol.engine import PartyEngine
from party.protocol.kernel import HAVE_NUMBA, KERNELS
from party.protocol.oracle import oracle_matches
from party.protocol.params import ProtocolParameters
from proto import common_pb2, linkage
from tests.conformance import client

ROOT = pathlib.Path(__file__).resolve().parents[2]
KAT_PATH = ROOT / "tests" / "data" / "kat_protocol.json"
MASK64 = 2**64 - 1


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_kat_protocol", ROOT / "scripts" / "gen_kat_protocol.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
KAT: dict[str, Any] = json.loads(KAT_PATH.read_text(encoding="utf-8"))
SECRET = bytes.fromhex(KAT["secret_hex"])
VECTORS = {v["name"]: v for v in KAT["vectors"]}


def u64(values: list[str]) -> np.ndarray:
    return np.array([int(v) for v in values], dtype=np.uint64)


def test_reference_computation_reproduces_the_file() -> None:
    assert GEN.render(GEN.build()) == KAT_PATH.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", VECTORS)
def test_parameters_digest_and_key_confirmation(name: str) -> None:
    v = VECTORS[name]
    msg = linkage.parameters_from_mapping(v["parameters"])
    assert (
        linkage.canonical_json(linkage.parameters_to_mapping(msg)).decode()
        == v["parameters_canonical_json"]
    )
    assert linkage.parameters_digest(msg) == v["parameters_digest"]
    assert (
        client.parameters_digest(client.parameters_message(v["parameters"]))
        == v["parameters_digest"]
    )
    conf = key_confirmation(SECRET, v["run_id"], v["parameters_digest"])
    assert conf.hex() == v["key_confirmation_hex"]
    assert client.key_confirmation(SECRET, v["run_id"], v["parameters_digest"]) == conf


@pytest.mark.parametrize("name", VECTORS)
def test_vector_is_consistent_with_the_specification(name: str) -> None:
    """Pure arithmetic on the file: masks, per-hop c_i and x_i, sums, Dice, linkage ids."""
    v = VECTORS[name]
    p = len(v["parties"])
    ring = v["ring"]
    hops = ring["hops"]
    assert [h["hop"] for h in hops] == list(range(p))
    popcounts = [party["popcounts"] for party in v["parties"]]
    pseud_rows = [
        {int(ps): r for r, ps in enumerate(party["record_pseudonyms"]) if ps != "0"}
        for party in v["parties"]
    ]
    for h, hop in enumerate(hops):
        cands = [tuple(int(x) for x in row) for row in hop["candidates"]]
        assert cands == sorted(set(cands)), "candidate rows sorted lexicographically and unique"
        surv = v["comparison"][h]
        c_of = {
            tuple(int(x) for x in row): c
            for row, c in zip(surv["survivors"], surv["c"], strict=True)
        }
        assert set(cands) <= set(c_of)
        for k, cand in enumerate(cands):
            if h == 0:
                prev_c, prev_x = int(ring["masks_c"][k]), int(ring["masks_x"][k])
            else:
                prev = [tuple(int(x) for x in row) for row in hops[h - 1]["candidates"]]
                j = prev.index(cand)
                prev_c, prev_x = int(hops[h - 1]["c_masked"][j]), int(hops[h - 1]["x_masked"][j])
            x_h = popcounts[h][pseud_rows[h][cand[h]]]
            assert int(hop["c_masked"][k]) == (prev_c + c_of[cand]) & MASK64
            assert int(hop["x_masked"][k]) == (prev_x + x_h) & MASK64
    first = [tuple(int(x) for x in row) for row in hops[0]["candidates"]]
    for k, cand in enumerate(tuple(int(x) for x in row) for row in ring["final_candidates"]):
        j = first.index(cand)
        sc = (int(hops[-1]["c_masked"][k]) - int(ring["masks_c"][j])) & MASK64
        sx = (int(hops[-1]["x_masked"][k]) - int(ring["masks_x"][j])) & MASK64
        assert (sc, sx) == (ring["sum_c"][k], ring["sum_x"][k])
        assert ring["dice"][k] == p * sc / sx
    cls = v["classification"]
    assert cls["linkage_ids"] == [str(i + 1) for i in range(cls["matches"])]
    assert all(s >= v["parameters"]["match_threshold"] for s in cls["similarities"])


@pytest.mark.parametrize("name", VECTORS)
def test_shares_are_segments_of_the_filters(name: str) -> None:
    """Segment j = filter bits [j*w, (j+1)*w) repacked from 0; rows sorted by pseudonym; each
    digest sent as its position in the common blocks (-1: not common); every row in a common block
    (section 9 of docs/protocol.md)."""
    v = VECTORS[name]
    w, l_bits = v["segment_bits"], v["filter_bits"]
    common = [int(d) for d in v["common_blocks"]]
    assert common == sorted(set(common))
    for share in v["shares"]:
        party = v["parties"][share["source"]]
        row_of = {ps: r for r, ps in enumerate(party["record_pseudonyms"]) if ps != "0"}
        ps = [int(x) for x in share["pseudonyms"]]
        assert ps == sorted(ps) and len(set(ps)) == len(ps) and 0 not in ps
        assert sorted(share["pseudonyms"]) == sorted(row_of)
        for k, pseudonym in enumerate(share["pseudonyms"]):
            r = row_of[pseudonym]
            full = int.from_bytes(bytes.fromhex(party["filters_hex"][r]), "little")
            assert full < 2**l_bits
            seg = (full >> (share["target"] * w)) & ((1 << w) - 1)
            assert share["segments_hex"][k] == seg.to_bytes(8 * ((w + 63) // 64), "little").hex()
            digests = [int(d) for d in party["block_digests"][r]]
            want = [common.index(d) if d in common else -1 for d in digests]
            assert share["block_positions"][k] == want
            assert max(want) >= 0
        payload = share["payload_hex"]
        assert payload["pseudonyms"] == b"".join(p.to_bytes(8, "little") for p in ps).hex()
        at = [x for row in share["block_positions"] for x in row]
        assert (
            payload["block_positions"]
            == b"".join(x.to_bytes(4, "little", signed=True) for x in at).hex()
        )
        assert payload["segments"] == "".join(share["segments_hex"])


def _tables(v: dict[str, Any]) -> list[Any]:
    schema = parse_schema(v["parameters"]["schema"], source="kat")
    encoder = Encoder(schema, SECRET)
    return [encoder.encode_rows(party["records"], id_column="rec_id") for party in v["parties"]]


@pytest.mark.parametrize("name", VECTORS)
def test_encoder_filters_popcounts_and_block_digests(name: str) -> None:
    v = VECTORS[name]
    for party, table in zip(v["parties"], _tables(v), strict=True):
        assert [bits.row_to_hex(r) for r in table.filters] == party["filters_hex"]
        assert table.popcounts.tolist() == party["popcounts"]
        assert [[str(int(d)) for d in row] for row in table.block_digests] == party["block_digests"]


def _protocol_parameters(v: dict[str, Any], **over: Any) -> ProtocolParameters:
    prm = v["parameters"]
    fields: dict[str, Any] = {
        "parties": tuple(prm["parties"]),
        "filter_bits": v["filter_bits"],
        "match_threshold": prm["match_threshold"],
        "segment_threshold": prm["segment_threshold"],
        "one_to_one": prm["one_to_one"],
        "max_block_size": prm["max_block_size"],
        "target": prm["target"],
    }
    fields.update(over)
    return ProtocolParameters(**fields)


KERNEL_CASES = [k for k in KERNELS if k != "numba" or HAVE_NUMBA]


@pytest.mark.parametrize("kernel", KERNEL_CASES)
@pytest.mark.parametrize("name", VECTORS)
def test_engine_reproduces_every_step(name: str, kernel: str) -> None:
    v = VECTORS[name]
    tables = _tables(v)
    params = _protocol_parameters(v)
    p = params.party_count
    engines = [
        PartyEngine(
            i,
            params,
            tables[i],
            random_bytes=GEN.Stream(f"{name}/{v['parties'][i]['name']}"),
            kernel=kernel,
        )
        for i in range(p)
    ]
    ref = common_pb2.RunRef(run_id=v["run_id"], parameters_digest=v["parameters_digest"])
    mine = [e.block_digests() for e in engines]
    assert [[str(int(d)) for d in m] for m in mine] == [
        party["distinct_block_digests"] for party in v["parties"]
    ]
    common = common_blocks(mine)
    assert [str(int(d)) for d in common] == v["common_blocks"]
    for e in engines:
        e.set_common_blocks(common)
    for e, party in zip(engines, v["parties"], strict=True):
        assert [str(int(x)) for x in e.record_pseudonyms] == party["record_pseudonyms"]
    want_shares = {(s["source"], s["target"]): s for s in v["shares"]}
    for e in engines:
        for share in e.outgoing_shares():
            want = want_shares.pop((share.source, share.target))
            assert share.segment_bits == want["segment_bits"] == v["segment_bits"]
            assert [str(int(x)) for x in share.pseudonyms] == want["pseudonyms"]
            assert share.block_positions.tolist() == want["block_positions"]
            assert [bits.row_to_hex(r) for r in share.segments] == want["segments_hex"]
            (chunk,) = list(wire.share_to_chunks(ref, share))
            assert chunk.pseudonyms.hex() == want["payload_hex"]["pseudonyms"]
            assert chunk.block_positions.hex() == want["payload_hex"]["block_positions"]
            assert chunk.segments.hex() == want["payload_hex"]["segments"]
            engines[share.target].receive_share(share)
    assert not want_shares
    for e, comp in zip(engines, v["comparison"], strict=True):
        stats = e.compare()
        assert stats.candidate_sets == comp["candidate_sets_enumerated"]
        assert stats.survivors == len(comp["survivors"])
    msg = engines[0].ring_start()
    (ring_chunk,) = list(wire.ring_to_chunks(ref, 0, msg))
    for field in ("candidates", "c_masked", "x_masked"):
        assert getattr(ring_chunk, field).hex() == v["ring"]["payload_hex_hop0"][field]
    for h in range(p):
        want = v["ring"]["hops"][h]
        assert msg.hop == want["hop"]
        assert [[str(int(x)) for x in row] for row in msg.candidates] == want["candidates"]
        assert [str(int(x)) for x in msg.c_masked] == want["c_masked"]
        assert [str(int(x)) for x in msg.x_masked] == want["x_masked"]
        if h + 1 < p:
            msg = engines[h + 1].ring_step(msg)
    cls = engines[0].ring_finish(msg)
    want_cls = v["classification"]
    assert cls.sets_summed == want_cls["sets_summed"]
    assert cls.above_threshold == want_cls["above_threshold"]
    assert cls.matches == want_cls["matches"]
    assert [[str(int(x)) for x in row] for row in cls.candidates] == want_cls["candidates"]
    assert cls.similarities.tolist() == want_cls["similarities"]
    assert [str(int(x)) for x in cls.linkage_ids] == want_cls["linkage_ids"]
    for j, want_res in enumerate(v["results"]):
        res = engines[0].results_for(cls, j)
        assert [str(int(x)) for x in res.linkage_ids] == want_res["linkage_ids"]
        assert res.similarities.tolist() == want_res["similarities"]
        assert [str(int(x)) for x in res.pseudonyms] == want_res["pseudonyms"]
        rows = engines[j].resolve_results(res)
        assert [
            {"linkage_id": r.linkage_id, "similarity": r.similarity, "record_id": r.record_id}
            for r in rows
        ] == want_res["rows"]


@pytest.mark.parametrize("name", VECTORS)
def test_oracle_dice(name: str) -> None:
    v = VECTORS[name]
    params = _protocol_parameters(
        v, match_threshold=0.0, segment_threshold=0.0, one_to_one=False, max_block_size=None
    )
    got = sorted((m.records, m.dice) for m in oracle_matches(_tables(v), params))
    want = sorted((tuple(o["records"]), o["dice"]) for o in v["oracle"])
    assert got == want
