"""MemoryOrder (party.protocol.pair_order) against a lexsort of (descending Dice, a, b)."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.pair_order import MemoryOrder
from party.protocol.spill import LocalGauge


def _reference(a: np.ndarray, b: np.ndarray, dice: np.ndarray) -> np.ndarray:
    """The distinct (a, b, Dice) rows in the solver's order."""
    order = np.lexsort((b, a, -dice))
    rows = np.column_stack([a[order], b[order], dice[order]])
    keep = np.ones(rows.shape[0], dtype=bool)
    keep[1:] = np.any(rows[1:] != rows[:-1], axis=1)
    return rows[keep]


def _read(order: MemoryOrder, rows: int) -> np.ndarray:
    parts = [np.column_stack([a, b, d]) for a, b, d in order.chunks(rows)]
    return np.concatenate(parts) if parts else np.zeros((0, 3))


@pytest.mark.parametrize(
    ("nodes", "values"),
    [
        (50, 3),  # few Dice values
        (1000, 3000),  # the distinct-Dice table grows several times; ties on every value
        # 2 * 30 bits of ends leave 3 bits for 9..14 ranks: the n^2 form (division) is used
        (805306368, 12),
        (805306368, 8),  # 8 ranks still fit the shifts (63 bits)
    ],
)
def test_the_order_is_the_solvers_with_repeats_read_once(nodes: int, values: int) -> None:
    rng = np.random.default_rng(nodes + values)
    k = 5000
    a = rng.integers(0, min(nodes, 40) - 1, k)
    b = a + 1 + rng.integers(0, min(nodes, 40) - 1 - a)
    if nodes > 1000:  # ends near the top of the node range too
        a[: k // 2] += nodes - 100
        b[: k // 2] = np.minimum(b[: k // 2] + nodes - 100, nodes - 1)
        keep = a < b
        a, b = a[keep], b[keep]
    dice = rng.integers(0, values, a.size) / max(1, values - 1)
    dice[:10] = 0.0
    a, b, dice = (np.concatenate([x, x[:7]]) for x in (a, b, dice))  # repeated pairs
    gauge = LocalGauge(1 << 30)
    order = MemoryOrder(nodes, gauge)
    for lo in range(0, a.size, 777):
        assert order.add(a[lo : lo + 777], b[lo : lo + 777], dice[lo : lo + 777])
    assert order.finish()
    want = _reference(a.astype(np.float64), b.astype(np.float64), dice)
    for rows in (1, 13, 1 << 20):
        np.testing.assert_array_equal(_read(order, rows), want)
    assert order.pairs == want.shape[0]
    assert gauge.held == 8 * a.size  # the order only
    order.close()
    assert gauge.held == 0


def test_ranks_that_fit_neither_form_are_refused_and_the_pairs_drain_unchanged() -> None:
    nodes = 2**31 - 2  # 31 bits per end: n^2 * 3 values > 2^63
    gauge = LocalGauge(1 << 30)
    order = MemoryOrder(nodes, gauge)
    a = np.array([0, 5, nodes - 2], dtype=np.int64)
    b = np.array([nodes - 1, 6, nodes - 1], dtype=np.int64)
    dice = np.array([0.5, 0.75, 1.0])
    assert order.add(a, b, dice)
    assert not order.finish()
    got = [np.column_stack(chunk) for chunk in order.drain()]
    np.testing.assert_array_equal(np.concatenate(got), np.column_stack([a, b, dice]))
    assert gauge.held == 0
