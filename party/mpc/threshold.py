"""The Dice threshold as an exact integer test, equal to the oracle's float test on every input.

The oracle (``party.protocol.classify.dice``) matches a candidate set iff
``float(P*c) / float(x) >= s_t`` in float64, with Dice 0 when x = 0. Inside the circuit we need an
integer test. Reachable inputs satisfy 0 <= P*c <= x <= P*l (each party's count is at least the
common count c, and at most l). Correctly rounded division is monotone in the exact ratio
r = P*c/x, so among reachable ratios the float test passes exactly for r >= q0, where q0 is the
smallest passing ratio; let q1 be the largest failing one (for s_t > 0 the ratio 0 fails and the
ratio 1 passes, so both exist). For any fraction N/D with q1 < N/D <= q0 no reachable ratio lies in
[q1 < r < N/D], so for x > 0

    float test passes  <=>  r >= q0  <=>  r >= N/D  <=>  P*D*c - N*x >= 0.

We take the simplest such fraction (smallest denominator, Stern-Brocot tree): 4/5 for s_t = 0.8.
x = 0 (all filters empty) must not match when s_t > 0, but passes ``0 >= 0``; x = 0 implies x_0 = 0
(data party 0's count), so data party 0 subtracts 2^(w-2) from its count term when its own x_0 is 0
(then c = 0 and the sum is negative whatever the others' counts). With K = P*D the circuit evaluates
S = K*c + sum_j t_j in w-bit two's complement, t_j = -N*x_j (minus that offset), and matches iff
S >= 0 (top bit 0); for a match S = K*c - N*x exactly, so x = (K*c - S) / N. For s_t = 0 every set
matches (Dice >= 0 always): ``always`` is set, K = 0, N = 1, no offset, and S = -x opens x.

Target "any" compares pairs (a, b) of records of two parties with the P = 2 test. A data party is
the first of some pairs and the second of others, so *every* data party subtracts the offset when
its own x_j is 0: with both x_a = x_b = 0, S = -2 * 2^(w-2) = -2^(w-1), still representable and
negative; with one of them 0, S >= -N*l - 2^(w-2) > -2^(w-1) (w has N*2*l < 2^(w-2)). A matched pair
has x_a, x_b > 0 (c > 0), so it carries no offset and x = x_a + x_b is recovered as above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING

from party.mpc.errors import MpcError

if TYPE_CHECKING:
    from party.protocol.params import ProtocolParameters


@dataclass(frozen=True)
class ThresholdTest:
    """``P*D*c - N*x >= 1`` (or always true), and the two's complement width w of S."""

    parties: int
    filter_bits: int
    numerator: int  # N
    denominator: int  # D
    always: bool  # s_t == 0: every set matches
    width: int  # w: bits of S = K*c - N*x (two's complement) and of the count terms

    @property
    def multiplier(self) -> int:
        """K = P * D, the constant c is multiplied by."""
        return self.parties * self.denominator

    @property
    def count_bits(self) -> int:
        """Bits of the common count c (0..l)."""
        return self.filter_bits.bit_length()

    def matches(self, common: int, total: int) -> bool:
        """The integer test on plain values (reference for the circuit)."""
        return self.always or (total > 0 and self.multiplier * common - self.numerator * total >= 0)

    def count_term(self, count: int, first: bool) -> int:
        """A data party's w-bit term: -N * x_j mod 2^w, minus 2^(w-2) at data party 0 if x_0 = 0."""
        offset = (1 << (self.width - 2)) if first and count == 0 and not self.always else 0
        return (-self.numerator * count - offset) % (1 << self.width)

    def total_from(self, common: int, s_value: int) -> int:
        """x of a matched set from c and the opened w-bit S = K*c - N*x (raises if impossible)."""
        s = s_value - (1 << self.width) if s_value >> (self.width - 1) else s_value
        num = self.multiplier * common - s
        if num < 0 or num % self.numerator:
            raise MpcError("opened sums are inconsistent (x is not an integer)")
        return num // self.numerator


def _passes(parties: int, common: int, total: int, threshold: float) -> bool:
    return float(parties * common) / float(total) >= threshold


def _stern_brocot_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction with the smallest denominator in (lo, hi] (0 <= lo < hi <= 1)."""
    a, b, c, d = 0, 1, 1, 0  # mediants of a/b = 0 and c/d = infinity
    while True:
        m = Fraction(a + c, b + d)
        if m <= lo:
            a, b = a + c, b + d
        elif m > hi:
            c, d = a + c, b + d
        else:
            return m


@lru_cache(maxsize=64)
def threshold_test(parties: int, filter_bits: int, match_threshold: float) -> ThresholdTest:
    """The exact integer form of ``dice >= s_t`` for P parties and l-bit filters (module docstring)."""
    if parties < 2 or filter_bits < 1 or not 0.0 <= match_threshold <= 1.0:
        raise MpcError("threshold test needs P >= 2, l >= 1 and s_t in [0, 1]")
    p, l_bits, st = parties, filter_bits, float(match_threshold)
    if st == 0.0:
        width = (p * l_bits).bit_length() + 1
        return ThresholdTest(p, l_bits, 1, 0, True, width)
    q0: Fraction | None = None  # smallest passing reachable ratio
    q1 = Fraction(0)  # largest failing reachable ratio (0 fails since s_t > 0)
    for x in range(1, p * l_bits + 1):
        top = x // p  # c <= x / P
        c = min(top, max(0, math.ceil(st * x / p)))
        while c > 0 and _passes(p, c - 1, x, st):
            c -= 1
        while c <= top and not _passes(p, c, x, st):
            c += 1
        if c <= top:
            r = Fraction(p * c, x)
            if q0 is None or r < q0:
                q0 = r
        if c > 0:
            r = Fraction(p * (c - 1), x)
            if r > q1:
                q1 = r
    assert q0 is not None  # the ratio 1 (c = x / P) always passes for s_t <= 1
    q = _stern_brocot_between(q1, q0)
    n, d = q.numerator, q.denominator
    width = max((p * d * l_bits).bit_length() + 1, (n * p * l_bits).bit_length() + 2)
    return ThresholdTest(p, l_bits, n, d, False, width)


def run_threshold_test(params: ProtocolParameters) -> ThresholdTest:
    """The test of a run's comparisons: P-way sets (target "all") or pairs (target "any", P = 2)."""
    parties = 2 if params.target == "any" else params.party_count
    return threshold_test(parties, params.filter_bits, params.match_threshold)
