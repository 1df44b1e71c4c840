"""The group solver's compiled helpers equal their plain definitions: each partner list sorted
(short lists by insertion, long ones by numpy), and a group's similarity ``math.fsum`` / count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from party.protocol._numba_groups import SHORT_LIST, group_means, sort_partners


@pytest.mark.parametrize("seed", range(3))
def test_every_partner_list_is_sorted_in_place(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 3 * SHORT_LIST, size=300)
    lengths[:5] = (0, 1, SHORT_LIST, SHORT_LIST + 1, 2)  # the boundary of the two sorts
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    partners = rng.integers(0, 50, size=int(starts[-1])).astype(np.int32)  # with repeats
    want = partners.copy()
    for v in range(lengths.size):
        want[starts[v] : starts[v + 1]] = np.sort(want[starts[v] : starts[v + 1]])
    sort_partners(starts, partners, 0, starts.shape[0] - 1)
    np.testing.assert_array_equal(partners, want)


def _plain(ids: np.ndarray, sims: np.ndarray, groups: int) -> np.ndarray:
    out = np.zeros(groups)
    for g in range(groups):
        mine = sims[ids == g].tolist()
        if mine:
            out[g] = math.fsum(mine) / len(mine)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_group_means_are_fsum_over_count_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    groups = 400
    n = 3000
    ids = rng.integers(0, groups, size=n).astype(np.int64)
    ids[ids == 7] = 8  # a group without inner pairs
    # Dice-like values (2c / x), values of very different magnitude and sign, and sums that sit
    # half-way between two doubles (where a plain left-to-right sum rounds differently)
    dice = 2.0 * rng.integers(0, 500, size=n) / rng.integers(500, 1100, size=n)
    wild = rng.choice([1.0, 1e-16, -1e-16, 1e16, -1e16, 2.0**-53, 3.0, 0.1, 0.2, 0.3], size=n)
    sims = np.where(rng.random(n) < 0.5, dice, wild)
    got = group_means(ids, sims, groups)
    want = _plain(ids, sims, groups)
    assert got.tobytes() == want.tobytes()
    # the values where fsum differs from a plain sum: fsum's answer is kept
    hard = np.array([1.0, 1e100, 1.0, -1e100, 1e-16, 2.0**-53], dtype=np.float64)
    one = group_means(np.zeros(hard.size, np.int64), hard, 1)
    assert one[0] == math.fsum(hard.tolist()) / hard.size != sum(hard.tolist()) / hard.size
