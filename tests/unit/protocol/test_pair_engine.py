"""Target "any" through PairEngines and the streamed ring (the network's path, in process) vs the oracle."""

from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from party.encoding.bits import pack_rows
from party.encoding.records import EncodedRecords
from party.protocol.any_driver import GroupRow, run_any_in_process
from party.protocol.driver import exchange_in_process, run_in_process
from party.protocol.errors import ResultsError, RingError
from party.protocol.oracle_any import oracle_groups, oracle_pairs
from party.protocol.pair_engine import GroupResults
from party.protocol.pairwise import PairPlan, pair_candidates
from party.protocol.ring import RingMessage
from party.protocol.segments import new_pseudonyms
from party.protocol.solver import SOLVERS
from tests.unit.protocol.helpers import engines_after_compare
from tests.unit.protocol.test_any_target import params, subset_tables

Groups = set[tuple[tuple[tuple[int, str], ...], float, int, tuple[str, ...]]]


def groups_of(matches: list[list[GroupRow]]) -> Groups:
    """(members as (party, record id), similarity, size, parties) per linkage id."""
    members: dict[str, list[tuple[int, str]]] = {}
    info: dict[str, set[tuple[float, int, tuple[str, ...]]]] = {}
    for q, rows in enumerate(matches):
        for r in rows:
            members.setdefault(r.linkage_id, []).append((q, r.record_id))
            info.setdefault(r.linkage_id, set()).add((r.similarity, r.group_size, r.parties))
    out: Groups = set()
    for lid, ms in members.items():
        assert len(info[lid]) == 1, "parties disagree on a group's similarity, size or parties"
        sim, size, names = info[lid].pop()
        assert size == len(ms) and len(names) == size
        out.add((tuple(sorted(ms)), sim, size, names))
    return out


def expected(tables: list[EncodedRecords], prm, keys: list[np.ndarray]) -> Groups:  # type: ignore[no-untyped-def]
    want = oracle_groups(
        oracle_pairs(tables, prm),
        prm.min_parties,
        prm.solver,
        keys,
        prm.match_threshold,
        parties=prm.party_count,
    )
    return {
        (
            tuple((q, tables[q].record_ids[row]) for q, row in g.members),
            g.similarity,
            len(g.members),
            tuple(prm.parties[q] for q, _ in g.members),
        )
        for g in want
    }


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(("seed", "p", "m"), [(1, 2, 2), (2, 3, 2), (3, 4, 3), (4, 5, 2)])
def test_engines_equal_the_oracle_at_sm_zero(seed: int, p: int, m: int, solver: str) -> None:
    tables = subset_tables(seed, p, 40, 0.06)
    prm = params(p, solver=solver, match_threshold=0.75, min_parties=m)
    run = run_in_process(tables, prm)
    got = groups_of(run.matches)  # type: ignore[arg-type]
    assert got == expected(tables, prm, run.pseudonyms)
    assert got, "the data should form groups"
    if m > 2:
        assert all(size >= m for _, _, size, _ in got)


def test_engines_equal_the_reference_driver_with_the_segment_filter() -> None:
    """s_m > 0: the engines keep exactly the pairs the per-pair reference driver keeps."""
    tables = subset_tables(7, 4, 60, 0.06)
    prm = params(4, segment_threshold=0.7, match_threshold=0.75)
    net = run_in_process(tables, prm)
    ref = run_any_in_process(tables, prm)

    # pseudonyms differ between the runs: compare the matched pairs by record id
    def by_ids(pairs, keys):  # type: ignore[no-untyped-def]
        look = [
            dict(zip(k.tolist(), t.record_ids, strict=True))
            for k, t in zip(keys, tables, strict=True)
        ]
        return {(a, look[a][x], b, look[b][y], s) for a, x, b, y, s in pairs}

    cls = net.classification
    p = 4
    mine = set()
    for row, sim in zip(cls.candidates.tolist(), cls.similarities.tolist(), strict=True):
        a, b = (q for q in range(p) if row[q])
        mine.add((a, row[a], b, row[b], sim))
    assert by_ids(mine, net.pseudonyms) == by_ids(ref.matched_pairs, ref.pseudonyms)
    assert net.metrics.sets_summed == ref.stats.pairs_summed < ref.stats.candidate_pairs


def test_small_budget_spills_and_gives_the_same_groups(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tables = subset_tables(5, 3, 300, 0.05)
    base = params(3, match_threshold=0.7)
    small = params(3, match_threshold=0.7, memory_budget_bytes=2**20)
    a = run_in_process(tables, base)
    b = run_in_process(tables, small, spill_dir=tmp_path)
    assert groups_of(a.matches) == groups_of(b.matches) != set()  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir()), "the spill folders are removed when the run ends"


@pytest.mark.parametrize("cap", [None, 2])
def test_pieces_hold_every_candidate_pair_once_per_block(cap: int | None) -> None:
    tables = subset_tables(11, 2, 80, 0.05)
    keys = [new_pseudonyms(len(t.record_ids)) for t in tables]
    plan = PairPlan(tables[0].block_digests, tables[1].block_digests, keys[0], keys[1], cap)
    whole = pair_candidates(tables[0].block_digests, tables[1].block_digests, keys[0], keys[1], cap)
    for size in (1, 7, 100, 10**6):
        pieces = list(plan.pieces(size))
        rows = np.concatenate(pieces)
        assert rows.shape[0] == plan.total
        if cap is None:
            assert max(len(x) for x in pieces) <= max(size, int(plan.nb.max()))
        assert {tuple(r) for r in rows.tolist()} == {tuple(r) for r in whole.tolist()}
    if cap is None:
        assert plan.uncapped == plan.total and 0 < plan.largest <= plan.total
    else:
        assert plan.uncapped > plan.total


def test_ring_rows_must_name_two_known_records() -> None:
    tables = subset_tables(2, 3, 30, 0.05)
    engines = engines_after_compare(tables, params(3))
    start = engines[0].ring_start()
    assert len(start) > 0
    three = start.candidates[:1].copy()
    three[0, :] = engines[1].record_pseudonyms[engines[1].record_pseudonyms != 0][0]
    bad = RingMessage(0, three, start.c_masked[:1], start.x_masked[:1])
    with pytest.raises(RingError, match="exactly two records"):
        engines[1].ring_step(bad)


def test_results_with_inconsistent_groups_are_refused() -> None:
    tables = subset_tables(2, 3, 30, 0.05)
    engines = engines_after_compare(tables, params(3, match_threshold=0.6))
    msg = engines[0].ring_start()
    for e in engines[1:]:
        msg = e.ring_step(msg)
    engines[0].ring_finish(msg)
    good = next(engines[0].result_chunks(1))
    assert isinstance(good, GroupResults) and good.linkage_ids.size > 0
    bad_size = GroupResults(
        1,
        good.linkage_ids,
        good.similarities,
        good.pseudonyms,
        good.group_sizes + np.uint64(1),
        good.group_parties,
    )
    not_member = GroupResults(
        1,
        good.linkage_ids,
        good.similarities,
        good.pseudonyms,
        good.group_sizes,
        good.group_parties & ~np.uint64(2),
    )
    for bad in (bad_size, not_member):
        with pytest.raises(ResultsError, match="inconsistent"):
            engines[1].receive_results_chunk(bad)
    engines[1].receive_results_chunk(good)
    engines[1].results_end()
    rows = list(engines[1].resolved_rows(engines[1].received_results()))
    assert len(rows) == good.linkage_ids.size
    for e in engines:
        e.close()


def test_threshold_boundary_pair_matches_through_the_engines() -> None:
    a = np.zeros((1, 120), np.uint8)
    b = np.zeros((1, 120), np.uint8)
    a[0, [0, 1, 2, 3, 70]] = 1
    b[0, [0, 1, 2, 3, 71]] = 1  # c = 4, x = 10: Dice exactly 0.8
    dig = np.array([[5]], np.uint64)
    tables = [
        EncodedRecords(("a",), pack_rows(a), 120, dig),
        EncodedRecords(("b",), pack_rows(b), 120, dig),
    ]
    # a pair at exactly s_t (guarded's weak band, which does not apply at P = 2)
    run = run_in_process(tables, params(2, solver="greedy"))
    assert groups_of(run.matches) == {(((0, "a"), (1, "b")), 0.8, 2, ("p0", "p1"))}  # type: ignore[arg-type]


@pytest.mark.parametrize("solver", ["guarded", "weakest-link"])
def test_all_pairs_of_two_parties_equal_the_oracle(
    solver: str,
    tmp_path,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """No blocking at P = 2 (one block of every record) with a high fill, so most pairs match (as
    FEBRL4 at s_t 0.8): at a threshold some pairs reach exactly (boundary, ties), in ring chunks
    of ~100 rows, with 1 kernel thread and room for everything, and with 2 threads and a 1 MiB
    budget (survivors, masks and ring rows spilled; the solver's order refused into its store is
    tested in test_components), the groups are the oracle's (at P = 2 every rule is one-to-one
    greedy)."""
    from party.protocol import engine as engine_module

    rng = np.random.default_rng(21)
    bits = 128
    base = (rng.random((200, bits)) < 0.8).astype(np.uint8)
    tables = []
    for j in range(2):
        at = np.flatnonzero(rng.random(200) < 0.7)
        noise = (rng.random((at.size, bits)) < 0.05).astype(np.uint8)
        ids = tuple(f"p{j}e{e}" for e in at.tolist())
        tables.append(
            EncodedRecords(
                ids, pack_rows(base[at] ^ noise), bits, np.full((at.size, 1), 7, np.uint64)
            )
        )
    every = oracle_pairs(tables, params(2, filter_bits=bits, match_threshold=0.0))
    assert len(every) == len(tables[0].record_ids) * len(tables[1].record_ids)
    values = sorted({d for *_, d in every})
    s_t = values[len(values) // 4]  # a Dice value that pairs have exactly
    at_s_t = sum(1 for *_, d in every if d == s_t)
    assert at_s_t > 1 and sum(1 for *_, d in every if d >= s_t) > len(every) // 2
    monkeypatch.setattr(engine_module, "CHUNK_BYTES", 4096)
    for workers, budget in ((1, 1 << 30), (2, 1 << 20)):
        prm = params(
            2,
            filter_bits=bits,
            match_threshold=s_t,
            solver=solver,
            memory_budget_bytes=budget,
        )
        run = run_in_process(tables, prm, workers=workers, spill_dir=tmp_path)
        got = groups_of(run.matches)  # type: ignore[arg-type]
        assert got == expected(tables, prm, run.pseudonyms)
        assert len(got) > 100 and run.metrics.above_threshold > len(every) // 2
        assert run.metrics.comparison[0].candidate_sets == len(every)


def _seeded(seed: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return lambda n: rng.bytes(n)


@pytest.mark.parametrize("refused", [False, True])
def test_ring_rows_naming_an_unknown_pseudonym_are_refused(refused: bool) -> None:
    """Hash tables of the known pseudonyms, or the binary search when the gauge refused them."""
    tables = subset_tables(2, 3, 30, 0.05)
    engines = engines_after_compare(tables, params(3))
    for e in engines:
        e._known_tables_refused = refused
    start = engines[0].ring_start()
    bad = start.candidates.copy()
    col = int(np.flatnonzero(bad[-1])[-1])  # a column naming a record
    bad[-1, col] = np.uint64(12345)
    order = np.lexsort(bad.T[::-1])
    forged = RingMessage(0, bad[order], start.c_masked[order], start.x_masked[order])
    with pytest.raises(RingError, match=f"unknown pseudonym of party {col}"):
        engines[1].ring_step(forged)


def test_a_ring_chunk_refused_for_an_unknown_pseudonym_changes_nothing() -> None:
    """Only the rows a party does not hold are looked up; refusing one gives the survivors'
    cursor its rows back, so the genuine message then passes exactly as on a fresh engine."""
    tables = subset_tables(2, 3, 30, 0.05)
    runs = []
    for forge in (False, True):
        engines = engines_after_compare(tables, params(3), random_bytes=_seeded(3))
        start = engines[0].ring_start()
        if forge:
            bad = start.candidates.copy()
            col = int(np.flatnonzero(bad[-1])[-1])
            bad[-1, col] = np.uint64(12345)
            order = np.lexsort(bad.T[::-1])
            forged = RingMessage(0, bad[order], start.c_masked[order], start.x_masked[order])
            with pytest.raises(RingError, match="unknown pseudonym"):
                engines[1].ring_step_feed(forged)
        engines[1].ring_step_feed(start)
        engines[1].ring_step_end()
        out = list(engines[1].ring_out_chunks())
        runs.append(
            [(m.candidates.tolist(), m.c_masked.tolist(), m.x_masked.tolist()) for m in out]
        )
    assert runs[0] == runs[1] and len(runs[0][0][0]) > 0


def test_pseudonym_tables_and_binary_search_give_the_same_ring() -> None:
    tables = subset_tables(3, 3, 40, 0.06)
    prm = params(3, match_threshold=0.6)
    runs = []
    for refused in (False, True):
        engines = engines_after_compare(tables, prm, random_bytes=_seeded(5))
        for e in engines:
            e._known_tables_refused = refused
        msg = engines[0].ring_start()
        for e in engines[1:]:
            msg = e.ring_step(msg)
        cls = engines[0].ring_finish(msg)
        runs.append((cls.candidates.tolist(), cls.similarities.tolist()))
        assert all(not e._known_lookups for e in engines), "freed when the ring ends"
        assert all(e.resident_bytes().get("pseudonym lookup tables", 0) == 0 for e in engines)
        for e in engines:
            e.close()
    assert runs[0] == runs[1] and runs[0][0], "the same matched pairs and Dice, and some"


def _survivor_rows(engine) -> np.ndarray:  # type: ignore[no-untyped-def]
    parts = list(engine._survivors.chunks(1 << 16))
    return np.concatenate(parts) if parts else np.zeros((0, engine.parties + 1), np.uint64)


@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.6, 4.0])
def test_survivors_merged_in_order_whatever_the_gauge_grants(  # type: ignore[no-untyped-def]
    p: int, fraction: float, tmp_path, monkeypatch
) -> None:
    """The kept rows of each party with its partners, merged into the store's order (no sort at
    the end), are the same rows in the same order when the gauge grants only ``fraction`` of
    their bytes: refused their wait in memory from the start (0) or part of the way through
    (the rows held so far move to stores of each partner's rows, spilled in order and merged
    back a row at a time, ties of a's pseudonym across the steps); the survivor store stays
    ordered (no sort) either way."""
    import random

    import party.protocol.pair_engine as pair_engine
    from party.protocol.pair_engine import PairEngine
    from party.protocol.spill import LocalGauge, RowStore

    waited: list[int] = []  # rows appended to the partners' stores

    class Counted(RowStore):
        def append(self, rows: np.ndarray, *, increasing: bool = False) -> None:
            waited.append(int(rows.shape[0]))
            super().append(rows, increasing=increasing)

    monkeypatch.setattr(pair_engine, "MERGE_BLOCK_ROWS", 1)
    monkeypatch.setattr(pair_engine, "RowStore", Counted)
    tables = subset_tables(21 + p, p, 200, 0.05)
    prm = params(p, segment_threshold=0.5)

    def engines(grant: int | None) -> list[PairEngine]:
        rng = random.Random(5)  # the same pseudonyms in both runs
        es = [
            PairEngine(i, prm, t, random_bytes=rng.randbytes, spill_dir=tmp_path)
            for i, t in enumerate(tables)
        ]
        exchange_in_process(es)
        for e in es:
            if grant is not None:
                e._gauge = LocalGauge(grant)  # grants up to that many bytes, then refuses
            e.compare()
        return es

    merged = engines(None)
    need = max(_survivor_rows(x).nbytes for x in merged)
    assert not waited
    refused = engines(int(fraction * need))
    assert bool(waited) == (fraction < 1)
    for x, y in zip(merged, refused, strict=True):
        rows = _survivor_rows(x)
        assert x._survivors is not None and y._survivors is not None
        assert x._survivors.ordered and not x._survivors.spilled  # kept without a sort
        assert y._survivors.ordered  # appended in order, spilled or not: no sort
        assert rows.shape[0] > 0 and np.array_equal(rows, _survivor_rows(y))
        assert [tuple(r) for r in rows[:, :p].tolist()] == sorted(
            {tuple(r) for r in rows[:, :p].tolist()}
        )
        assert x.comparison_stats is not None and y.comparison_stats is not None
        assert x.comparison_stats.survivors_with_duplicates == (
            y.comparison_stats.survivors_with_duplicates
        )
        x.close()
        y.close()


@pytest.mark.parametrize("refuse_at", ["never", "start", "add"])
def test_a_solver_refused_while_the_ring_returns_solves_at_the_end(
    refuse_at: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The initiator hands each returning chunk's matched pairs to the group solver at once; when
    the budget refuses that (at the solver's start or while a chunk is added), everything it held
    is given back and the groups are solved from the matches store at the end, the same."""
    from party.protocol import pair_engine
    from party.protocol.errors import MemoryBudgetError

    tables = subset_tables(5, 3, 200, 0.05)
    prm = params(3, match_threshold=0.7)
    want = groups_of(run_in_process(tables, prm).matches)  # type: ignore[arg-type]
    assert want
    calls: list[str] = []
    real = pair_engine.StreamedSolver

    class Refusing(real):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            calls.append("start")
            if refuse_at == "start" and calls.count("start") == 1:
                raise MemoryBudgetError("refused")
            super().__init__(*args, **kwargs)

        def add(self, ends: np.ndarray, sims: np.ndarray) -> None:
            calls.append("add")
            super().add(ends, sims)
            if refuse_at == "add" and calls.count("add") == 1:
                raise MemoryBudgetError("refused")

    monkeypatch.setattr(pair_engine, "StreamedSolver", Refusing)
    got = groups_of(run_in_process(tables, prm).matches)  # type: ignore[arg-type]
    assert got == want
    if refuse_at == "never":  # one solver, fed as the ring returned
        assert calls.count("start") == 1 and "add" in calls
        return
    assert calls.count("start") == 2  # refused early, then the solver of the end
    assert "add" in calls[calls.index("start", 1) :]  # it took the pairs from the store


@pytest.mark.parametrize(
    "case", ["many blocks", "one row per block", "one block", "no shared block", "ties"]
)
@pytest.mark.parametrize("p", [2, 3, 4])
def test_survivors_on_two_threads_equal_one_thread(case: str, p: int, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every threaded step of the comparison (segments' popcounts, block indexes, the plans' pass
    over the blocks, the pair kernel's ranges, the partner merge) handed even the smallest work:
    the same survivor rows in the same order and the same stats as one thread. Cases: many
    blocks, most blocks holding one row of each party (an entity's own digest beside a coarse
    one: the pair kernel's one-pair blocks, pairs found in several blocks), every record in one
    block, no block shared by two parties (nothing to compare), and ties (a few distinct
    filters: many pairs with equal counts)."""
    import random

    from party.encoding.records import EncodedRecords
    from party.protocol import kernel as kernel_module
    from party.protocol import pairwise as pairwise_module
    from party.protocol import threads as threads_module
    from party.protocol.pair_engine import PairEngine

    monkeypatch.setattr(pairwise_module, "PARALLEL_MIN_PAIRS", 1)
    monkeypatch.setattr(kernel_module, "PARALLEL_MIN_PAIRS", 1)
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORDS", 1)
    tables = subset_tables(40 + p, p, 160, 0.05)
    if case == "one row per block":
        for j, t in enumerate(tables):
            dig = t.block_digests.copy()
            entity = np.array([int(r.split("e")[1]) for r in t.record_ids], dtype=np.uint64)
            dig[:, 0] = 100 + entity  # one row of each party holding the entity
            tables[j] = EncodedRecords(t.record_ids, t.filters, t.filter_bits, dig)
    elif case != "many blocks":
        changed = []
        for j, t in enumerate(tables):
            dig = np.zeros_like(t.block_digests)
            filters = t.filters
            if case in ("one block", "ties"):
                dig[:, 0] = 5
            else:
                dig[:, 0] = 1000 * (j + 1) + np.arange(dig.shape[0])  # this party's own
            if case == "ties":
                filters = filters[np.arange(filters.shape[0]) % 3]
            changed.append(EncodedRecords(t.record_ids, filters, t.filter_bits, dig))
        tables = changed
    prm = params(p, segment_threshold=0.5)

    def compared(workers: int) -> list[PairEngine]:
        rng = random.Random(7)  # the same pseudonyms for every number of threads
        es = engines_after_compare(tables, prm, random_bytes=rng.randbytes, workers=workers)
        return cast("list[PairEngine]", es)

    one, two = compared(1), compared(2)
    for x, y in zip(one, two, strict=True):
        rows = _survivor_rows(x)
        assert np.array_equal(rows, _survivor_rows(y))
        assert x._survivors is not None and x._survivors.ordered
        sx, sy = x.comparison_stats, y.comparison_stats
        assert sx is not None and sy is not None
        for field in (
            "candidate_sets",
            "candidate_sets_uncapped",
            "largest_block_sets",
            "survivors",
            "survivors_with_duplicates",
        ):
            assert getattr(sx, field) == getattr(sy, field), field
        if case == "no shared block":
            assert rows.shape[0] == 0 and sx.candidate_sets == 0
        else:
            assert rows.shape[0] > 0
        x.close()
        y.close()


def _result_rows(engine) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """The initiator's result rows of every party, as arrays (columns as sent)."""
    out = []
    for q in range(engine.parties):
        cols = [engine._result_columns(r) for r in engine.result_chunks(q)]
        out.append(np.concatenate(cols))
    return out


@pytest.mark.parametrize(
    "case", ["many chunks", "large chunks", "no match", "ties", "refused rows"]
)
def test_pairs_kept_on_the_keeper_thread_equal_one_thread(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With two kernel threads the initiator keeps each returning chunk's matched pairs on its
    keeper thread while it classifies the next: the same counts and result rows, byte for byte,
    as one thread. Cases: many returning chunks, a few large ones, no pair above the threshold, ties (a few
    distinct filters: many equal Dice), and the gauge refusing the rows in flight (kept in the
    calling thread)."""
    import random

    from party.encoding.records import EncodedRecords
    from party.protocol import engine as engine_module
    from party.protocol.driver import ring_in_process
    from party.protocol.pair_engine import PairEngine

    # a few rows per chunk, or as many as the stores' chunks hold
    monkeypatch.setattr(engine_module, "CHUNK_BYTES", 2**30 if case == "large chunks" else 256)
    tables = subset_tables(11, 3, 160, 0.05)
    if case == "ties":
        tables = [
            EncodedRecords(
                t.record_ids,
                t.filters[np.arange(len(t.record_ids)) % 3],
                t.filter_bits,
                t.block_digests,
            )
            for t in tables
        ]
    prm = params(3, segment_threshold=0.5, match_threshold=1.0 if case == "no match" else 0.7)
    on_keeper: list[int] = []
    real = PairEngine._keep_held

    def counted(self: PairEngine, rows: np.ndarray) -> None:
        on_keeper.append(rows.shape[0])
        real(self, rows)

    monkeypatch.setattr(PairEngine, "_keep_held", counted)

    def finished(workers: int) -> tuple[tuple[int, int, int], list[np.ndarray], int]:
        rng = random.Random(3)  # the same pseudonyms and masks for every number of threads
        es = cast(
            "list[PairEngine]",
            engines_after_compare(tables, prm, random_bytes=rng.randbytes, workers=workers),
        )
        if case == "refused rows":
            monkeypatch.setattr(es[0]._gauge, "try_reserve", lambda nbytes: False)
        try:
            counts = ring_in_process(es)
            assert es[0]._keeper is None and es[0]._keeping is None  # ended with the ring
            return counts, _result_rows(es[0]), es[0].group_count
        finally:
            for e in es:
                e.close()

    one = finished(1)
    assert not on_keeper
    two = finished(2)
    if case == "refused rows":
        assert not on_keeper
    elif case == "large chunks":
        assert on_keeper
    else:
        assert len(on_keeper) > 5
    assert one[0] == two[0] and one[2] == two[2]
    for x, y in zip(one[1], two[1], strict=True):
        assert np.array_equal(x, y)
    if case == "no match":
        assert one[0][1] == 0 and one[2] == 0
    else:
        assert one[0][1] > 0 and one[2] > 0


def test_a_keeper_failure_fails_the_ring_and_close_ends_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure while the keeper thread keeps a chunk is raised by the next feed or by the end
    (never lost), and ``close`` ends the thread."""
    import random

    from party.protocol import engine as engine_module
    from party.protocol import pair_engine
    from party.protocol.driver import ring_in_process
    from party.protocol.errors import ProtocolError

    monkeypatch.setattr(engine_module, "CHUNK_BYTES", 256)
    tables = subset_tables(11, 3, 160, 0.05)
    prm = params(3, segment_threshold=0.5, match_threshold=0.7)
    rng = random.Random(3)
    es = engines_after_compare(tables, prm, random_bytes=rng.randbytes, workers=2)
    real = pair_engine.PartyEngine._keep_above
    calls = []

    def failing(self, rows):  # type: ignore[no-untyped-def]
        calls.append(rows.shape[0])
        if len(calls) == 2:
            raise ProtocolError("kept badly")
        real(self, rows)

    monkeypatch.setattr(pair_engine.PartyEngine, "_keep_above", failing)
    try:
        with pytest.raises(ProtocolError, match="kept badly"):
            ring_in_process(es)
    finally:
        for e in es:
            e.close()
    assert len(calls) >= 2
    initiator = cast("pair_engine.PairEngine", es[0])
    assert initiator._keeper is None and initiator._keeping is None


@pytest.mark.parametrize("block_rows", [1, 2, 3, 64])
@pytest.mark.parametrize("held", [0, 96, 1 << 20])
def test_partner_rows_merged_from_stores_in_lexicographic_order(
    block_rows: int, held: int, tmp_path
) -> None:
    """Party 0's kept rows with partners 1, 2 and 3, each partner's in key order in a store
    (``held`` bytes in memory, the rest spilled), merged a few rows at a time: the rows sorted
    by their pseudonym columns (written here as a plain sort), a's pseudonyms repeating within a
    partner and across partners, on both sides of every block's end."""
    from party.protocol.pair_engine import _merged_from_stores
    from party.protocol.spill import LocalGauge, RowStore, SpillFolder

    rng = np.random.default_rng(block_rows + held)
    p = 4
    runs = []
    for b in (1, 2, 3):
        a_col = np.sort(rng.integers(1, 12, 40)).astype(np.uint64)  # many repeats of a's
        rows = np.zeros((40, p + 1), dtype=np.uint64)
        rows[:, 0] = a_col
        rows[:, b] = rng.permutation(np.arange(1, 41, dtype=np.uint64))
        rows[:, p] = rng.integers(0, 99, 40).astype(np.uint64)
        order = sorted(range(40), key=lambda i: (int(rows[i, 0]), int(rows[i, b])))
        runs.append(rows[order])
    folder = SpillFolder(tmp_path)
    stores = []
    for run in runs:
        store = RowStore(p + 1, gauge=LocalGauge(held), folder=folder, name="partner")
        for piece in np.array_split(run, 5):
            store.append(piece)
        stores.append(store)
    got = np.concatenate(list(_merged_from_stores(stores, 0, block_rows)))
    want = sorted((tuple(int(x) for x in r) for run in runs for r in run), key=lambda r: r[:p])
    assert [tuple(int(x) for x in r) for r in got] == want
    for store in stores:
        store.close()
    folder.close()
