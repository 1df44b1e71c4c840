"""Fill sweeps: scaled bit budgets, distinct candidate pairs, their Dice counts, fill separation."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

from party.encoding.bits import rows_from_positions
from party.encoding.records import EncodedRecords
from party.synthetic.blocking_recall import candidate_pair_dice_counts, distinct_candidate_pairs
from party.synthetic.fill import scale_bits_per_feature, separation
from party.synthetic.truth import truth_from_labels

BITS = 128


def _table(prefix: str, positions: list[list[int]], digests: list[list[int]]) -> EncodedRecords:
    return EncodedRecords(
        tuple(f"{prefix}{i}" for i in range(len(positions))),
        rows_from_positions(positions, BITS),
        BITS,
        np.array(digests, dtype=np.uint64).reshape(len(positions), -1),
    )


def test_scale_bits_per_feature_keeps_ratios_and_other_keys():
    schema: dict[str, Any] = {
        "l": 1024,
        "features": [
            {"identifier": "a", "strategy": {"bitsPerFeature": 300}},
            {"identifier": "b", "strategy": {"bitsPerFeature": 150}},
            {"identifier": "c", "strategy": {"bitsPerToken": 20}},
            {"identifier": "d", "strategy": {"bitsPerFeature": 1}},
        ],
    }
    got = scale_bits_per_feature(schema, 0.45)
    assert [f["strategy"] for f in got["features"]] == [
        {"bitsPerFeature": 135},
        {"bitsPerFeature": 68},  # 67.5 rounds to even: 68
        {"bitsPerToken": 20},
        {"bitsPerFeature": 1},  # never below 1
    ]
    assert schema["features"][0]["strategy"] == {"bitsPerFeature": 300}  # not mutated
    assert got["l"] == 1024
    with pytest.raises(ValueError, match="scale factor must be positive"):
        scale_bits_per_feature(schema, 0)


def test_distinct_candidate_pairs_equal_brute_force():
    rng = np.random.default_rng(5)
    a_dig = rng.integers(0, 4, size=(40, 3))  # 0 = no value; few values: many shared blocks
    b_dig = rng.integers(0, 4, size=(30, 3))
    a = _table("a", [[0]] * 40, a_dig.tolist())
    b = _table("b", [[0]] * 30, b_dig.tolist())
    want = {
        (i, j)
        for i, j in itertools.product(range(40), range(30))
        if any(a_dig[i, c] != 0 and a_dig[i, c] == b_dig[j, c] for c in range(3))
    }
    got = distinct_candidate_pairs(a, b)
    assert got.dtype == np.int64 and got.shape[1] == 2
    assert len(got) == len(want) and {tuple(map(int, r)) for r in got} == want
    none = _table("n", [[0]] * 5, [[0, 0, 0]] * 5)
    assert distinct_candidate_pairs(a, none).shape == (0, 2)


def test_candidate_pair_dice_counts_with_ties_at_the_threshold():
    # party 0 row 0: bits 0-9 (10); party 1: row 0 bits 0-9 (Dice 1.0), row 1 bits 0-7 + 20, 21
    # (c = 8, Dice 16 / 20 = 0.8 exactly: a tie), row 2 bits 50-59 (Dice 0), row 3 empty in
    # another block (not a candidate). Party 2 shares no block.
    p0 = _table("x", [list(range(10))], [[7, 0]])
    p1 = _table(
        "y",
        [list(range(10)), [*range(8), 20, 21], list(range(50, 60)), []],
        [[7, 0], [0, 7], [7, 7], [9, 9]],
    )
    p2 = _table("z", [list(range(10))], [[5, 5]])
    assert distinct_candidate_pairs(p0, p1).tolist() == [[0, 0], [0, 2]]
    total, reached = candidate_pair_dice_counts([p0, p1, p2], [0.8, 0.81, 1.0], chunk=1)
    assert total == 2  # (0, 0) and (0, 2); row 1's 7 is in the other pass
    assert reached == {0.8: 1, 0.81: 1, 1.0: 1}
    p1b = _table("y", [list(range(10)), [*range(8), 20, 21]], [[7, 0], [7, 7]])
    total, reached = candidate_pair_dice_counts([p0, p1b], [0.8, 0.81])
    assert total == 2 and reached == {0.8: 2, 0.81: 1}


def test_separation_figures_on_hand_made_filters():
    # two parties, two entities each: true pairs with Dice 1.0 and 0.5; unrelated pairs share
    # nothing. Segments at P = 2: bits 0-63 and 64-127.
    a = _table("a", [[0, 1, 64, 65], [10, 11, 74, 75]], [[1], [1]])
    b = _table("b", [[0, 1, 64, 65], [10, 11, 100, 101]], [[1], [1]])
    truth = truth_from_labels([a.record_ids, b.record_ids], [["e0", "e1"], ["e0", "e1"]])
    got = separation([a, b], truth, sample=2000, seed=3)
    assert got["fill"] == round(16 / (4 * BITS), 4)
    assert got["true_pairs"] == 2
    assert got["true_pairs_below"] == {"0.7": 1, "0.75": 1, "0.8": 1, "0.85": 1, "0.9": 1}
    assert got["true_dice_quantiles"]["0.0"] == 0.5
    assert 0 < got["unrelated_pairs"] < 2000  # same-entity draws are left out
    assert got["unrelated_dice_quantiles"]["1.0"] == 0.0
    assert all(v == 0.0 for v in got["unrelated_survive_segment_filter"].values())
    assert got["all_pairs_0_1"] == 4
