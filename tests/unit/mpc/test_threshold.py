"""The integer threshold test equals the oracle's float Dice test on every reachable input."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.mpc.inputs import count_terms
from party.mpc.threshold import threshold_test
from party.protocol.classify import dice


def _float_test(p: int, c: int, x: int, s_t: float) -> bool:
    # the oracle's expression (party.protocol.classify.dice), x = 0 -> Dice 0
    return bool(dice(p, np.array([c]), np.array([x]))[0] >= s_t)


def _exhaustive(p: int, l_bits: int, s_t: float) -> None:
    t = threshold_test(p, l_bits, s_t)
    xs = np.arange(0, p * l_bits + 1)
    x, c = np.meshgrid(xs, np.arange(0, l_bits + 1), indexing="ij")
    ok = p * c <= x
    x, c = x[ok], c[ok]
    want = dice(p, c, x) >= s_t
    assert np.array_equal(count_terms(t, x, True), [t.count_term(int(v), True) for v in x])
    mod = 1 << t.width
    for k in range(c.size):
        ci, xi, wi = int(c[k]), int(x[k]), bool(want[k])
        assert t.matches(ci, xi) == wi, (p, l_bits, s_t, ci, xi)
        # the circuit's S when data party 0 holds all of x, and (c = 0 only) when it holds none
        splits = [(xi, 0)] + ([(0, xi)] if ci == 0 else [])
        for x0, rest in splits:
            s = (t.multiplier * ci + t.count_term(x0, True) + t.count_term(rest, False)) % mod
            assert t.always or (s >> (t.width - 1) == 0) == wi, (ci, xi, x0)
            if wi:
                assert t.total_from(ci, s) == xi


@pytest.mark.parametrize("p", [2, 3, 4, 7])
@pytest.mark.parametrize("l_bits", [1, 7, 24, 60])
@pytest.mark.parametrize(
    "s_t", [0.0, 1.0, 0.8, 0.5, 0.75, 2 / 3, 0.1, 0.3, 0.7, 0.9, 0.85, 0.123456789, 1e-9]
)
def test_exhaustive_small(p, l_bits, s_t):
    _exhaustive(p, l_bits, s_t)


def test_ties_are_matches():
    """Dice exactly s_t matches (>=), one step below does not."""
    t = threshold_test(3, 1024, 0.8)
    # P*c/x = 0.8: c = 8, x = 30
    assert _float_test(3, 8, 30, 0.8) and t.matches(8, 30)
    assert not _float_test(3, 8, 31, 0.8) and not t.matches(8, 31)
    # s_t = 1: only identical filters
    one = threshold_test(3, 1024, 1.0)
    assert one.matches(10, 30) and not one.matches(10, 31)
    zero = threshold_test(3, 1024, 0.0)
    assert zero.always and zero.matches(0, 0)


def test_x_zero_is_no_match_for_positive_threshold():
    for s_t in (1e-12, 0.5, 1.0):
        assert not threshold_test(3, 64, s_t).matches(0, 0)


def test_simple_fraction_for_round_thresholds():
    assert Fraction(threshold_test(3, 1024, 0.8).numerator, 5) == Fraction(4, 5)
    assert threshold_test(3, 1024, 0.8).denominator == 5
    assert threshold_test(5, 1024, 0.75).denominator == 4


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([3, 5]),
    st.sampled_from([512, 1024]),
    st.sampled_from([0.8, 0.7, 0.9, 0.55, 0.95, 0.6180339887]),
    st.data(),
)
def test_large_l_random_points(p, l_bits, s_t, data):
    t = threshold_test(p, l_bits, s_t)
    x = data.draw(st.integers(1, p * l_bits))
    c = data.draw(st.integers(0, x // p))
    assert t.matches(c, x) == _float_test(p, c, x, s_t)
    # and the neighbours of the boundary for this x
    for cc in range(max(0, int(s_t * x / p) - 2), min(x // p, int(s_t * x / p) + 2) + 1):
        assert t.matches(cc, x) == _float_test(p, cc, x, s_t)
