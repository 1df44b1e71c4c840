"""The linear-time block index (hash lookups, counting sort) and row-store de-duplication against
plain oracles."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from party.protocol import threads as threads_module
from party.protocol.blocks import (
    DigestLookup,
    block_index,
    block_index_at,
    common_blocks,
    lookup_digests,
    row_block_index,
    row_block_indexes,
)
from party.protocol.spill import LocalGauge, RowStore, SpillFolder


def _oracle_index(digests: np.ndarray, common: np.ndarray, keys: np.ndarray | None):
    """Per common block: its rows, ordered by (key, row), each once (plain Python)."""
    n = digests.shape[0]
    k = np.zeros(n, dtype=np.uint64) if keys is None else keys
    where = {int(d): b for b, d in enumerate(common.tolist())}
    members: list[set[int]] = [set() for _ in range(common.size)]
    for r in range(n):
        for d in digests[r].tolist():
            if d != 0 and d in where:
                members[where[d]].add(r)
    return [sorted(m, key=lambda r: (int(k[r]), r)) for m in members]


def _check(digests: np.ndarray, common: np.ndarray, keys: np.ndarray | None) -> None:
    want = _oracle_index(digests, common, keys)
    positions = DigestLookup(common).positions(digests) if digests.shape[0] else None
    for workers in (1, 2, 3):  # ranges of blocks on the kernel threads: the same index
        ix = block_index(digests, common, keys, workers=workers)
        assert ix.starts.shape == (common.size + 1,)
        assert [ix.members(b).tolist() for b in range(common.size)] == want
        if positions is not None:  # each row's positions sorted (-1 first): shorter scans
            ix = block_index_at(
                np.sort(positions, axis=1), common.size, keys, workers, rows_sorted=True
            )
            assert [ix.members(b).tolist() for b in range(common.size)] == want
            if keys is None:  # rows in row order, each row's positions in any order
                ix = row_block_index(positions, common.size, workers)
                assert ix.starts.shape == (common.size + 1,) and ix.rows.dtype == np.int64
                assert [ix.members(b).tolist() for b in range(common.size)] == want


@pytest.mark.parametrize("seed", range(4))
def test_row_block_index_equals_oracle_with_repeats_in_one_range(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``row_block_index`` against the plain oracle: rows naming a block twice (not next to each
    other) in the first, a middle or the last thread's range of blocks or in none, blocks without
    rows, rows without blocks, positions unsorted within a row; 1-4 threads."""
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORDS", 1)
    rng = np.random.default_rng(100 + seed)
    n, width, blocks = 400, 5, 60
    pos = rng.integers(-1, blocks, size=(n, width)).astype(np.int32)
    pos[::7] = -1
    repeat = [None, 0, blocks // 2, blocks - 1][seed]
    pos[:, 0] = np.where(pos[:, 0] == repeat, -1, pos[:, 0])
    pos[:, 4] = np.where(pos[:, 4] == repeat, -1, pos[:, 4])
    if repeat is not None:
        pos[3, 0] = pos[3, 4] = repeat  # one row repeats one block
        pos[5, 4] = pos[5, 1] = repeat
    members: list[list[int]] = [[] for _ in range(blocks)]
    for r in range(n):
        for b in sorted({int(v) for v in pos[r] if v >= 0}):
            members[b].append(r)
    for workers in (1, 2, 3, 4):
        ix = row_block_index(pos, blocks, workers)
        assert ix.starts[0] == 0 and ix.starts[-1] == ix.rows.size
        assert [ix.members(b).tolist() for b in range(blocks)] == members
    empty = row_block_index(np.full((0, 3), -1, np.int32), 5, 2)
    assert empty.starts.tolist() == [0] * 6 and empty.rows.size == 0


@pytest.mark.parametrize("seed", range(6))
def test_block_index_equals_oracle(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORDS", 1)  # threads even for tiny inputs
    rng = np.random.default_rng(seed)
    n, width = int(rng.integers(0, 60)), int(rng.integers(1, 6))
    pool = rng.choice(np.arange(1, 40, dtype=np.uint64), size=20, replace=False)
    digests = rng.choice(np.concatenate([pool, np.zeros(5, np.uint64)]), size=(n, width))
    if n:  # a row naming the same block in two columns is listed once
        digests[0, :] = pool[0]
    common = np.sort(rng.choice(pool, size=int(rng.integers(0, 15)), replace=False))
    _check(digests, common, None)
    # keys with ties (ordered by row among equals), increasing keys, and keys in any order
    _check(digests, common, rng.integers(0, 4, n).astype(np.uint64))
    _check(digests, common, np.arange(n, dtype=np.uint64) * 3)
    _check(digests, common, rng.permutation(n).astype(np.uint64))


def test_lookup_digests_hits_and_misses() -> None:
    hay = np.array([5, 9, 2**64 - 1, 1], dtype=np.uint64)
    needles = np.array([[0, 9, 7], [2**64 - 1, 1, 5]], dtype=np.uint64)
    pos, hit = lookup_digests(hay, needles)
    assert hit.tolist() == [[False, True, False], [True, True, True]]
    assert pos[hit].tolist() == [1, 2, 3, 0]
    pos, hit = lookup_digests(np.zeros(0, np.uint64), needles)
    assert not hit.any()


def test_lookup_digests_half_words_and_collisions_against_a_dict() -> None:
    """Digests whose low or high 32 bits are 0 (a slot is empty only when both are), digests that
    differ only in one half, and a haystack large enough for long probe runs: every position equals
    a plain dict's answer."""
    rng = np.random.default_rng(11)
    halves = [1, 2**32, 2**32 + 1, 2**63, 2**64 - 2**32, 0xFFFFFFFF, 2**33, 3 * 2**32]
    hay = np.unique(
        np.concatenate([np.array(halves, np.uint64), rng.integers(1, 2**64 - 1, 5000, np.uint64)])
    )
    rng.shuffle(hay)  # any order: the index is the haystack position
    index = {int(d): i for i, d in enumerate(hay)}
    others = rng.integers(1, 2**64 - 1, 3000, np.uint64)
    needles = np.concatenate([hay, others, np.array([0, 2**32 + 2, 5 * 2**32], np.uint64)])
    got = DigestLookup(hay).positions(needles)
    assert got.dtype == np.int32
    assert got.tolist() == [index.get(int(d), -1) if d else -1 for d in needles]
    assert DigestLookup(hay).nbytes == DigestLookup.table_bytes(hay.size)


@pytest.mark.parametrize("case", ["uniform", "top", "clustered", "zero first", "unsorted"])
def test_digest_lookup_sorted_and_hashed_tables_against_a_dict(case: str) -> None:
    """A sorted haystack is placed by its top bits (digests up to 2^64 - 1 sit in the slots past
    the last home slot); one clustered in its top bits (every home slot the same) or unsorted is
    hashed. Either way every position equals a plain dict's answer, misses included."""
    rng = np.random.default_rng(5)
    hay = np.unique(rng.integers(1, 2**64 - 1, 3000, np.uint64))
    if case == "top":  # the last home slots taken by a run that spills past them
        hay = np.unique(np.concatenate([hay, 2**64 - 1 - np.arange(40, dtype=np.uint64)]))
    elif case == "clustered":  # 1..3000: one home slot, more than SORTED_REACH past it
        hay = np.arange(1, 3001, dtype=np.uint64)
    elif case == "zero first":
        hay = np.concatenate([np.zeros(1, np.uint64), hay])
    elif case == "unsorted":
        rng.shuffle(hay)
    look = DigestLookup(hay)
    assert look.sorted == (case in ("uniform", "top", "zero first"))
    index = {int(d): i for i, d in enumerate(hay) if d}
    near = np.concatenate([hay[hay > 0] - np.uint64(1), hay + np.uint64(1)])  # misses beside hits
    needles = np.concatenate([hay, near, rng.integers(0, 2**64 - 1, 2000, np.uint64)])
    needles = np.concatenate([needles, np.array([0, 1, 2**64 - 1], np.uint64)])
    got = look.positions(needles)
    assert got.tolist() == [index.get(int(d), -1) if d else -1 for d in needles]
    assert look.nbytes == DigestLookup.table_bytes(hay.size)


def test_common_blocks_sorted_or_not() -> None:
    a = np.array([3, 1, 7, 7, 0, 9], dtype=np.uint64)  # unsorted, repeats, a zero
    b = np.array([1, 3, 9, 11], dtype=np.uint64)  # already sorted and distinct
    c = np.array([0, 1, 3, 9], dtype=np.uint64)  # sorted, distinct, starts with zero
    assert common_blocks([a, b, c]).tolist() == [1, 3, 9]
    assert common_blocks([b, np.zeros(0, np.uint64)]).tolist() == []
    big = np.array([2**64 - 1, 2**63], dtype=np.uint64)
    assert common_blocks([big, np.sort(big)]).tolist() == [2**63, 2**64 - 1]


def test_sorted_store_keeps_the_first_row_of_each_key(tmp_path: pathlib.Path) -> None:
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 5, size=(4000, 2), dtype=np.uint64)
    keys[:10] = [2**64 - 1, 0]  # extreme values repeated
    rows = np.column_stack([keys, np.arange(4000, dtype=np.uint64)])  # payload: first wins
    want: dict[tuple[int, int], int] = {}
    for a, b, i in rows.tolist():
        want.setdefault((a, b), i)
    folder = SpillFolder(tmp_path)
    store = RowStore(3, gauge=LocalGauge(10**9), folder=folder, key_columns=2)
    store.append(rows)
    got = np.concatenate(list(store.finish().chunks(100))).tolist()
    assert got == [[a, b, want[(a, b)]] for a, b in sorted(want)]
    folder.close()


@pytest.mark.parametrize("blocks", [0, 1, 60])
def test_row_block_indexes_equal_one_matrix_at_a_time(
    blocks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``row_block_indexes`` of several matrices at once (one round of tasks per step for all):
    each index equals the plain oracle and ``row_block_index`` of its matrix alone, on 1-3
    threads: matrices of different sizes, an empty one, one naming no block, a row repeating a
    block, no blocks at all; and below the threads' threshold (the calling thread alone)."""
    rng = np.random.default_rng(blocks)
    mats = [
        rng.integers(-1, max(blocks, 1), size=(n, 4)).astype(np.int32)
        if blocks
        else np.full((n, 4), -1, np.int32)
        for n in (300, 0, 57, 120)
    ]
    mats[2][:] = -1  # rows in no block
    if blocks:
        mats[3][7, 1] = mats[3][7, 3] = blocks - 1  # a row naming a block twice
    want = []
    for pos in mats:
        members: list[list[int]] = [[] for _ in range(blocks)]
        for r in range(pos.shape[0]):
            for b in sorted({int(v) for v in pos[r] if v >= 0}):
                members[b].append(r)
        want.append(members)
    for threshold in (1, threads_module.PARALLEL_MIN_WORDS):
        monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORDS", threshold)
        for workers in (1, 2, 3):
            got = row_block_indexes(mats, blocks, workers)
            assert len(got) == len(mats)
            for ix, pos, members in zip(got, mats, want, strict=True):
                alone = row_block_index(pos, blocks, workers)
                assert np.array_equal(ix.starts, alone.starts)
                assert np.array_equal(ix.rows, alone.rows)
                assert ix.starts.shape == (blocks + 1,) and ix.starts[-1] == ix.rows.size
                assert [ix.members(b).tolist() for b in range(blocks)] == members
    assert row_block_indexes([], 5, 2) == []
