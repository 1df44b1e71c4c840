"""The streamed solver (pairs sorted on disk, per-record state) gives exactly the whole-run solver's
result rows, within its memory gauge (spilling its stores), and refuses a run the budget cannot hold."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from party.protocol._numba_groups import ADJACENCY_BYTES_PER_PAIR, NODE_BYTES
from party.protocol.components import (
    RESULT_BYTES_PER_RECORD,
    _Nodes,
    array_chunks,
    known_keys,
    solve_streamed,
)
from party.protocol.errors import MemoryBudgetError, ProtocolError
from party.protocol.solver import SOLVERS, Group, solve_groups
from party.protocol.spill import LocalGauge, RowStore, SpillFolder


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


def group_result_rows(groups: list[Group], parties: int) -> list[np.ndarray]:
    """Per party q, the result rows of the groups it is in, in group order (the linkage id):
    linkage id, similarity bits, q's key, group size, party bit mask."""
    per_party: list[list[tuple[int, float, int, int, int]]] = [[] for _ in range(parties)]
    for gid, g in enumerate(groups):
        mask = sum(1 << p for p in set(g.parties))
        for q, key in g.members:
            per_party[q].append((gid, g.similarity, key, len(g.members), mask))
    out = []
    for rows in per_party:
        table = np.zeros((len(rows), 5), dtype=np.uint64)
        for i, (gid, sim, key, size, mask) in enumerate(rows):
            table[i] = (gid, np.float64(sim).view(np.uint64), key, size, mask)
        out.append(table)
    return out


def _whole(ends: np.ndarray, sims: np.ndarray, p: int, m: int, solver: str) -> list[np.ndarray]:
    pairs = [
        (a, ka, b, kb, s) for (a, ka, b, kb), s in zip(ends.tolist(), sims.tolist(), strict=True)
    ]
    return group_result_rows(solve_groups(pairs, m, solver, 0.8, parties=p), p)


class _Stores:
    """Spilling stores in a private folder, within a gauge of ``memory`` bytes."""

    def __init__(self, parent: Path, memory: int) -> None:
        self.folder = SpillFolder(parent)
        self.gauge = LocalGauge(memory)
        self.made: list[RowStore] = []

    def __call__(self, width: int, name: str, key_columns: int | None) -> RowStore:
        store = RowStore(
            width,
            gauge=self.gauge,
            folder=self.folder,
            key_columns=key_columns,
            name=name,
            merge_bytes=4096,
        )
        self.made.append(store)
        return store


def _solve(
    ends: np.ndarray,
    sims: np.ndarray,
    p: int,
    m: int,
    solver: str,
    stores: _Stores,
    chunk_rows: int,
    chunk: int,
    gauge: LocalGauge | None = None,
    memory_order: bool = False,
    workers: int = 1,
) -> tuple[list[np.ndarray], int]:
    out, count = solve_streamed(
        array_chunks(ends, sims, chunk),
        known_keys(ends, p),
        m,
        solver,
        0.8,
        stores,
        gauge or LocalGauge(1 << 30),
        chunk_rows,
        memory_order=memory_order,
        workers=workers,
    )
    got = []
    for store in out:
        parts = list(store.chunks(5))
        got.append(np.concatenate(parts) if parts else np.zeros((0, 5), np.uint64))
        store.close()
    return got, count


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(6))
def test_streamed_solver_equals_the_whole_run(solver: str, seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    p = int(rng.integers(2, 6))
    ends, sims = _pairs(rng, p, records=int(rng.integers(5, 60)), k=int(rng.integers(1, 400)))
    for m in (2, p):
        want = _whole(ends, sims, p, m, solver)
        for chunk_rows, chunk, memory in ((1, 3, 0), (7, 50, 2048), (1 << 16, 1 << 15, 1 << 30)):
            # one pair per scan chunk, every store spilled .. everything in one chunk, in memory
            stores = _Stores(tmp_path, memory)
            got, count = _solve(ends, sims, p, m, solver, stores, chunk_rows, chunk)
            assert count == len({int(x) for t in want for x in t[:, 0]})
            for q in range(p):
                np.testing.assert_array_equal(got[q], want[q])
            if memory == 0 and ends.shape[0] > 1:
                assert stores.folder.bytes_written > 0  # the pairs went through the disk
            assert stores.gauge.held == 0  # every store released its bytes
            stores.folder.close()


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(4))
def test_the_order_in_memory_gives_the_same_groups_wherever_the_gauge_stops_it(
    solver: str, seed: int, tmp_path: Path
) -> None:
    """The visiting order held in memory (pair_order) equals the sorted store's: with room for
    everything, and with a solver gauge that refuses it while pairs arrive (the store takes over
    mid-stream), at its sort, or later (the partner lists: the order moves into the store)."""
    rng = np.random.default_rng(100 + seed)
    p = int(rng.integers(2, 5))
    ends, sims = _pairs(rng, p, records=int(rng.integers(5, 60)), k=int(rng.integers(100, 400)))
    ends = np.concatenate([ends, ends[:3]])  # a pair given twice is one pair, as in the store
    sims = np.concatenate([sims, sims[:3]])
    k = ends.shape[0]
    for m in (2, p):
        want = _whole(ends, sims, p, m, solver)
        for case, gauge in enumerate(
            [
                _RefuseOnce(lambda nbytes, seen: False),  # room for everything
                # refused while the pairs arrive (the third chunk of 23): the store takes over
                _RefuseOnce(lambda nbytes, seen: seen.count(16 * 23) == 2 and nbytes == 16 * 23),
                _RefuseOnce(lambda nbytes, seen: nbytes == 8 * k),  # refused at the sort
                # the first step after the sort is refused once: the order moves into the store
                _RefuseOnce(lambda nbytes, seen: 8 * k in seen),
            ]
        ):
            stores = _Stores(tmp_path, 1 << 20)
            got, _ = _solve(ends, sims, p, m, solver, stores, 7, 23, gauge, memory_order=True)
            for q in range(p):
                np.testing.assert_array_equal(got[q], want[q])
            assert gauge.held == 0 and stores.gauge.held == 0
            assert gauge.refused == (case > 0)
            stores.folder.close()


class _RefuseOnce(LocalGauge):
    """Grants everything but the first reservation for which ``refuse(nbytes, sizes granted so
    far)`` is true."""

    def __init__(self, refuse: Callable[[int, list[int]], bool]) -> None:
        super().__init__(1 << 30)
        self.refuse = refuse
        self.seen: list[int] = []
        self.refused = False

    def try_reserve(self, nbytes: int) -> bool:
        if not self.refused and self.refuse(nbytes, self.seen):
            self.refused = True
            return False
        self.seen.append(nbytes)
        return super().try_reserve(nbytes)


@pytest.mark.parametrize("solver", SOLVERS)
def test_one_giant_component_in_the_weak_band(solver: str, tmp_path: Path) -> None:
    # a chain of households: 3 parties x 400 records, every record matched with several others,
    # most Dice in the weak band [0.8, 0.82) and many exact ties: one connected component
    rng = np.random.default_rng(11)
    rows = []
    for r in range(400):
        for d in (0, 1, 2):
            a, b = rng.choice(3, size=2, replace=False)
            rows.append((min(a, b), r, max(a, b), (r + d) % 400))
    ends = np.unique(np.array(rows, dtype=np.uint64), axis=0)
    sims = rng.choice([0.8, 0.805, 0.81, 0.815, 0.82, 0.9], size=ends.shape[0])
    for m in (2, 3):
        want = _whole(ends, sims, 3, m, solver)
        stores = _Stores(tmp_path, 0)
        got, _ = _solve(ends, sims, 3, m, solver, stores, 64, 100)
        for q in range(3):
            np.testing.assert_array_equal(got[q], want[q])
        stores.folder.close()


def test_memory_is_per_record_not_per_pair_in_a_component(tmp_path: Path) -> None:
    # 3 parties x 2,000 records in one connected component of 6,000 pairs: the solver's gauge sees
    # the per-record state and the partner lists (8 bytes per pair), never the pairs themselves,
    # which go through the disk (the stores' gauge holds nothing)
    keys = np.arange(1, 2001, dtype=np.uint64)
    ends = np.concatenate(
        [
            np.stack([np.zeros(2000, np.uint64), keys, np.ones(2000, np.uint64), keys], 1),
            np.stack([np.ones(2000, np.uint64), keys, np.full(2000, 2, np.uint64), keys], 1),
            np.stack(
                [np.zeros(2000, np.uint64), keys, np.full(2000, 2, np.uint64), np.roll(keys, 1)],
                1,
            ),
        ]
    )
    sims = np.random.default_rng(3).choice([0.8, 0.81, 0.9, 1.0], size=ends.shape[0])
    stores = _Stores(tmp_path, 0)
    gauge = LocalGauge(1 << 30)
    got, _ = _solve(ends, sims, 3, 2, "guarded", stores, 100, 100, gauge)
    nodes = sum(k.size for k in known_keys(ends, 3))
    assert gauge.peak <= NODE_BYTES * nodes + ADJACENCY_BYTES_PER_PAIR * 6000 + 100 * 2000
    # the component solver before this one reserved 320 bytes per pair of its largest component
    assert gauge.peak < 320 * 6000 // 3
    want = _whole(ends, sims, 3, 2, "guarded")
    for q in range(3):
        np.testing.assert_array_equal(got[q], want[q])
    assert stores.folder.bytes_written >= 24 * 6000  # every pair went through the disk
    assert gauge.held == 0 and stores.gauge.held == 0
    stores.folder.close()


def test_records_beyond_the_budget_are_refused_by_name(tmp_path: Path) -> None:
    keys = np.arange(1, 201, dtype=np.uint64)
    ends = np.stack(
        [np.zeros(200, np.uint64), np.ones(200, np.uint64), np.ones(200, np.uint64), keys], 1
    )
    sims = np.full(200, 0.9)
    stores = _Stores(tmp_path, 1 << 20)
    gauge = LocalGauge(NODE_BYTES * 100)
    with pytest.raises(MemoryBudgetError, match="memory_budget_mib") as err:
        _solve(ends, sims, 2, 2, "guarded", stores, 10, 16, gauge)
    assert "201 records" in str(err.value)
    assert gauge.held == 0 and stores.gauge.held == 0  # everything released on the way out
    assert all(not s._files for s in stores.made)  # noqa: SLF001 - the stores' files are gone
    stores.folder.close()


def test_partner_lists_beyond_the_budget_are_refused_by_name(tmp_path: Path) -> None:
    keys = np.arange(1, 201, dtype=np.uint64)
    ends = np.stack(
        [np.zeros(200, np.uint64), np.ones(200, np.uint64), np.ones(200, np.uint64), keys], 1
    )
    stores = _Stores(tmp_path, 1 << 20)
    gauge = LocalGauge(NODE_BYTES * 201 + 1000)  # less than 8 bytes per pair beside the state
    with pytest.raises(MemoryBudgetError, match="partner lists of 200 matched pairs"):
        # three parties (the third has no pairs): at P = 2 guarded is greedy, without the lists
        _solve(ends, np.full(200, 0.9), 3, 2, "guarded", stores, 10, 16, gauge)
    assert gauge.held == 0 and stores.gauge.held == 0
    # greedy needs no partner lists: it reaches the result rows
    with pytest.raises(MemoryBudgetError, match="result rows of 200 records of party 1"):
        _solve(ends, np.full(200, 0.9), 2, 2, "greedy", _Stores(tmp_path, 0), 10, 16, gauge)
    gauge = LocalGauge(NODE_BYTES * 201 + 1000 + 88 * 200)
    got, count = _solve(
        ends, np.full(200, 0.9), 2, 2, "greedy", _Stores(tmp_path, 0), 10, 16, gauge
    )
    assert count == 1 and got[0].shape == (1, 5) and got[1].shape == (1, 5)


def test_a_pair_within_one_party_or_with_a_bad_dice_is_refused(tmp_path: Path) -> None:
    for ends, sims, message in (
        (np.array([[1, 5, 1, 6]], np.uint64), [0.9], "two records of party 1"),
        (np.array([[0, 5, 1, 6]], np.uint64), [float("nan")], "outside"),
        (np.array([[0, 5, 1, 6]], np.uint64), [1.5], "outside"),
    ):
        with pytest.raises(ProtocolError, match=message):
            solve_streamed(
                array_chunks(ends, np.array(sims)),
                [np.array([5], np.uint64), np.array([5, 6], np.uint64)],
                2,
                "guarded",
                0.8,
                _Stores(tmp_path, 1 << 20),
                LocalGauge(1 << 30),
            )


def test_a_pair_naming_an_unknown_record_is_refused(tmp_path: Path) -> None:
    ends = np.array([[0, 5, 1, 6]], dtype=np.uint64)
    with pytest.raises(ProtocolError, match="never shared"):
        solve_streamed(
            array_chunks(ends, np.array([0.9])),
            [np.array([5], np.uint64), np.array([7], np.uint64)],
            2,
            "guarded",
            0.8,
            _Stores(tmp_path, 1 << 20),
            LocalGauge(1 << 30),
        )


def test_no_pairs(tmp_path: Path) -> None:
    got, count = _solve(
        np.zeros((0, 4), np.uint64), np.zeros(0), 3, 2, "guarded", _Stores(tmp_path, 0), 8, 8
    )
    assert count == 0 and [g.shape for g in got] == [(0, 5)] * 3


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("seed", range(4))
def test_solver_on_two_threads_equals_one_thread(
    solver: str, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partner lists (counted, filled and sorted per range of nodes) and every party's result
    rows on two kernel threads, handed even the smallest work: the same rows as one thread and
    as the whole-run solver; also no pair, one pair, ties (every Dice equal) and a gauge that
    refuses the parties' rows at once (made one party at a time)."""
    from party.protocol import threads

    monkeypatch.setattr(threads, "PARALLEL_MIN_WORDS", 1)
    rng = np.random.default_rng(100 + seed)
    p = int(rng.integers(2, 6))
    ends, sims = _pairs(rng, p, records=int(rng.integers(5, 60)), k=int(rng.integers(1, 400)))
    cases = [(ends, sims), (ends[:0], sims[:0]), (ends[:1], sims[:1])]
    cases.append((ends, np.full_like(sims, 0.9)))
    for case_ends, case_sims in cases:
        want = _whole(case_ends, case_sims, p, 2, solver)
        records = sum(k.size for k in known_keys(case_ends, p))

        class RefusingAllRows(LocalGauge):
            refused = RESULT_BYTES_PER_RECORD * records or -1  # every party's rows at once

            def try_reserve(self, nbytes: int) -> bool:
                return nbytes != self.refused and super().try_reserve(nbytes)

        for memory_order, gauge_class in (
            (True, LocalGauge),
            (False, LocalGauge),
            (True, RefusingAllRows),
        ):
            for workers in (1, 2):
                stores = _Stores(tmp_path, 1 << 30)
                gauge = gauge_class(1 << 30)
                got, count = _solve(
                    case_ends,
                    case_sims,
                    p,
                    2,
                    solver,
                    stores,
                    7,
                    50,
                    gauge=gauge,
                    memory_order=memory_order,
                    workers=workers,
                )
                for q in range(p):
                    np.testing.assert_array_equal(got[q], want[q])
                assert count == len({int(x) for t in want for x in t[:, 0]})
                assert stores.gauge.held == 0 and gauge.held == 0
                stores.folder.close()


@pytest.mark.parametrize("seed", range(6))
def test_node_numbers_through_the_tables_equal_the_binary_search(seed: int) -> None:
    """``_Nodes.of`` with the hash tables (ends grouped by party) gives the nodes the binary
    search gives, and the same refusals: a key a party never shared (naming the first such
    party), a party outside the run."""
    rng = np.random.default_rng(seed)
    known = [np.unique(rng.integers(1, 2**63, size=int(rng.integers(0, 50)), dtype=np.uint64))]
    known += [np.unique(rng.integers(1, 2**63, size=40, dtype=np.uint64)) for _ in range(2)]
    parties = np.concatenate([np.full(k.size, q, np.int64) for q, k in enumerate(known)])
    keys = np.concatenate(known)
    pick = rng.integers(0, keys.size, size=int(rng.integers(0, 200)))
    party, key = parties[pick], keys[pick]
    plain, tables = _Nodes(known), _Nodes(known)
    tables.use_lookups(True)
    assert tables.of(party, key).tolist() == plain.of(party, key).tolist()
    if party.size:
        bad_key = key.copy()
        bad_key[-1] = np.uint64(2**63 + 5)  # never a key
        bad_party = party.copy()
        bad_party[0] = 3
        for p_, k_ in ((party, bad_key), (bad_party, key), (bad_party, bad_key)):
            with pytest.raises(ProtocolError) as want:
                plain.of(p_, k_)
            with pytest.raises(ProtocolError) as got:
                tables.of(p_, k_)
            assert str(got.value) == str(want.value)
