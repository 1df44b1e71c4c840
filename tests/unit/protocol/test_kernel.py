"""The fast comparison kernels equal the reference kernel on random inputs (sets, c, stage counts)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding.bits import pack_rows
from party.protocol.errors import ComparisonCancelled, ProtocolError
from party.protocol.kernel import (
    HAVE_NUMBA,
    StageCounts,
    compare_block,
    compare_block_reference,
    compare_small_blocks,
    iter_block,
    keep_partial,
    threshold_table,
)

FAST = ["numba", "numpy"] if HAVE_NUMBA else ["numpy"]


def random_segs(
    rng: np.random.Generator, sizes: list[int], nbits: int, fill: float
) -> list[np.ndarray]:
    return [pack_rows((rng.random((n, nbits)) < fill).astype(np.uint8)) for n in sizes]


@settings(max_examples=80, deadline=None)
@given(
    parties=st.integers(2, 5),
    nbits=st.sampled_from([1, 5, 63, 64, 65, 130, 205, 512]),
    seed=st.integers(0, 2**32 - 1),
    threshold=st.sampled_from([0.0, 0.1, 0.3, 0.5, 2 / 3, 0.7, 0.9, 1.0]),
    fill=st.sampled_from([0.0, 0.1, 0.4, 0.8, 1.0]),
    chunk=st.integers(1, 5),
)
def test_fast_kernels_equal_reference(
    parties: int, nbits: int, seed: int, threshold: float, fill: float, chunk: int
) -> None:
    rng = np.random.default_rng(seed)
    top = {2: 12, 3: 7, 4: 5, 5: 4}[parties]
    sizes = [int(rng.integers(1, top + 1)) for _ in range(parties)]
    segs = random_segs(rng, sizes, nbits, fill)
    ref_counts = StageCounts.zeros(parties)
    ref = compare_block(segs, nbits, threshold, kernel="reference", counts=ref_counts)
    for kernel in FAST:
        counts = StageCounts.zeros(parties)
        got = compare_block(
            segs, nbits, threshold, kernel=kernel, counts=counts, col_chunk=chunk, max_rows=chunk
        )
        np.testing.assert_array_equal(got[0], ref[0])
        np.testing.assert_array_equal(got[1], ref[1])
        assert counts == ref_counts


def test_reference_kernel_known_answer() -> None:
    # three parties, 8-bit segments given as bit positions
    a = pack_rows(np.array([[1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]], dtype=np.uint8))
    b = pack_rows(np.array([[1, 1, 1, 0, 0, 0, 0, 0]], dtype=np.uint8))
    c = pack_rows(np.array([[1, 1, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 0, 0, 0]], dtype=np.uint8))
    idx, cv = compare_block([a, b, c], 8, 0.0, kernel="reference")
    assert idx.tolist() == [[0, 0, 0], [0, 0, 1], [1, 0, 0], [1, 0, 1]]
    assert cv.tolist() == [2, 0, 0, 0]
    # s_m = 0.5: (a1, b0) has c=0 with s=7 -> pruned; (a0, b0) c=3, 2*3 >= 0.5*7 kept;
    # then with c0: 3*2 >= 0.5*10 kept; with c1: 3*0 >= 0.5*7 pruned
    counts = StageCounts.zeros(3)
    idx, cv = compare_block([a, b, c], 8, 0.5, kernel="reference", counts=counts)
    assert idx.tolist() == [[0, 0, 0]]
    assert counts.evaluated == [0, 2, 2] and counts.survived == [0, 1, 1]


@pytest.mark.parametrize("k", [2, 3, 7])
@pytest.mark.parametrize("threshold", [0.0, 0.1, 0.35, 2 / 3, 0.8, 0.95, 1.0])
def test_threshold_table_is_the_exact_minimum(k: int, threshold: float) -> None:
    table = threshold_table(k, threshold, 300)
    for s in range(301):
        t = int(table[s])
        assert keep_partial(k, t, s, threshold)
        assert t == 0 or not keep_partial(k, t - 1, s, threshold)


@pytest.mark.parametrize("kernel", FAST)
def test_progress_ticks_cover_every_candidate_set(kernel: str) -> None:
    rng = np.random.default_rng(3)
    segs = random_segs(rng, [7, 5, 6], 40, 0.3)
    for threshold in (0.0, 0.5):
        total = 0

        def tick(n: int) -> None:
            nonlocal total
            total += n

        list(iter_block(segs, 40, threshold, kernel=kernel, tick=tick, col_chunk=2, max_rows=3))
        assert total == 7 * 5 * 6


@pytest.mark.parametrize("kernel", FAST)
def test_cancel_stops_the_kernel(kernel: str) -> None:
    rng = np.random.default_rng(4)
    segs = random_segs(rng, [50, 50], 64, 0.3)
    cancel = threading.Event()
    gen = iter_block(segs, 64, 0.0, kernel=kernel, cancel=cancel, col_chunk=5, max_rows=5)
    next(gen)
    cancel.set()
    with pytest.raises(ComparisonCancelled):
        list(gen)


def test_unknown_kernel_is_a_clear_error() -> None:
    segs = random_segs(np.random.default_rng(0), [2, 2], 8, 0.5)
    with pytest.raises(ProtocolError, match="unknown kernel"):
        compare_block(segs, 8, 0.0, kernel="gpu")


@settings(max_examples=60, deadline=None)
@given(
    parties=st.integers(2, 5),
    nbits=st.sampled_from([7, 64, 100]),
    seed=st.integers(0, 2**32 - 1),
    threshold=st.sampled_from([0.0, 0.3, 0.6, 0.9]),
    nblocks=st.integers(0, 5),
)
def test_small_block_batches_equal_reference(
    parties: int, nbits: int, seed: int, threshold: float, nblocks: int
) -> None:
    rng = np.random.default_rng(seed)
    n = [int(rng.integers(0, 12)) for _ in range(parties)]
    segs = random_segs(rng, n, nbits, 0.4)
    pops = [np.bitwise_count(s).sum(axis=1).astype(np.int64) for s in segs]
    blocks = [
        [np.sort(rng.choice(k, size=int(rng.integers(0, min(k, 4) + 1)), replace=False)) for k in n]
        for _ in range(nblocks)
    ]
    got_counts = StageCounts.zeros(parties)
    rows, c = compare_small_blocks(segs, pops, blocks, nbits, threshold, counts=got_counts)
    ref_counts = StageCounts.zeros(parties)
    expected: list[tuple[tuple[int, ...], int]] = []
    for b in blocks:
        if min(x.size for x in b) == 0:
            continue
        idx, cv = compare_block_reference(
            [segs[j][b[j]] for j in range(parties)], threshold, ref_counts
        )
        for row, cc in zip(idx.tolist(), cv.tolist(), strict=True):
            expected.append((tuple(int(b[j][row[j]]) for j in range(parties)), cc))
    got = [(tuple(r), cc) for r, cc in zip(rows.tolist(), c.tolist(), strict=True)]
    assert sorted(got) == sorted(expected)
    assert got_counts == ref_counts


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed")
def test_kernels_compile_without_a_writable_cache() -> None:
    # numba refuses cache=True when it finds no cache location (like a function without a source
    # file here, or a read-only install); the kernel module then compiles without a cache
    from party.protocol._numba_kernel import _jit

    namespace: dict[str, object] = {}
    exec("def plus_one(x):\n    return x + 1\n", namespace)
    assert _jit(namespace["plus_one"])(2) == 3


def test_warm_up_runs() -> None:
    from party.protocol.kernel import warm_up

    warm_up()
