"""Known answers for classification: Dice at its bounds, the threshold boundary, and one-to-one ties.

Expected values are worked out by hand in the comments (not computed by the code under test). Ties
are the point: equal Dice values are common (duplicate records, short filters), and the one-to-one
rule breaks them by the lexicographic order of the sets' key tuples, smaller first.
"""

from __future__ import annotations

import numpy as np
import pytest

from party.encoding.bits import pack_rows
from party.encoding.records import EncodedRecords
from party.protocol.classify import dice, greedy_one_to_one
from party.protocol.driver import run_in_process
from party.protocol.oracle import oracle_matches
from party.protocol.params import ProtocolParameters

U64 = np.uint64


def test_dice_known_answers_at_the_bounds() -> None:
    # P * c / x: 0 when x = 0; 1 when every bit is common; 3 * 5 / 16 = 0.9375 exactly
    got = dice(3, np.array([0, 0, 10, 5, 1]), np.array([0, 7, 30, 16, 3]))
    assert got.tolist() == [0.0, 0.0, 1.0, 0.9375, 1.0]


@pytest.mark.parametrize(
    ("rows", "sims", "kept"),
    [
        # All three sets of records {1, 2} tie at 0.9: (1, 1) is visited first and blocks (1, 2)
        # and (2, 1); (2, 2) at 0.8 is then free; (3, 3) is independent.
        ([(1, 1), (1, 2), (2, 1), (2, 2), (3, 3)], [0.9, 0.9, 0.9, 0.8, 0.5], [0, 3, 4]),
        # Same sets listed in another order: the answer depends on the keys, not the listing.
        ([(2, 1), (3, 3), (2, 2), (1, 2), (1, 1)], [0.9, 0.5, 0.8, 0.9, 0.9], [1, 2, 4]),
        # The second column decides when the first ties: (5, 6) before (5, 7).
        ([(5, 7), (5, 6)], [0.75, 0.75], [1]),
        # Keys compare as unsigned 64-bit integers: 2^63 is larger than 1.
        ([(2**63, 9), (1, 9)], [0.6, 0.6], [1]),
        # Higher Dice wins over a smaller key.
        ([(1, 1), (2, 1)], [0.7, 0.71], [1]),
        # Three parties: (4, 1, 1) and (4, 1, 0) tie; the second is smaller, then (5, 2, 2) is free.
        ([(4, 1, 1), (4, 1, 0), (5, 2, 2)], [1.0, 1.0, 1.0], [1, 2]),
    ],
)
def test_one_to_one_tie_break_known_answers(
    rows: list[tuple[int, ...]], sims: list[float], kept: list[int]
) -> None:
    got = greedy_one_to_one(np.array(rows, dtype=U64), np.array(sims, dtype=np.float64))
    assert got.tolist() == kept


def _table(prefix: str, bit_rows: list[list[int]], filter_bits: int) -> EncodedRecords:
    bits = np.zeros((len(bit_rows), filter_bits), dtype=np.uint8)
    for r, on in enumerate(bit_rows):
        bits[r, on] = 1
    digests = np.full((len(bit_rows), 1), 0x5EED, dtype=U64)  # one common block
    return EncodedRecords(
        tuple(f"{prefix}{i}" for i in range(len(bit_rows))), pack_rows(bits), filter_bits, digests
    )


def tie_tables() -> list[EncodedRecords]:
    """Two parties, l = 8: party 0 holds the same filter twice, party 1 once plus a partial copy.

    a0 = a1 = b0 = bits {0, 1, 2, 3}: sets (a0, b0) and (a1, b0) both have Dice 2 * 4 / 8 = 1.0.
    b1 = bits {0, 1, 2}: (a0, b1) and (a1, b1) both have Dice 2 * 3 / 7 = 0.857...
    a2 = bits {4, 5}, b2 = bits {4, 5, 6, 7}: Dice 2 * 2 / 6 = 0.666... (below s_t = 0.8).
    """
    full, part = [0, 1, 2, 3], [0, 1, 2]
    return [
        _table("a", [full, full, [4, 5]], 8),
        _table("b", [full, part, [4, 5, 6, 7]], 8),
    ]


def test_oracle_one_to_one_breaks_ties_by_record_index() -> None:
    params = ProtocolParameters(("a", "b"), 8, 0.8, 0.0, one_to_one=True, target="all")
    got = [(m.records, m.dice) for m in oracle_matches(tie_tables(), params)]
    # (0, 0) and (1, 0) tie at 1.0: (0, 0) first; then (1, 1) at 6/7 is the only free set.
    assert got == [((0, 0), 1.0), ((1, 1), 6 / 7)]
    params_all = ProtocolParameters(("a", "b"), 8, 0.8, 0.0, target="all")
    got_all = [(m.records, m.dice) for m in oracle_matches(tie_tables(), params_all)]
    assert got_all == [((0, 0), 1.0), ((0, 1), 6 / 7), ((1, 0), 1.0), ((1, 1), 6 / 7)]


def test_threshold_boundary_is_a_match() -> None:
    # s_t equal to a set's Dice (6/7 as the same float) keeps it; the next float above drops it
    exact = ProtocolParameters(("a", "b"), 8, 6 / 7, 0.0, target="all")
    above = ProtocolParameters(("a", "b"), 8, float(np.nextafter(6 / 7, 1.0)), 0.0, target="all")
    assert len(oracle_matches(tie_tables(), exact)) == 4
    assert len(oracle_matches(tie_tables(), above)) == 2
    for params, count in ((exact, 4), (above, 2)):
        run = run_in_process(tie_tables(), params)
        assert run.classification.matches == count


@pytest.mark.parametrize("seed", range(5))
def test_protocol_one_to_one_breaks_ties_by_smaller_pseudonym(seed: int) -> None:
    # The run draws fresh pseudonyms, so the winner of the (a0, b0) / (a1, b0) tie is whichever of
    # a0, a1 got the smaller pseudonym; the loser is then matched to b1 (Dice 6/7).
    params = ProtocolParameters(("a", "b"), 8, 0.8, 0.0, one_to_one=True, target="all")
    run = run_in_process(tie_tables(), params)
    pa = run.pseudonyms[0]
    winner, loser = ("a0", "a1") if int(pa[0]) < int(pa[1]) else ("a1", "a0")
    got = sorted(
        (ra.record_id, rb.record_id, ra.similarity)
        for ra in run.matches[0]
        for rb in run.matches[1]
        if ra.linkage_id == rb.linkage_id
    )
    assert got == sorted([(winner, "b0", 1.0), (loser, "b1", 6 / 7)])
    # the oracle with the run's pseudonyms as keys gives the same answer
    keys = run.pseudonyms
    om = oracle_matches(tie_tables(), params, keys)
    names = [(f"a{m.records[0]}", f"b{m.records[1]}", m.dice) for m in om]
    assert sorted(names) == got
