"""Survivors, ring and results beyond the memory budget spill to a private folder and stream back:
row stores equal a plain sort, and a run forced to spill equals the in-memory run and the oracle
exactly; the folder is 0700 and removed when the run ends."""

from __future__ import annotations

import os
import pathlib
import stat

import numpy as np
import pytest

from party.protocol.driver import InProcessRun, run_in_process
from party.protocol.engine import PartyEngine
from party.protocol.errors import MemoryBudgetError
from party.protocol.params import ProtocolParameters
from party.protocol.spill import LocalGauge, RowStore, SortedCursor, SpillFolder, count_at_most
from tests.unit.protocol.helpers import linked_tables
from tests.unit.protocol.test_oracle_equivalence import oracle_sets, run_sets


def _plain_sorted_unique(rows: np.ndarray, k: int) -> np.ndarray:
    keys = [tuple(r[:k]) for r in rows.tolist()]
    first: dict[tuple[int, ...], list[int]] = {}
    for key, r in zip(keys, rows.tolist(), strict=True):
        first.setdefault(key, r)
    return np.array([first[key] for key in sorted(first)], dtype=np.uint64).reshape(
        -1, rows.shape[1]
    )


@pytest.mark.parametrize("gauge_bytes", [0, 5_000, 10**9])
@pytest.mark.parametrize("break_at", [None, 0, 1, 150, -1])
def test_ordered_appends_skip_the_sort_and_a_late_disorder_still_sorts(
    tmp_path: pathlib.Path, gauge_bytes: int, break_at: int | None
) -> None:
    """Appends in strictly increasing key order (ties in the later key column, chunk edges where
    the first column repeats) keep the store ordered; an out-of-order chunk (a repeated key or a
    smaller one, inside a chunk or at its edge) at append ``break_at`` makes it sort and merge:
    the result is a plain sort either way."""
    rng = np.random.default_rng(9)
    keys = np.unique(rng.integers(0, 40, size=(4000, 2), dtype=np.uint64), axis=0)
    rows = np.column_stack([keys, keys[:, 0] * 100 + keys[:, 1]]).astype(np.uint64)
    chunks = [rows[a : a + 5] for a in range(0, rows.shape[0], 5)]
    if break_at is not None:
        break_at %= len(chunks)  # -1: the last chunk
        late = chunks[break_at].copy()
        late[-1] = chunks[max(0, break_at - 1)][0]  # a key seen before (or repeated in the chunk)
        chunks.insert(break_at + 1, late)
    folder = SpillFolder(tmp_path)
    store = RowStore(3, gauge=LocalGauge(gauge_bytes), folder=folder, key_columns=2, merge_bytes=64)
    for c in chunks:
        store.append(c)
    store.finish()
    assert store.ordered == (break_at is None)
    if gauge_bytes == 10**9:  # room for the sort: what was held in order stays in memory
        assert not store.spilled
    got = np.concatenate(list(store.chunks(7)))
    np.testing.assert_array_equal(got, _plain_sorted_unique(np.concatenate(chunks), 2))
    assert store.rows == got.shape[0] == rows.shape[0]
    store.close()
    folder.close()
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("gauge_bytes", [0, 10**9])
@pytest.mark.parametrize("edge", [None, "repeat", "below"])
def test_chunks_known_increasing_are_checked_only_where_they_start(
    tmp_path: pathlib.Path, gauge_bytes: int, edge: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``append(rows, increasing=True)`` (the caller built the rows in strictly increasing key
    order): no pass over the rows (the check would fail here), only the chunk's first key against
    the last one appended; a chunk starting at that key or below it still ends the order, and the
    store sorts: a plain sort either way."""
    from party.protocol import spill as spill_module

    def no_pass(rows: np.ndarray, key_columns: int) -> bool:
        raise AssertionError("the rows were checked one by one")

    monkeypatch.setattr(spill_module, "keys_strictly_increasing", no_pass)
    rng = np.random.default_rng(11)
    keys = np.unique(rng.integers(0, 40, size=(600, 2), dtype=np.uint64), axis=0)
    rows = np.column_stack([keys, keys[:, 0] * 100 + keys[:, 1]]).astype(np.uint64)
    chunks = [rows[a : a + 7] for a in range(0, rows.shape[0], 7)]
    if edge is not None:  # a chunk whose first key repeats the last one, or lies below it
        late = chunks[20].copy()
        late[0] = chunks[19][-1] if edge == "repeat" else chunks[3][0]
        chunks.insert(20, late[np.lexsort((late[:, 1], late[:, 0]))])
    folder = SpillFolder(tmp_path)
    store = RowStore(3, gauge=LocalGauge(gauge_bytes), folder=folder, key_columns=2, merge_bytes=64)
    for c in chunks:
        store.append(c, increasing=True)
    store.finish()
    assert store.ordered == (edge is None)
    got = np.concatenate(list(store.chunks(5)))
    np.testing.assert_array_equal(got, _plain_sorted_unique(np.concatenate(chunks), 2))
    store.close()
    folder.close()


@pytest.mark.parametrize("gauge_bytes", [0, 5_000, 10**9])
def test_sorted_store_equals_a_plain_sort_whatever_it_spills(
    tmp_path: pathlib.Path, gauge_bytes: int
) -> None:
    rng = np.random.default_rng(5)
    # small value range: many duplicate keys, equal keys across spilled runs and merge batches
    rows = rng.integers(0, 6, size=(3000, 3), dtype=np.uint64)
    rows[:, 2] = rows[:, 0] * 10 + rows[:, 1]  # payload determined by the key, as for survivors
    folder = SpillFolder(tmp_path)
    store = RowStore(3, gauge=LocalGauge(gauge_bytes), folder=folder, key_columns=2, merge_bytes=64)
    for a in range(0, 3000, 11):  # 273 appends: with no memory, more runs than one merge takes
        store.append(rows[a : a + 11])
    store.finish()
    assert store.spilled == (gauge_bytes < rows.nbytes)
    got = np.concatenate(list(store.chunks(7)))
    np.testing.assert_array_equal(got, _plain_sorted_unique(rows, 2))
    assert store.rows == got.shape[0] and store.appended == 3000
    wide = rng.integers(0, 2**64 - 1, size=(5000, 4), dtype=np.uint64)
    store2 = RowStore(
        4, gauge=LocalGauge(gauge_bytes), folder=folder, key_columns=3, merge_bytes=4096
    )
    for a in range(0, 5000, 333):
        store2.append(wide[a : a + 333])
    got2 = np.concatenate(list(store2.finish().chunks(1000)))
    np.testing.assert_array_equal(got2, _plain_sorted_unique(wide, 3))
    folder.close()
    assert not any(tmp_path.iterdir())


def test_sequential_store_and_cursor(tmp_path: pathlib.Path) -> None:
    folder = SpillFolder(tmp_path)
    rows = np.arange(2000 * 2, dtype=np.uint64).reshape(2000, 2) * np.uint64(3)
    store = RowStore(2, gauge=LocalGauge(3000), folder=folder)
    for a in range(0, 2000, 150):
        store.append(rows[a : a + 150])
    store.finish()
    assert store.spilled
    np.testing.assert_array_equal(np.concatenate(list(store.chunks(64))), rows)
    cursor = SortedCursor(store.chunks(64), 1)
    queries = [rows[[3, 5, 700], :1], rows[[701], :1] + np.uint64(1), rows[[1500, 1999], :1]]
    found = [cursor.match(np.ascontiguousarray(q)) for q in queries]
    assert (
        found[0][0].tolist() == [0, 1, 2]
        and found[0][1][:, 0].tolist() == rows[[3, 5, 700], 0].tolist()
    )
    assert found[1][0].size == 0
    assert found[2][1].tolist() == rows[[1500, 1999]].tolist()
    folder.close()


def test_spill_folder_is_private_limited_and_removed(tmp_path: pathlib.Path) -> None:
    folder = SpillFolder(tmp_path, limit_bytes=100)
    path = folder.new_file("x")
    assert path.parent.parent == tmp_path
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    folder.charge(100)
    with pytest.raises(MemoryBudgetError, match="spill space"):
        folder.charge(1)
    folder.close()
    assert not path.parent.exists()


def _spilling_run(tmp_path: pathlib.Path, params: ProtocolParameters, tables) -> InProcessRun:  # type: ignore[no-untyped-def]
    spill = tmp_path / "spill"
    spill.mkdir()
    created: list[PartyEngine] = []
    original_init = PartyEngine.__init__

    def recording_init(self, *a, **kw):  # type: ignore[no-untyped-def]
        original_init(self, *a, **kw)
        created.append(self)

    PartyEngine.__init__ = recording_init  # type: ignore[method-assign]
    try:
        run = run_in_process(tables, params, spill_dir=spill)
    finally:
        PartyEngine.__init__ = original_init  # type: ignore[method-assign]
    assert all(e.comparison_stats and e.comparison_stats.spilled_bytes > 0 for e in created)
    assert not any(spill.iterdir()), "spill folders must be removed when the run ends"
    return run


@pytest.mark.parametrize(("s_t", "one_to_one"), [(0.0, False), (0.45, False), (0.45, True)])
def test_a_run_forced_to_spill_equals_the_in_memory_run_and_the_oracle(
    tmp_path: pathlib.Path, s_t: float, one_to_one: bool
) -> None:
    rng = np.random.default_rng(11)
    # 3 parties, one block of 36 records each: 46,656 candidate sets, all survive at s_m = 0;
    # 1 MiB budget keeps 256 KiB of rows in memory (~8,000 survivors): everything spills
    tables = linked_tables(rng, 3, 36, 96, shared=12, blocks=1, flip=0.05)
    names = ("a", "b", "c")
    small = ProtocolParameters(
        names, 96, s_t, 0.0, one_to_one, memory_budget_bytes=2**20, target="all"
    )
    big = ProtocolParameters(
        names, 96, s_t, 0.0, one_to_one, memory_budget_bytes=2**30, target="all"
    )
    spilled = _spilling_run(tmp_path, small, tables)
    in_memory = run_in_process(tables, big)
    got = run_sets(spilled, tables)
    assert got == run_sets(in_memory, tables)
    if not one_to_one:
        assert got == oracle_sets(tables, small, None)
    else:
        assert got == oracle_sets(tables, small, spilled.pseudonyms)
    assert len(got) > (100 if s_t < 0.4 else 10)
    assert spilled.metrics.sets_summed == 36**3


def _traced_sorted_store(folder_path: str, gauge_bytes: int) -> tuple[int, int, bool, np.ndarray]:
    """In a process of its own (no other test's threads allocating beside it): the traced growth
    of appending 200,000 rows (half of them repeating a key) in chunks and finishing, the gauge's
    peak, whether the store spilled, and the stored rows."""
    import tracemalloc

    rng = np.random.default_rng(9)
    rows = rng.integers(0, 2**64 - 1, size=(200_000, 4), dtype=np.uint64)
    rows[1::2] = rows[::2]  # half the rows repeat a key
    folder = SpillFolder(pathlib.Path(folder_path))
    gauge = LocalGauge(gauge_bytes)
    store = RowStore(4, gauge=gauge, folder=folder, key_columns=3, merge_bytes=2**22)
    warm = RowStore(4, gauge=LocalGauge(0), folder=folder, key_columns=3)
    warm.append(rows[:10])  # compiles (or loads) the sort's kernels before tracing
    warm.finish().close()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for a in range(0, rows.shape[0], _TRACED_CHUNK):
            store.append(rows[a : a + _TRACED_CHUNK].copy())
        store.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    spilled = store.spilled
    got = np.concatenate(list(store.chunks(50_000)))
    store.close()
    assert gauge.held == 0
    folder.close()
    return peak - base, gauge.peak, spilled, got


_TRACED_CHUNK = 10_000


@pytest.mark.parametrize("gauge_bytes", [2**20, 2**26])
def test_a_sorted_store_reserves_what_its_sorts_and_merges_allocate(
    tmp_path: pathlib.Path, gauge_bytes: int
) -> None:
    # the traced numpy allocations of appends, spills, the in-memory sort or the merge stay
    # within what the store reserved on its gauge (plus the appended chunk's sort, and the
    # merge's floor MIN_MERGE_BYTES, which is used whether the gauge grants it or not).
    # tracemalloc counts every thread of a process, so the store runs in a spawned process:
    # threads other tests leave behind (Dask's loop, pools, queue feeders) cannot add to it
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from party.protocol.spill import MIN_MERGE_BYTES

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        growth, gauge_peak, spilled, got = pool.submit(
            _traced_sorted_store, str(tmp_path), gauge_bytes
        ).result(timeout=300)
    assert spilled == (gauge_bytes == 2**20)
    assert growth <= gauge_peak + 3 * _TRACED_CHUNK * 32 + 4 * MIN_MERGE_BYTES
    rows = np.random.default_rng(9).integers(0, 2**64 - 1, size=(200_000, 4), dtype=np.uint64)
    rows[1::2] = rows[::2]
    np.testing.assert_array_equal(got, _plain_sorted_unique(rows, 3))


@pytest.mark.parametrize("repeats", [True, False])
@pytest.mark.parametrize("gauge_bytes", [0, 20_000, 10**9])
def test_a_store_told_keys_rarely_repeat_still_drops_repeats(
    tmp_path: pathlib.Path, repeats: bool, gauge_bytes: int
) -> None:
    # repeats=False sorts first and drops repeated keys after (target any's survivors): the same
    # rows as the hash pass before the sort, spilled or not, merged across runs or not
    rng = np.random.default_rng(11)
    rows = rng.integers(0, 2**64 - 1, size=(4000, 4), dtype=np.uint64)
    rows[:, 0] = rng.integers(0, 3, size=4000).astype(np.uint64)  # long runs in column 0
    rows[1::5] = rows[::5][: rows[1::5].shape[0]]  # some keys repeat, within and across appends
    rows[3::7, :3] = rows[2::7, :3][: rows[3::7].shape[0]]
    rows[3::7, 3] = rows[2::7, 3][: rows[3::7].shape[0]]
    folder = SpillFolder(tmp_path)
    store = RowStore(
        4, gauge=LocalGauge(gauge_bytes), folder=folder, key_columns=3, repeats=repeats
    )
    for a in range(0, 4000, 250):
        store.append(rows[a : a + 250])
    got = np.concatenate(list(store.finish().chunks(999)))
    assert store.spilled == (gauge_bytes < 20_000 * 10)
    np.testing.assert_array_equal(got, _plain_sorted_unique(rows, 3))
    store.close()
    folder.close()


@pytest.mark.parametrize("key_columns", [1, 2, 3])
def test_count_at_most_is_a_plain_count_of_rows_at_most_the_bound(key_columns: int) -> None:
    """The binary search against a row-by-row tuple comparison (written here, not the code's):
    sorted rows with many ties, rows wider than the key, bounds equal to rows, between them,
    below and above all, at 0 and 2**64 - 1, and views that start inside another array."""
    rng = np.random.default_rng(key_columns)
    top = np.iinfo(np.uint64).max
    for n in (0, 1, 2, 7, 64, 301):
        keys = rng.choice(np.array([0, 1, 2, 5, top], dtype=np.uint64), (n, 4))
        rows = keys[np.lexsort(keys[:, :key_columns].T[::-1])] if n else keys
        bounds = [rows[i, :key_columns] for i in range(n)]
        bounds += [np.zeros(key_columns, np.uint64), np.full(key_columns, top, np.uint64)]
        bounds += [
            rng.choice(np.array([0, 1, 3, top], dtype=np.uint64), key_columns) for _ in range(20)
        ]
        for start in (0, n // 3):
            view = rows[start:]
            for bound in bounds:
                want = sum(
                    tuple(int(x) for x in row[:key_columns]) <= tuple(int(x) for x in bound)
                    for row in view
                )
                assert count_at_most(view, bound) == want
