"""Kernels on several threads give exactly what one thread gives: sets, order, c and stage counts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding.bits import pack_rows
from party.protocol import kernel as kernel_module
from party.protocol import threads as threads_module
from party.protocol.driver import run_in_process
from party.protocol.kernel import (
    HAVE_NUMBA,
    StageCounts,
    compare_block,
    compare_block_batch,
    distinct_sets,
    iter_block,
    plan_blocks,
    split_even,
)
from party.protocol.params import ProtocolParameters
from tests.unit.protocol.helpers import linked_tables

FAST = ["numba", "numpy"] if HAVE_NUMBA else ["numpy"]


def _segs(rng: np.random.Generator, sizes: list[int], nbits: int, fill: float) -> list[np.ndarray]:
    return [pack_rows((rng.random((n, nbits)) < fill).astype(np.uint8)) for n in sizes]


@pytest.fixture
def threads_always(monkeypatch):
    """Hand even the smallest chunk to several threads, so random small cases exercise it."""
    monkeypatch.setattr(kernel_module, "PARALLEL_MIN_PAIRS", 1)
    monkeypatch.setattr(kernel_module, "PARALLEL_MIN_BLOCKS", 1)
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORDS", 1)


def test_split_even_covers_in_order() -> None:
    assert split_even(np.array([5, 1, 1, 1, 1, 1]), 2) == [(0, 1), (1, 6)]
    assert split_even(np.ones(3), 8) == [(0, 1), (1, 2), (2, 3)]
    assert split_even(np.ones(10), 1) == [(0, 10)]
    assert (
        split_even(np.array([0.0, 0.0, 7.0]), 2) == [(0, 3)]
        or split_even(np.array([0.0, 0.0, 7.0]), 2)[-1][1] == 3
    )
    assert split_even(np.zeros(0), 4) == []


@settings(max_examples=25, deadline=None)
@given(
    parties=st.integers(2, 4),
    nbits=st.sampled_from([5, 64, 130, 512]),
    seed=st.integers(0, 2**32 - 1),
    threshold=st.sampled_from([0.0, 0.3, 2 / 3, 0.9, 1.0]),
    workers=st.integers(2, 5),
)
def test_threaded_block_kernel_equals_one_thread(
    parties: int, nbits: int, seed: int, threshold: float, workers: int
) -> None:
    kernel_module.PARALLEL_MIN_PAIRS, saved = 1, kernel_module.PARALLEL_MIN_PAIRS
    try:
        rng = np.random.default_rng(seed)
        sizes = [int(rng.integers(1, 9)) for _ in range(parties)]
        segs = _segs(rng, sizes, nbits, 0.4)
        ref_counts = StageCounts.zeros(parties)
        ref = compare_block(segs, nbits, threshold, kernel="reference", counts=ref_counts)
        for kernel in FAST:
            one = list(iter_block(segs, nbits, threshold, kernel=kernel, max_rows=3, col_chunk=4))
            counts = StageCounts.zeros(parties)
            many = list(
                iter_block(
                    segs,
                    nbits,
                    threshold,
                    kernel=kernel,
                    max_rows=3,
                    col_chunk=4,
                    counts=counts,
                    workers=workers,
                )
            )
            assert len(one) == len(many)
            for (i1, c1), (i2, c2) in zip(one, many, strict=True):  # same chunks, same order
                np.testing.assert_array_equal(i1, i2)
                np.testing.assert_array_equal(c1, c2)
            got = compare_block(segs, nbits, threshold, kernel=kernel, workers=workers)
            np.testing.assert_array_equal(got[0], ref[0])
            np.testing.assert_array_equal(got[1], ref[1])
            assert counts == ref_counts
    finally:
        kernel_module.PARALLEL_MIN_PAIRS = saved


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed")
def test_large_block_on_two_threads_at_the_default_size() -> None:
    rng = np.random.default_rng(4)
    segs = _segs(rng, [400, 300, 20], 341, 0.45)  # 120,000 pairs when the second party joins
    for threshold in (0.0, 0.3, 0.45):  # everything kept, ~1,300 kept, all pruned at the end
        c1, c2 = StageCounts.zeros(3), StageCounts.zeros(3)
        one = compare_block(segs, 341, threshold, counts=c1)
        two = compare_block(segs, 341, threshold, counts=c2, workers=2)
        assert c1.evaluated[1] == 120_000 and (one[0].shape[0] > 1000 or threshold > 0.4)
        np.testing.assert_array_equal(one[0], two[0])
        np.testing.assert_array_equal(one[1], two[1])
        assert c1 == c2


def _block_rows(rng: np.random.Generator, n: list[int], sizes: np.ndarray):
    """Random distinct rows of each party for each block of ``sizes`` (P, nb), as (rows_of,
    starts) in compare_block_batch's layout."""
    rows_of = [
        np.concatenate(
            [rng.choice(n[j], size=int(k), replace=False) for k in sizes[j]]
            + [np.zeros(0, dtype=np.int64)]
        ).astype(np.int64)
        for j in range(len(n))
    ]
    starts = np.zeros_like(sizes)
    starts[:, 1:] = np.cumsum(sizes, axis=1)[:, :-1]
    return rows_of, starts


def _batch_inputs(rng: np.random.Generator, parties: int, nblocks: int):
    n = [int(rng.integers(40, 90)) for _ in range(parties)]
    segs = _segs(rng, n, 130, 0.4)
    pops = [np.bitwise_count(s).sum(axis=1).astype(np.int64) for s in segs]
    sizes = np.array(
        [[int(rng.integers(0, 7)) for _ in range(nblocks)] for _ in range(parties)], dtype=np.int64
    )
    return (segs, pops, *_block_rows(rng, n, sizes), sizes)


@pytest.mark.parametrize("kernel", FAST)
@pytest.mark.parametrize("parties", [2, 3, 4])
@pytest.mark.parametrize("workers", [2, 3, 7])
def test_block_batches_on_threads_equal_one_thread(
    threads_always, kernel, parties, workers
) -> None:
    rng = np.random.default_rng(parties * 10 + workers)
    segs, pops, rows_of, starts, sizes = _batch_inputs(rng, parties, 120)
    for threshold in (0.0, 0.5, 0.8):
        c1, c2 = StageCounts.zeros(parties), StageCounts.zeros(parties)
        one = compare_block_batch(
            segs, pops, rows_of, starts, sizes, 130, threshold, counts=c1, kernel=kernel
        )
        many = compare_block_batch(
            segs,
            pops,
            rows_of,
            starts,
            sizes,
            130,
            threshold,
            counts=c2,
            workers=workers,
            kernel=kernel,
        )
        np.testing.assert_array_equal(one[0], many[0])  # same sets in the same order
        np.testing.assert_array_equal(one[1], many[1])
        assert c1 == c2
        if threshold == 0.0:
            assert one[0].shape[0] == int(np.prod(sizes, axis=0).sum())


def _overlapping_blocks(rng: np.random.Generator, parties: int, nblocks: int):
    """Blocks drawn from few rows, so that many candidate sets occur in several blocks; about
    one block in five has a party without rows."""
    n = [int(rng.integers(3, 7)) for _ in range(parties)]
    segs = _segs(rng, n, 70, 0.5)
    pops = [np.bitwise_count(s).sum(axis=1).astype(np.int64) for s in segs]
    sizes = np.array(
        [
            [
                int(rng.integers(0, 3)) if rng.random() < 0.07 else int(rng.integers(1, 3))
                for _ in range(nblocks)
            ]
            for _ in range(parties)
        ],
        dtype=np.int64,
    )
    return (segs, pops, *_block_rows(rng, n, sizes), sizes)


@pytest.mark.parametrize("parties", [2, 3, 5])
def test_distinct_batches_are_each_set_once_whatever_the_threads(threads_always, parties) -> None:
    # Every kernel and thread count gives the sorted distinct sets of the plain batch output;
    # thresholds 0 and 1 and the ties in between (c exactly at the table value) included.
    rng = np.random.default_rng(parties)
    segs, pops, rows_of, starts, sizes = _overlapping_blocks(rng, parties, 300)
    for threshold in (0.0, 0.5, 2 / 3, 1.0):
        plain = compare_block_batch(
            segs, pops, rows_of, starts, sizes, 70, threshold, kernel="numpy"
        )
        expected = sorted(
            {tuple(r): c for r, c in zip(plain[0].tolist(), plain[1].tolist(), strict=True)}.items()
        )
        if threshold == 0.0:
            assert len(expected) < plain[0].shape[0]  # the blocks do repeat sets
        for kernel in FAST:
            for workers in (1, 2, 3, 8):
                counts = StageCounts.zeros(parties)
                idx, c = compare_block_batch(
                    segs,
                    pops,
                    rows_of,
                    starts,
                    sizes,
                    70,
                    threshold,
                    counts=counts,
                    workers=workers,
                    kernel=kernel,
                    distinct=True,
                )
                got = list(zip(map(tuple, idx.tolist()), c.tolist(), strict=True))
                assert got == expected
                assert counts.survived[parties - 1] == plain[0].shape[0]


def test_distinct_sets_without_packing_equals_packed() -> None:
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 4, size=(200, 3)).astype(np.int64)
    c = idx.sum(axis=1)
    packed = distinct_sets(idx, c, [4, 4, 4])
    wide = distinct_sets(idx, c, [2**40, 2**40, 2**40])  # 3 x 40 bits: no 64-bit key
    np.testing.assert_array_equal(packed[0], wide[0])
    np.testing.assert_array_equal(packed[1], wide[1])
    assert [tuple(r) for r in packed[0].tolist()] == sorted({tuple(r) for r in idx.tolist()})


def _linked(run) -> set[tuple[tuple[str, ...], float]]:
    """Matched sets as (record id per party, similarity); linkage ids are random per run."""
    groups: dict[str, list[str]] = {}
    sims: dict[str, float] = {}
    for rows in run.matches:
        for row in rows:
            groups.setdefault(row.linkage_id, []).append(row.record_id)
            sims[row.linkage_id] = row.similarity
    return {(tuple(ids), sims[lid]) for lid, ids in groups.items()}


@pytest.mark.parametrize("target", ["all", "any"])
def test_engine_with_workers_gives_the_same_run(threads_always, monkeypatch, target) -> None:  # type: ignore[no-untyped-def]
    """Every threaded step (segments, indexes, kernels, the survivors' sort) on 2 threads."""
    from party.protocol import spill as spill_module

    monkeypatch.setattr(spill_module, "PARALLEL_MIN_ROWS", 2)
    rng = np.random.default_rng(8)
    tables = linked_tables(rng, 3, 400, 192, shared=150, blocks=5)
    params = ProtocolParameters(
        parties=("a", "b", "c"),
        filter_bits=192,
        match_threshold=0.8,
        segment_threshold=0.5,
        target=target,
    )
    one = run_in_process(tables, params)
    two = run_in_process(tables, params, workers=2)
    assert one.classification.sets_summed == two.classification.sets_summed
    assert _linked(one) == _linked(two) and len(_linked(one)) > 20
    for a, b in zip(one.metrics.comparison, two.metrics.comparison, strict=True):
        assert a.evaluated_per_stage == b.evaluated_per_stage
        assert a.survived_per_stage == b.survived_per_stage


@pytest.mark.parametrize("cap", [None, 0, 2, 5])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_block_plan_equals_its_definition(threads_always, cap, workers) -> None:
    rng = np.random.default_rng(11 + (cap or 0) + 7 * workers)
    p, nb, small = 3, 300, 12
    # sizes 0..6 (0: the party is absent), with boundary products: exactly small, small + 1
    sizes = rng.integers(0, 7, (p, nb))
    sizes[:, 0] = (2, 2, 3)  # 12 sets: fast (at small)
    sizes[:, 1] = (13, 1, 1)  # 13 sets: not fast
    sizes[:, 2] = (0, 5, 5)  # a party absent: neither fast nor slow
    starts = [np.concatenate([[0], np.cumsum(s)]).astype(np.int64) for s in sizes]
    plan = plan_blocks(starts, cap, small, workers=workers)
    live = np.all(sizes > 0, axis=0)
    over = np.zeros(nb, dtype=bool) if cap is None else sizes.max(axis=0) > cap
    fast = live & ~over & (np.prod(sizes, axis=0) <= small)
    assert np.array_equal(plan.sizes, sizes)
    assert np.array_equal(plan.first, np.stack([s[:-1] for s in starts]))
    assert np.array_equal(plan.fast_sets, np.where(fast, np.prod(sizes, axis=0), 0))
    assert np.array_equal(plan.fast_sizes, np.where(fast, sizes, 0))
    assert np.array_equal(plan.slow, live & ~fast)
    if cap is None:
        assert plan.fast_sets[0] == 12 and plan.slow[1] and not plan.slow[2]


@pytest.mark.skipif(not HAVE_NUMBA, reason="the fast-block path is the numba kernel's")
@pytest.mark.parametrize("parties", [2, 3, 4])
@pytest.mark.parametrize("threshold", [0.0, 0.5, 0.8])
def test_fast_block_rows_hold_each_set_once_whatever_the_threads(
    threads_always, parties: int, threshold: float
) -> None:  # type: ignore[no-untyped-def]
    """fast_block_rows: the distinct survivors of compare_block_batch as ring rows, each once per
    call, the same rows, order and stage counts for 1-3 threads; batches hold them all."""
    from party.protocol.blocks import (
        DigestLookup,
        block_index_at,
        common_blocks,
        distinct_digests,
        sort_position_rows,
    )
    from party.protocol.kernel import FastBlocks, fast_block_rows

    rng = np.random.default_rng(parties * 10 + int(threshold * 10))
    bits = 96
    sizes = [int(rng.integers(20, 40)) for _ in range(parties)]
    segs = _segs(rng, sizes, bits, 0.4)
    digs = []
    for n in sizes:
        d = rng.integers(1, [3, 6, 12, 20], size=(n, 4)).astype(np.uint64)
        d += np.arange(4, dtype=np.uint64) * 100
        d[rng.random(d.shape) < 0.2] = 0
        d[1::2, 3] = np.where(d[1::2, 2] != 0, d[1::2, 2] + 100, 0)  # the same sets twice
        d[::6, 3] = d[::6, 2]  # one block named twice by a record
        digs.append(d)
    common = common_blocks([distinct_digests(d) for d in digs])
    look = DigestLookup(common)
    positions = [sort_position_rows(look.positions(d)) for d in digs]
    keys = [np.sort(rng.choice(2**40, size=n, replace=False).astype(np.uint64)) + 1 for n in sizes]
    indices = [
        block_index_at(positions[j], common.size, keys[j], rows_sorted=True) for j in range(parties)
    ]
    plan = plan_blocks([ix.starts for ix in indices], None, 30)
    assert plan.slow.any() and (plan.fast_sets > 0).any(), "both kinds of blocks"
    pops = [np.bitwise_count(s).sum(axis=1).astype(np.int64) for s in segs]
    columns = np.array(list(range(parties))[::-1], dtype=np.int64)
    fast = FastBlocks(np.cumsum(plan.fast_sets), tuple(keys), columns)
    nb = int(common.size)
    want_counts = StageCounts.zeros(parties)
    idx, c = compare_block_batch(
        segs,
        pops,
        [ix.rows for ix in indices],
        plan.first,
        plan.fast_sizes,
        bits,
        threshold,
        counts=want_counts,
        distinct=True,
    )
    want = {
        tuple(int(keys[j][r[j]]) for j in range(parties)) + (int(v),)
        for r, v in zip(idx.tolist(), c.tolist(), strict=True)
    }
    if threshold == 0.0:  # every set survives: the mirrored pass repeats them
        assert want_counts.survived[-1] > len(want), "sets found in several fast blocks"
    outputs = set()
    for workers in (1, 2, 3):
        for cuts in ([0, nb], [0, nb // 3, nb // 2, nb]):
            got_counts = StageCounts.zeros(parties)
            rows = [
                fast_block_rows(
                    segs,
                    pops,
                    [ix.rows for ix in indices],
                    plan,
                    lo,
                    hi,
                    bits,
                    threshold,
                    fast,
                    counts=got_counts,
                    workers=workers,
                )
                for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)
            ]
            got = set()
            for out in rows:
                part = [
                    tuple(int(r[columns[j]]) for j in range(parties)) + (int(r[-1]),) for r in out
                ]
                assert len(part) == len(set(part)), "each set once per call"
                assert not np.any(out[:, :-1] == 0)
                got |= set(part)
            assert got == want
            if len(cuts) == 2:
                assert len(rows[0]) == len(want)
            assert got_counts == want_counts
            outputs.add((len(cuts), b"".join(r.tobytes() for r in rows)))
    assert len(outputs) == 2, "the same rows in the same order for any number of threads"
