"""A huge block is compared within the memory budget (chunked), with progress and cancellation."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest

from party.encoding.bits import pack_rows
from party.encoding.records import EncodedRecords
from party.protocol.driver import run_in_process
from party.protocol.errors import ComparisonCancelled, MemoryBudgetError
from party.protocol.params import ProtocolParameters

BUDGET = 8 * 2**20


def one_block_tables(
    rng: np.random.Generator, parties: int, n: int, nbits: int
) -> list[EncodedRecords]:
    """P tables of n records, all in one block; 20 entities are shared (low noise)."""
    base = rng.random((20, nbits)) < 0.3
    out = []
    for j in range(parties):
        rows = rng.random((n, nbits)) < 0.3
        rows[:20] = base ^ (rng.random((20, nbits)) < 0.02)
        out.append(
            EncodedRecords(
                tuple(f"{j}-{i}" for i in range(n)),
                pack_rows(rows.astype(np.uint8)),
                nbits,
                np.full((n, 1), 99, dtype=np.uint64),
            )
        )
    return out


def test_block_of_8_billion_sets_stays_within_budget() -> None:
    rng = np.random.default_rng(0)
    tables = one_block_tables(rng, 3, 2000, 96)
    params = ProtocolParameters(
        ("a", "b", "c"), 96, 0.8, 0.7, memory_budget_bytes=BUDGET, target="all"
    )
    seen: list[tuple[int, int, int]] = []
    tracemalloc.start()
    try:
        run = run_in_process(tables, params, progress=lambda p, d, t: seen.append((p, d, t)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stats = run.metrics.comparison[0]
    assert stats.candidate_sets == 2000**3
    assert stats.reduction_ratio > 0.999999
    # the planted entities are found (a noisy 32-bit segment may prune one or two at s_m = 0.7)
    assert 18 <= len(run.matches[0]) <= 20
    # working memory: the inputs (3 x 2000 filters) plus the budget, not the 2.7e10 sets
    assert peak < 4 * BUDGET, peak
    finals = [d for p, d, t in seen if p == 0]
    assert finals[-1] == 2000**3


def test_huge_block_fails_cleanly_when_survivors_exceed_the_spill_space() -> None:
    rng = np.random.default_rng(1)
    tables = one_block_tables(rng, 3, 1000, 96)
    params = ProtocolParameters(
        ("a", "b", "c"), 96, 0.8, 0.0, memory_budget_bytes=BUDGET, target="all"
    )
    # 10^9 survivors at s_m = 0 spill past the memory budget, then past the spill space
    with pytest.raises(MemoryBudgetError, match="spill space"):
        run_in_process(tables, params, spill_limit_bytes=16 * 2**20)


def test_huge_block_can_be_cancelled_from_progress() -> None:
    rng = np.random.default_rng(2)
    tables = one_block_tables(rng, 3, 2000, 96)
    params = ProtocolParameters(
        ("a", "b", "c"), 96, 0.8, 0.7, memory_budget_bytes=BUDGET, target="all"
    )
    cancel = threading.Event()
    calls = 0

    def progress(party: int, done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            cancel.set()

    with pytest.raises(ComparisonCancelled):
        run_in_process(tables, params, progress=progress, cancel=cancel)
