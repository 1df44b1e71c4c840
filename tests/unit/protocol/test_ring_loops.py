"""The ring's compiled loops: RingCursor answers what SortedCursor answers (rewind included); a
step's and hop 0's rows and the matched pairs' ends equal their numpy formulations."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol._numba_ring import own_counts, pair_ends, start_rows, step_rows
from party.protocol.ring import add_mod64, unique_sorted_rows
from party.protocol.ring_cursor import RingCursor
from party.protocol.spill import SortedCursor


def _stream(rng: np.random.Generator, rows: int, k: int, extra: int, span: int) -> np.ndarray:
    """Strictly increasing rows of k key columns (small values: many ties in column 0) and
    ``extra`` payload columns."""
    keys = rng.integers(0, span, size=(rows, k), dtype=np.uint64)
    keys = keys[unique_sorted_rows(keys)]
    payload = rng.integers(0, 2**64 - 1, size=(keys.shape[0], extra), dtype=np.uint64)
    return np.ascontiguousarray(np.column_stack([keys, payload]).astype(np.uint64))


def _queries(rng: np.random.Generator, stream: np.ndarray, k: int, span: int) -> list[np.ndarray]:
    """Increasing query chunks, each above the last: rows of the stream and rows not in it."""
    others = rng.integers(0, span, size=(stream.shape[0] // 2 + 1, k), dtype=np.uint64)
    pool = np.concatenate([stream[rng.random(stream.shape[0]) < 0.6, :k], others])
    pool = pool[unique_sorted_rows(pool)]
    cuts = np.sort(rng.integers(0, pool.shape[0] + 1, size=rng.integers(0, 12)))
    return [np.ascontiguousarray(q) for q in np.split(pool, cuts)]


def _chunks(rng: np.random.Generator, rows: np.ndarray) -> list[np.ndarray]:
    cuts = np.sort(rng.integers(0, rows.shape[0] + 1, size=rng.integers(0, 10)))
    return [c for c in np.split(rows, cuts) if c.shape[0]]


@pytest.mark.parametrize("seed", range(40))
def test_same_positions_and_rows_as_sorted_cursor(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 4))
    span = int(rng.choice([3, 20, 2**40]))
    stream = _stream(rng, int(rng.integers(0, 300)), k, int(rng.integers(0, 3)), span)
    queries = _queries(rng, stream, k, span)
    chunks = _chunks(rng, stream)
    plain, fast = SortedCursor(iter(chunks), k), RingCursor(iter(chunks), k)
    for q in queries:
        want, got = plain.match(q), fast.match(q)
        assert got[0].tolist() == want[0].tolist()
        assert got[1].shape[0] == want[1].shape[0]
        assert got[1].tolist() == want[1].tolist()
        assert got[0].dtype == np.int64 and got[1].dtype == np.uint64


def test_empty_stream_and_empty_queries() -> None:
    fast = RingCursor(iter([]), 2)
    for q in (np.zeros((0, 2), np.uint64), np.array([[1, 2]], np.uint64)):
        ia, found = fast.match(q)
        assert ia.size == 0 and found.shape == (0, 0)
    rows = np.array([[1, 1, 7], [2, 0, 8]], dtype=np.uint64)
    fast = RingCursor(iter([rows]), 2)
    ia, found = fast.match(np.zeros((0, 2), np.uint64))
    assert ia.size == 0 and found.shape == (0, 0)
    ia, found = fast.match(np.array([[0, 5], [1, 1]], np.uint64))
    assert ia.tolist() == [1] and found.tolist() == [[1, 1, 7]]


def test_query_ending_on_a_chunks_last_row_then_the_next_chunk() -> None:
    """The window ends exactly where a query does: the next query reads the next chunk."""
    rows = np.arange(12, dtype=np.uint64).reshape(6, 2)
    fast = RingCursor(iter([rows[:3], rows[3:]]), 1)
    ia, found = fast.match(np.ascontiguousarray(rows[[0, 2], :1]))
    assert ia.tolist() == [0, 1] and found.tolist() == rows[[0, 2]].tolist()
    ia, found = fast.match(np.array([[5], [6], [10]], np.uint64))
    assert ia.tolist() == [1, 2] and found.tolist() == rows[[3, 5]].tolist()
    ia, found = fast.match(np.array([[11]], np.uint64))
    assert ia.size == 0


@pytest.mark.parametrize("cursor_class", [SortedCursor, RingCursor])
def test_a_rewound_match_reads_the_stream_as_before(cursor_class: type[SortedCursor]) -> None:
    rows = np.arange(1000, dtype=np.uint64).reshape(1000, 1) * np.uint64(2)
    queries = [rows[[3, 5]], rows[[200, 640, 641]] + np.uint64(1), rows[[641, 999]]]
    plain = SortedCursor(iter(np.array_split(rows, 9)), 1)
    want = [plain.match(np.ascontiguousarray(q)) for q in queries]
    cursor = cursor_class(iter(np.array_split(rows, 9)), 1)
    for q, (ia, found) in zip(queries, want, strict=True):
        # a refused query across several chunks (the last one up to the end) is undone
        cursor.match(np.ascontiguousarray(rows[[int(q[0, 0]) // 2 + 1, 999]]))
        cursor.rewind()
        got = cursor.match(np.ascontiguousarray(q))
        assert got[0].tolist() == ia.tolist() and got[1].tolist() == found.tolist()
    with pytest.raises(RuntimeError, match="no match to rewind"):
        cursor.rewind()
        cursor.rewind()


@pytest.mark.parametrize("p", [2, 3, 5])
def test_pair_ends_as_numpy_argmax(p: int) -> None:
    """The compiled ends of matched rows equal numpy's first / last non-zero column (argmax),
    rows without a non-zero pseudonym included."""
    rng = np.random.default_rng(p)
    rows = np.zeros((500, p + 1), dtype=np.uint64)
    for t in range(rows.shape[0] - 3):
        a, b = sorted(rng.choice(p, size=2, replace=False))
        rows[t, a], rows[t, b] = rng.integers(1, 2**64 - 1, size=2, dtype=np.uint64)
    rows[-2, 1] = 7  # one non-zero column only; the last row has none
    rows[:, p] = rng.random(rows.shape[0]).view(np.uint64)
    member = rows[:, :p] != 0
    a = np.argmax(member, axis=1)
    b = p - 1 - np.argmax(member[:, ::-1], axis=1)
    at = np.arange(rows.shape[0])
    want = np.stack([a.astype(np.uint64), rows[at, a], b.astype(np.uint64), rows[at, b]], 1)
    got = np.empty((rows.shape[0], 4), dtype=np.uint64)
    pair_ends(rows, p, got)
    assert got.tolist() == want.tolist()


def _big(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """uint64 values near 2^64 as well as small ones: the sums wrap."""
    out = rng.integers(0, 2**64 - 1, size=shape, dtype=np.uint64, endpoint=True)
    out[..., ::3] = np.uint64(2**64 - 1) - out[..., ::3] % np.uint64(5)
    return out


@pytest.mark.parametrize("m", [0, 1, 257])
def test_step_rows_as_numpy(m: int) -> None:
    rng = np.random.default_rng(m)
    p = 3
    c_in, x_in = _big(rng, m + 5), _big(rng, m + 5)
    positions = np.sort(rng.choice(m + 5, size=m, replace=False)).astype(np.int64)
    own = _big(rng, m, p + 1)
    out = np.empty((m, p + 2), dtype=np.uint64)
    step_rows(own, positions, c_in, x_in, p, out)
    assert out[:, :p].tolist() == own[:, :p].tolist()
    assert out[:, p].tolist() == add_mod64(c_in[positions], own[:, p]).tolist()
    assert out[:, p + 1].tolist() == x_in[positions].tolist()


@pytest.mark.parametrize("m", [0, 1, 300])
def test_start_rows_as_numpy(m: int) -> None:
    rng = np.random.default_rng(m + 1)
    p = 4
    rows, mask_c, mask_x = _big(rng, m, p + 1), _big(rng, m), _big(rng, m)
    cand = np.empty((m, p), dtype=np.uint64)
    sent = np.empty((m, p + 2), dtype=np.uint64)
    c_out = np.empty(m, dtype=np.uint64)
    start_rows(rows[:, :], mask_c, mask_x, p, cand, sent, c_out)
    assert cand.tolist() == rows[:, :p].tolist()
    assert sent.tolist() == np.column_stack([rows[:, :p], mask_c, mask_x]).tolist()
    assert c_out.tolist() == add_mod64(mask_c, rows[:, p]).tolist()


def test_own_counts_as_numpy() -> None:
    """Each position's record's 1-bit count (through the table rows), 0 at position -1."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 1024, size=50, dtype=np.int64)
    shared_rows = rng.permutation(50)[:30].astype(np.int64)
    positions = rng.integers(-1, 30, size=400).astype(np.int64)
    out = np.empty(400, dtype=np.uint64)
    own_counts(positions, shared_rows, x, out)
    want = np.where(positions >= 0, x[shared_rows[np.maximum(positions, 0)]], 0)
    assert out.tolist() == want.astype(np.uint64).tolist()
    assert (positions == -1).any() and out[positions == -1].tolist() == [0] * int(
        (positions == -1).sum()
    )
