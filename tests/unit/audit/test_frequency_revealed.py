"""DR measures of the frequency attack and the revealed-data uniqueness on hand-checked examples."""

from __future__ import annotations

import numpy as np
import pytest

from party.audit.frequency import frequency_risk, frequency_risk_rows
from party.audit.revealed import blocking_reveal, segment_reveal
from party.audit.uniqueness import factorize
from party.encoding.bits import rows_from_positions


def test_frequency_injective_encoding() -> None:
    # plaintext frequencies 2,2,1,1,2,2: 2 records at frequency 1, 4 at frequency 2
    plain = factorize(["A", "A", "B", "C", "D", "D"])
    enc = factorize(["x", "x", "y", "z", "w", "w"])
    r = frequency_risk(plain, enc)
    # P_s = 1/4 for the four records in pairs, 1/2 for B and C
    assert r.dr_mean == pytest.approx((4 * 0.25 + 2 * 0.5) / 6)
    assert r.dr_max == 0.5
    assert r.dr_mark.count == 0 and r.dr_mark.total == 6
    assert r.aligned_correctly.count == 6


def test_frequency_collision_and_marketer_risk() -> None:
    plain = factorize(["A", "A", "B", "C", "D", "D"])
    collide = factorize(["x", "x", "y", "y", "w", "w"])  # B and C share an encoding
    r = frequency_risk(plain, collide)
    assert r.dr_mean == pytest.approx(0.25) and r.dr_max == 0.25
    assert r.aligned_correctly.count == 4  # B and C are aligned to pairs: wrong
    single = frequency_risk(factorize(["A", "A", "B"]), factorize(["x", "x", "y"]))
    # the one unique encoding aligns with the one unique plaintext: P_s = 1
    assert single.dr_mark.count == 1 and single.dr_mark.total == 3
    assert single.dr_mean == pytest.approx((0.5 + 0.5 + 1.0) / 3)


def test_frequency_unalignable_pattern_has_zero_suspicion() -> None:
    # all plaintexts unique (frequency 1); encodings collide into a pattern seen 3 times
    r = frequency_risk(factorize(["a", "b", "c"]), factorize(["x", "x", "x"]))
    assert r.dr_mean == 0.0 and r.dr_max == 0.0 and r.aligned_correctly.count == 0


def test_frequency_on_bit_rows() -> None:
    rows = rows_from_positions([[0], [0], [3]], 8)
    r = frequency_risk_rows(factorize(["A", "A", "B"]), rows)
    assert r.dr_mark.count == 1


def test_blocking_reveal_hand_checked() -> None:
    digests = np.array([[5, 1], [5, 2], [7, 2], [0, 2], [9, 0]], dtype=np.uint64)
    r = blocking_reveal(digests)
    k0, k1 = r.keys
    assert (k0.records_with_value, k0.blocks, k0.alone.count, k0.largest_block) == (4, 3, 2, 2)
    assert (k1.records_with_value, k1.blocks, k1.alone.count, k1.largest_block) == (4, 2, 1, 3)
    assert k0.size_histogram() == {"1": 2, "2": 1}
    assert r.alone_in_some_block.count == 3 and r.alone_in_some_block.total == 5
    assert r.no_block.count == 0
    assert r.digest_tuple is not None and r.digest_tuple.alone.count == 5
    none = blocking_reveal(np.zeros((3, 1), dtype=np.uint64))
    assert none.no_block.count == 3 and none.keys[0].blocks == 0


def test_segment_reveal_hand_checked() -> None:
    rows = rows_from_positions([[0, 4], [0, 5], [1, 4], [0, 4]], 8)
    r = segment_reveal(rows, 8, 2, k=2)
    assert [s.alone.count for s in r.segments] == [1, 1]
    assert r.segments[0].crowd.tolist() == [3, 3, 1, 3]
    assert r.full.alone.count == 2
    assert r.segment_bits == 4
