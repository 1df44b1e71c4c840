"""Blockwise top-1 engine and the bit-row entry point: hand-checked values, modes, chunking, reuse."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from party.audit.cvpl import CvplError, assess_bits
from party.audit.cvpl.engine import (
    BitKernel,
    CosineKernel,
    blockwise_top,
    exceed_counts,
    reference_top,
)
from party.encoding.bits import pack_rows, rows_from_positions


def test_dice_hand_checked():
    # source 0 = {0,1,2,3}; targets: {0,1} -> dice 2*2/6 = 0.667; {0,1,2,3} -> 1.0; {4} -> 0
    src = rows_from_positions([[0, 1, 2, 3], [64, 65]], 70)
    tgt = rows_from_positions([[0, 1], [0, 1, 2, 3], [4], [64]], 70)
    res = assess_bits(src, tgt, 70, np.array([1, 1]), np.array([1, 1, 1, 1]), [0.5, 0.7, 1.0])
    assert res.best_similarity[0] == pytest.approx(1.0)
    assert res.best_index[0] == 1
    # source 1 = {64,65} vs {64}: 2*1/3
    assert res.best_similarity[1] == pytest.approx(2 / 3)
    assert res.best_index[1] == 3
    assert [r.count for r in res.linkage_rate] == [2, 1, 1]
    assert res.top1_precision is None


def test_jaccard_blocks_and_truth():
    src = rows_from_positions([[0, 1, 2, 3], [64, 65]], 70)
    tgt = rows_from_positions([[0, 1], [0, 1, 2, 3], [4], [64]], 70)
    # block 7 holds only target 0 for source 0; source 1's block has no target at all
    res = assess_bits(
        src,
        tgt,
        70,
        np.array([7, 8], dtype=np.uint64),
        np.array([7, 9, 9, 9], dtype=np.uint64),
        [0.4, 0.6],
        truth=[1, 3],
        metric="jaccard",
    )
    assert res.best_similarity[0] == pytest.approx(0.5)  # 2 / (4 + 2 - 2)
    assert res.best_index[0] == 0
    assert np.isnan(res.best_similarity[1]) and res.best_index[1] == -1
    assert [r.count for r in res.linkage_rate] == [1, 0]
    assert res.top1_precision is not None
    assert (res.top1_precision[0].count, res.top1_precision[0].total) == (0, 1)
    assert res.structural_recall is not None and res.structural_recall.count == 0
    assert res.top1_accuracy is not None and res.top1_accuracy.total == 2


def _random_bits(rng, n, nbits, density=0.3):
    return pack_rows((rng.random((n, nbits)) < density).astype(np.uint8))


def test_modes_chunks_and_reference_agree_on_bits():
    rng = np.random.default_rng(1)
    nbits = 100
    src, tgt = _random_bits(rng, 300, nbits), _random_bits(rng, 250, nbits)
    skeys, tkeys = rng.integers(0, 6, 300), rng.integers(0, 6, 250)
    kern = BitKernel(src, tgt, nbits, "dice")
    ref = reference_top(kern, skeys, tkeys, top2=True)
    for chunk in (1, 7, 10_000):
        for pair_max in (0, 10**9):  # all matrix mode / all pair mode
            got = blockwise_top(
                kern, skeys, tkeys, chunk=chunk, top2=True, pair_mode_max_pairs=pair_max
            )
            np.testing.assert_array_equal(got.best, ref.best)
            np.testing.assert_array_equal(got.index, ref.index)
            assert got.second is not None and ref.second is not None
            np.testing.assert_array_equal(got.second, ref.second)
            np.testing.assert_array_equal(got.candidates, ref.candidates)
            assert got.pairs_compared == ref.pairs_compared


def test_cosine_chunked_equals_unchunked():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(500, 8)), rng.normal(size=(400, 8))
    skeys, tkeys = rng.integers(0, 3, 500), rng.integers(0, 3, 400)
    kern = CosineKernel(a, b)
    whole = blockwise_top(kern, skeys, tkeys, chunk=100_000, top2=True)
    for chunk in (1, 3, 64):
        part = blockwise_top(kern, skeys, tkeys, chunk=chunk, top2=True)
        np.testing.assert_array_equal(part.index, whole.index)
        np.testing.assert_array_equal(part.best, whole.best)
    ref = reference_top(CosineKernel(a, b, dtype=np.float64), skeys, tkeys)
    np.testing.assert_allclose(whole.best, ref.best, atol=1e-5)


def test_threshold_reuse_equals_recomputation():
    rng = np.random.default_rng(3)
    src, tgt = _random_bits(rng, 200, 64), _random_bits(rng, 200, 64)
    skeys, tkeys = rng.integers(0, 4, 200), rng.integers(0, 4, 200)
    taus = np.linspace(0.0, 1.0, 21)
    res = assess_bits(src, tgt, 64, skeys, tkeys, taus, truth=np.arange(200))
    kern = BitKernel(src, tgt, 64, "dice")
    for t, tau in enumerate(taus):
        linked = 0
        correct = 0
        for i in range(200):
            cand = np.flatnonzero(tkeys == skeys[i])
            if not len(cand):
                continue
            sims = kern.pairs(np.full(len(cand), i), cand)
            if np.any(sims >= tau):
                linked += 1
                correct += int(cand[int(np.argmax(sims))] == i)
        assert res.linkage_rate[t].count == linked
        assert res.top1_precision is not None
        assert res.top1_precision[t].count == correct
        assert res.top1_precision[t].total == linked


def test_exceed_counts_handles_nan_and_ties():
    best = np.array([0.5, np.nan, 0.7, 0.5])
    assert exceed_counts(best, np.array([0.5, 0.6, 0.8, -1.0])).tolist() == [3, 1, 0, 3]


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"source_blocks": np.zeros(3, dtype=np.int64)}, "source_blocks"),
        ({"target_blocks": np.zeros(2, dtype=float)}, "target_blocks"),
        ({"taus": []}, "taus"),
        ({"truth": [5, 0]}, "truth"),
        ({"metric": "cosine"}, "metric"),
        ({"nbits": 10}, "rows"),
    ],
)
def test_bad_inputs_raise_cvpl_error(kwargs, needle):
    args: dict[str, Any] = {
        "source_rows": rows_from_positions([[1], [2]], 70),
        "target_rows": rows_from_positions([[1], [3]], 70),
        "nbits": 70,
        "source_blocks": np.zeros(2, dtype=np.int64),
        "target_blocks": np.zeros(2, dtype=np.int64),
        "taus": [0.5],
    }
    args.update(kwargs)
    with pytest.raises(CvplError, match=needle):
        assess_bits(**args)


def test_cosine_hand_checked_and_existential_rate():
    src = np.array([[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    tgt = np.array([[1.0, 1.0], [3.0, 0.0], [-1.0, 0.0]])
    kern = CosineKernel(src, tgt, dtype=np.float64)
    top = blockwise_top(kern, np.array([0, 0, 0]), np.array([0, 0, 0]), top2=True)
    np.testing.assert_allclose(top.best, [1.0, np.sqrt(0.5), 0.0])
    assert top.index.tolist() == [1, 0, 0]  # zero vector: all ties at 0 -> lowest index
    assert top.second is not None
    np.testing.assert_allclose(top.second, [np.sqrt(0.5), 0.0, 0.0])
    # CVPL-LR(0.7) counts records with ANY target >= 0.7: records 0 and 1
    assert exceed_counts(top.best, np.array([0.7, 0.8])).tolist() == [2, 1]
