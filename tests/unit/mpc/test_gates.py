"""Each gate, the full adder, the adder trees and constant multiplication against plain integers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.mpc.driver import run_keys
from party.mpc.errors import MpcError
from party.mpc.gates import Gates, Pair
from party.mpc.keys import ZeroShares
from tests.unit.mpc.helpers import (
    bits_from_words,
    recorded,
    reveal,
    run3,
    share3,
    words_from_bits,
)


def _gate_circuit(op: str):
    def circuit(g: Gates, ins: list[Pair]):
        x, y = ins
        if op == "and":
            return (yield from g.and_(x, y))
        if op == "xor":
            return (x[0] ^ y[0], x[1] ^ y[1])
        if op == "not":
            return g.not_(x)
        raise AssertionError(op)

    return circuit


@pytest.mark.parametrize("op", ["and", "xor", "not"])
def test_gates_match_plain_bits(op):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2**64, size=(3, 5), dtype=np.uint64)
    y = rng.integers(0, 2**64, size=(3, 5), dtype=np.uint64)
    sx, sy = share3(x, rng), share3(y, rng)
    outs, gates = run3(_gate_circuit(op), [[sx[i], sy[i]] for i in range(3)])
    want = {"and": x & y, "xor": x ^ y, "not": ~x}[op]
    assert np.array_equal(reveal(outs), want)
    assert all(g.rounds == (1 if op == "and" else 0) for g in gates)


def test_and_truth_table_in_every_lane():
    rng = np.random.default_rng(2)
    x = np.array([0b0011], dtype=np.uint64)
    y = np.array([0b0101], dtype=np.uint64)
    outs, _ = run3(
        _gate_circuit("and"), [[a, b] for a, b in zip(share3(x, rng), share3(y, rng), strict=True)]
    )
    assert int(reveal(outs)[0]) == 0b0001


def test_open_reveals_the_value_at_every_cp():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**64, size=7, dtype=np.uint64)

    def circuit(g: Gates, ins: list[Pair]):
        v = yield from g.open(ins[0])
        return (v, v)

    outs, _ = run3(circuit, [[s] for s in share3(x, rng)])
    for o in outs:
        assert np.array_equal(o[0], x)


def _sum_circuit(width: int, lanes: int, weights: list[int]):
    """Sum of the input bit rows, each placed in column weights[r], mod 2^width."""

    def circuit(g: Gates, ins: list[Pair]):
        (x,) = ins
        cols = []
        for k in range(width):
            rows = [r for r, w in enumerate(weights) if w == k]
            cols.append((x[0][rows], x[1][rows]))
        return (yield from g.compress(cols, width, lanes))

    return circuit


def _lane_sum(bits: np.ndarray, weights: list[int], width: int, n: int) -> np.ndarray:
    """Plain reference: per lane, sum of bit * 2^weight mod 2^width (Python ints)."""
    out = []
    for lane in range(n):
        out.append(sum(int(bits[r, lane]) << w for r, w in enumerate(weights)) % (1 << width))
    return np.array(out, dtype=object)


def _lanes_value(words: np.ndarray, n: int) -> list[int]:
    b = bits_from_words(words)  # (width, 64 * lanes)
    return [sum(int(b[k, lane]) << k for k in range(b.shape[0])) for lane in range(n)]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 31, 64, 100])
def test_popcount_tree(count):
    rng = np.random.default_rng(count)
    n = 128
    bits = rng.integers(0, 2, size=(count, n), dtype=np.uint8)
    bits[:, 0] = 1  # all ones in lane 0, all zeros in lane 1: the boundary values
    bits[:, 1] = 0
    width = count.bit_length()
    sx = share3(words_from_bits(bits), rng)
    outs, _ = run3(_sum_circuit(width, n // 64, [0] * count), [[s] for s in sx])
    got = _lanes_value(reveal(outs), n)
    assert got == [int(bits[:, lane].sum()) for lane in range(n)]
    assert got[0] == count and got[1] == 0


def test_payload_views_send_the_same_rounds_as_copies():
    """An adder tree's rounds with ``payload_views``: views of the gates' arrays (no copy),
    byte for byte the payloads and outcome of the copies."""
    rng = np.random.default_rng(8)
    n, count = 128, 31
    bits = rng.integers(0, 2, size=(count, n), dtype=np.uint8)
    sx = share3(words_from_bits(bits), rng)
    keys = run_keys()
    sent: dict[bool, list[tuple[int, int, bytes]]] = {}
    outs = {}
    for views in (False, True):
        sent[views] = []
        first = next(Gates(0, ZeroShares(keys[0]), payload_views=views).and_(sx[0], sx[0]))
        assert isinstance(first.payload, memoryview if views else bytes)

        def circuit(g: Gates, ins: list[Pair], kept: list[tuple[int, int, bytes]] = sent[views]):
            return recorded(_sum_circuit(count.bit_length(), n // 64, [0] * count)(g, ins), kept)

        outs[views], _ = run3(circuit, [[s] for s in sx], keys, payload_views=views)
    assert len(sent[True]) > 3 and sent[True] == sent[False]
    assert np.array_equal(reveal(outs[True]), reveal(outs[False]))
    assert _lanes_value(reveal(outs[True]), n) == [int(bits[:, k].sum()) for k in range(n)]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 2**12 - 1), min_size=1, max_size=5),
    st.integers(0, 2**12 - 1),
    st.integers(1, 20),
)
def test_adder_and_constant_multiplication(addends, c, width):
    """K * c + sum(addends) mod 2^width (shift-and-add columns) equals plain integer arithmetic."""
    rng = np.random.default_rng(len(addends) + c + width)
    k_const = (c * 2654435761) % 97 + 1
    cw = 12
    rows: list[np.ndarray] = []
    weights: list[int] = []
    lanes_vals = [c, 0, 2**cw - 1]
    for e in range(k_const.bit_length()):
        if k_const >> e & 1:
            for b in range(cw):
                rows.append(np.array([(v >> b) & 1 for v in lanes_vals]))
                weights.append(b + e)
    for a in addends:
        for b in range(12):
            rows.append(np.array([(a >> b) & 1, 0, (a >> b) & 1]))
            weights.append(b)
    keep = [r for r, w in enumerate(weights) if w < width]
    bits = np.zeros((len(rows), 64), dtype=np.uint8)
    for r, row in enumerate(rows):
        bits[r, :3] = row
    sel = bits[keep]
    sx = share3(words_from_bits(sel), rng)
    outs, _ = run3(_sum_circuit(width, 1, [weights[r] for r in keep]), [[s] for s in sx])
    got = _lanes_value(reveal(outs), 3)
    mod = 1 << width
    assert got[0] == (k_const * c + sum(addends)) % mod
    assert got[1] == 0
    assert got[2] == (k_const * (2**cw - 1) + sum(addends)) % mod


def test_wrong_length_payload_raises():
    rng = np.random.default_rng(5)
    from party.mpc.driver import run_keys
    from party.mpc.keys import ZeroShares

    g = Gates(0, ZeroShares(run_keys()[0]))
    x = share3(np.ones(4, dtype=np.uint64), rng)[0]
    gen = g.and_(x, x)
    rnd = next(gen)
    assert len(rnd.payload) == 32
    with pytest.raises(MpcError, match="expected a payload of 32 bytes, got 31"):
        gen.send(bytes(rnd.payload[:-1]))


@settings(max_examples=10, deadline=None)
@given(
    st.sampled_from([(3, 60, 0.8), (3, 1024, 0.8), (5, 100, 0.5), (2, 64, 1.0), (4, 48, 0.0)]),
    st.data(),
)
def test_comparator_matches_the_threshold_on_plain_integers(case, data):
    """The circuit's S = K*c + sum of count terms and its match bit (NOT top bit) per lane."""
    from party.mpc.threshold import threshold_test

    p, l_bits, s_t = case
    t = threshold_test(p, l_bits, s_t)
    lanes = 64
    counts = [data.draw(st.lists(st.integers(0, l_bits), min_size=lanes, max_size=lanes))]
    counts += [[max(c, data.draw(st.integers(0, l_bits))) for c in counts[0]] for _ in range(p - 1)]
    common = [
        min(data.draw(st.integers(0, l_bits)), *(cnt[k] for cnt in counts)) for k in range(lanes)
    ]
    counts[0][0] = common[0] = 0  # boundary lanes: x_0 = 0, and an exact tie where reachable
    cw, w = t.count_bits, t.width
    rows, weights = [], []
    for e in [e for e in range(t.multiplier.bit_length()) if t.multiplier >> e & 1]:
        for b in range(cw):
            if b + e < w:
                rows.append([(c >> b) & 1 for c in common])
                weights.append(b + e)
    for j in range(p):
        terms = [t.count_term(x, j == 0) for x in counts[j]]
        for b in range(w):
            rows.append([(v >> b) & 1 for v in terms])
            weights.append(b)
    rng = np.random.default_rng(len(rows))
    sx = share3(words_from_bits(np.array(rows, dtype=np.uint8)), rng)
    outs, _ = run3(_sum_circuit(w, 1, weights), [[s] for s in sx])
    s_vals = _lanes_value(reveal(outs), lanes)
    for k in range(lanes):
        total = sum(cnt[k] for cnt in counts)
        want = t.matches(common[k], total)
        assert t.always or (s_vals[k] >> (w - 1) == 0) == want
        if want:
            assert t.total_from(common[k], s_vals[k]) == total
