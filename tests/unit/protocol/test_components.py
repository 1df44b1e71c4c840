"""The component-batched solver gives exactly the whole-run solver's result rows."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.components import (
    component_batches,
    group_result_rows,
    largest_batch,
    solve_group_rows,
)
from party.protocol.solver import SOLVERS, solve_groups


def _pairs(
    rng: np.random.Generator, parties: int, records: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """Random matched pairs between different parties; Dice on a coarse grid (many ties), some in
    the guarded rule's weak band just above s_t = 0.8, some exactly at it."""
    a = rng.integers(0, parties, size=k)
    b = (a + rng.integers(1, parties, size=k)) % parties
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keys = rng.integers(0, records, size=(k, 2)).astype(np.uint64) * np.uint64(7919) + np.uint64(
        2**63
    )
    ends = np.stack([lo.astype(np.uint64), keys[:, 0], hi.astype(np.uint64), keys[:, 1]], axis=1)
    assert ends.dtype == np.uint64
    _, first = np.unique(ends, axis=0, return_index=True)  # one Dice per pair
    ends = ends[np.sort(first)]
    sims = rng.choice([0.8, 0.81, 0.815, 0.82, 0.85, 0.9, 0.95, 1.0], size=ends.shape[0])
    return ends, sims


def _whole(ends: np.ndarray, sims: np.ndarray, p: int, m: int, solver: str) -> list[np.ndarray]:
    pairs = [
        (a, ka, b, kb, s) for (a, ka, b, kb), s in zip(ends.tolist(), sims.tolist(), strict=True)
    ]
    return group_result_rows(solve_groups(pairs, m, solver, 0.8), p)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(6))
def test_batches_of_components_equal_the_whole_run(solver: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = int(rng.integers(2, 6))
    ends, sims = _pairs(rng, p, records=int(rng.integers(5, 60)), k=int(rng.integers(1, 400)))
    for m in (2, p):
        want = _whole(ends, sims, p, m, solver)
        for batch_pairs in (1, 7, 1 << 16):  # one component per batch .. everything in one
            batches = component_batches(ends, batch_pairs)
            got, count = solve_group_rows(ends, sims, p, m, solver, 0.8, batches)
            assert count == len({int(x) for t in want for x in t[:, 0]})
            for q in range(p):
                np.testing.assert_array_equal(got[q], want[q])


def test_batches_hold_whole_components() -> None:
    # components {0:1, 1:2, 0:3} (3 pairs) and {0:5, 1:6} (1 pair), listed interleaved
    ends = np.array([[0, 1, 1, 2], [0, 5, 1, 6], [0, 3, 1, 2], [0, 1, 1, 9]], dtype=np.uint64)
    order, cuts = component_batches(ends, batch_pairs=1)
    assert cuts == [0, 3, 4]
    assert sorted(order[:3].tolist()) == [0, 2, 3] and order[3] == 1
    assert largest_batch(cuts) == 3


def test_no_pairs() -> None:
    got, count = solve_group_rows(np.zeros((0, 4), np.uint64), np.zeros(0), 3, 2, "guarded", 0.8)
    assert count == 0 and [g.shape for g in got] == [(0, 5)] * 3
