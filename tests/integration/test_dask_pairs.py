"""The comparison (target any) on Dask workers (real worker processes, TLS) equals the threads."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from party.cluster import ClusterError
from party.cluster_pairs import ClusterPairs, MappedSide
from party.cluster_tasks import Mapped
from party.config import ClusterConfig
from party.encoding.bits import popcount_rows
from party.encoding.records import EncodedRecords
from party.protocol.blocks import BlockIndex
from party.protocol.errors import ComparisonCancelled
from party.protocol.kernel import threshold_table
from party.protocol.pair_engine import PairEngine
from party.protocol.pairwise import IndexedSide, PairPlan
from party.protocol.spill import LocalGauge
from tests.integration.dask_support import (
    INPUTS,
    check_inputs_after,
    compare_losing_a_worker,
    compared,
    compared_on_own_scheduler,
    equal_engines,
    exchanged,
    inputs_case,
    survivor_rows,
    workers_emptied,
)
from tests.unit.protocol.test_any_target import params, subset_tables

STATS = (
    "candidate_sets",
    "candidate_sets_uncapped",
    "largest_block_sets",
    "survivors",
    "survivors_with_duplicates",
)


def _tables(case: str, p: int) -> list[EncodedRecords]:
    """Entities at random subsets of the parties. "many blocks": an entity's own block (one row
    of each party) beside three coarse ones (many pairs, found in several blocks); "one block":
    every record in one block, whose keys go to every bucket of a's rows."""
    out = []
    for t in subset_tables(60 + p, p, 200, 0.05):
        dig = t.block_digests.copy()
        if case == "one block":
            dig[:] = 5
        else:
            dig[:, 0] = [100 + int(r.split("e")[1]) for r in t.record_ids]
        out.append(EncodedRecords(t.record_ids, t.filters, t.filter_bits, dig))
    return out


def _exchanged(tables: list[EncodedRecords], cap: int | None = None) -> list[PairEngine]:
    prm = params(len(tables), segment_threshold=0.5, max_block_size=cap)
    return exchanged(PairEngine, tables, prm)


def _fresh(tables: list[EncodedRecords]) -> PairEngine:
    """Party 0's engine after the exchange, before its comparison."""
    engines = _exchanged(tables)
    for e in engines[1:]:
        e.close()
    return engines[0]


@pytest.mark.parametrize(
    ("case", "p", "cap"),
    [
        ("many blocks", 2, None),
        ("many blocks", 3, None),
        ("many blocks", 4, None),
        ("one block", 3, None),
        ("many blocks", 3, 4),  # sub-blocked blocks beside whole ones: the node's own part
    ],
)
@pytest.mark.parametrize("inputs", INPUTS)
def test_pairs_on_local_workers_equal_the_threads(  # type: ignore[no-untyped-def]
    client, case: str, p: int, cap, inputs: str, tmp_path, monkeypatch
) -> None:
    """Every pair of parties in ranges of blocks and buckets of a's rows on two workers (several
    per worker), the inputs sent through Dask, in files the workers map, or through Dask after the files
    found no room or the budget refused them: the same survivor rows in the same order and the
    same stats as one kernel thread; nothing is left on the workers afterwards (no data, no
    mapped file, no reservation)."""
    tables = _tables(case, p)
    want = compared(_exchanged(tables, cap))
    folder, budget = inputs_case(inputs, tmp_path, monkeypatch)
    made: list[ClusterPairs] = []

    def remote(_engine: PairEngine) -> ClusterPairs:
        # with mapped files, one task at a time (``gated``: as 4 workers on 2 cores would be)
        slots = 1 if inputs == "mapped files" else None
        made.append(
            ClusterPairs(client, ranges_per_worker=3, folder=folder, memory=budget, slots=slots)
        )
        return made[-1]

    got = compared(_exchanged(tables, cap), remote)
    if cap is not None:
        assert any(
            e.comparison_stats.candidate_sets_uncapped > e.comparison_stats.candidate_sets
            for e in want
        )
    equal_engines(want, got, STATS)
    check_inputs_after(inputs, list(made), client, tmp_path, budget)


def _window(seconds: float) -> tuple[float, float]:
    start = time.time()
    time.sleep(seconds)
    return start, time.time()


@pytest.mark.parametrize("slots", [1, 2])
def test_tasks_on_an_embedded_cluster_take_slots(client, slots: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With fewer slots than workers (the embedded cluster on fewer cores), the tasks of two
    workers run one at a time; with as many, at once (``slots`` is None: not gated); the slot
    files go with the comparison."""
    with ClusterPairs(client, folder=str(tmp_path), slots=slots) as tasks:
        assert tasks.slots == (1 if slots == 1 else None)
        futures = [tasks._submit(_window, 0.4)[1] for _ in range(2)]
        (s0, e0), (s1, e1) = sorted(f.result(timeout=30) for f in futures)
    overlap = e0 > s1
    assert overlap == (slots == 2)
    assert list(tmp_path.iterdir()) == []


def test_a_cancelled_comparison_stops_and_frees_the_workers(client) -> None:  # type: ignore[no-untyped-def]
    e = _fresh(_tables("many blocks", 3))
    cancel = threading.Event()
    cancel.set()
    with ClusterPairs(client) as pairs, pytest.raises(ComparisonCancelled):
        e.compare(cancel=cancel, remote=pairs)
    assert workers_emptied(client)
    e.close()


def _records(keys: np.ndarray, segments: np.ndarray, pops: np.ndarray) -> np.ndarray:
    """A party's records as the pair kernel reads them: segment words, popcount, pseudonym."""
    return np.column_stack([segments, pops, keys]).astype(np.uint64)


def test_a_failed_task_is_a_cluster_error_naming_the_worker_not_the_data(client) -> None:  # type: ignore[no-untyped-def]
    """A task the worker cannot run (here: a party count numba cannot type) fails the comparison
    with the worker's address and the error's type only, and frees the workers."""
    keys = np.arange(1, 5, dtype=np.uint64)
    segments, pops = np.zeros((4, 2), np.uint64), np.zeros(4, np.int64)
    index = BlockIndex(np.array([0, 4], np.int64), np.arange(4, dtype=np.int64))
    side = IndexedSide(0, _records(keys, segments, pops), index.starts, index.rows)
    plan = PairPlan.from_indexes(index, index, None)
    with ClusterPairs(client) as pairs:
        table = np.zeros(300, np.int64)
        pairs.submit((0, 1), plan, side, side, table, "three", 100)  # type: ignore[arg-type]
        with pytest.raises(ClusterError, match=r"parties 0 and 1 failed on worker tls://") as err:
            list(pairs.kept_pairs((0, 1)))
        assert "three" not in str(err.value) and "Error)" in str(err.value)
    assert workers_emptied(client)


def test_a_range_whose_key_file_cannot_be_written_sends_its_keys_through_dask(  # type: ignore[no-untyped-def]
    client, tmp_path
) -> None:
    """tmpfs fills after the room was checked: the ranges whose key files cannot be made (a
    folder in the way, as no room would) return their keys, and the buckets take them beside
    the other ranges' files: the rows of the threads."""
    tables = _tables("many blocks", 3)
    want = compared(_exchanged(tables))
    for k in range(0, 6, 2):  # every other range of the pair (0, 1): 2 workers x 3
        (tmp_path / f"keys-0-1-{k}").mkdir()

    def remote(_engine: PairEngine) -> ClusterPairs:
        return ClusterPairs(client, ranges_per_worker=3, folder=str(tmp_path))

    equal_engines(want, compared(_exchanged(tables), remote), STATS)
    assert workers_emptied(client)


@pytest.mark.parametrize("refused", ["rows", "index"])
def test_a_party_whose_second_file_finds_no_room_keeps_no_file(  # type: ignore[no-untyped-def]
    client, refused: str, tmp_path, monkeypatch
) -> None:
    """One of a party's two files (rows, index) finds no room: its inputs go through Dask and
    the other file is removed with its reservation, not held until the comparison ends."""
    write = Mapped.write

    def no_room_for(cls: type, folder: str, name: str, *args: object) -> Mapped:
        if name.startswith(refused):
            raise OSError(28, "No space left on device")
        return write(folder, name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Mapped, "write", classmethod(no_room_for))
    keys = np.arange(1, 9, dtype=np.uint64)
    segments = np.ones((8, 2), dtype=np.uint64)
    index = BlockIndex(np.array([0, 8], np.int64), np.arange(8, dtype=np.int64))
    records = _records(keys, segments, popcount_rows(segments))
    side = IndexedSide(0, records, index.starts, index.rows)
    budget = LocalGauge(1 << 30)
    with ClusterPairs(client, folder=str(tmp_path), memory=budget) as pairs:
        source = pairs._source(side)
        assert not isinstance(source, MappedSide)
        assert list(tmp_path.iterdir()) == [] and budget.held == 0
        assert pairs.mapped_bytes == 0


@pytest.mark.parametrize("files", [True, False])
def test_a_pairs_keys_are_dropped_once_its_rows_are_in(client, files: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """With two pairs submitted, taking the first pair's rows releases its keys (its ranges'
    futures cancelled; with files, the files removed and their reservation released) while the
    second pair's stay until its own rows are in (threshold 0: every pair of the two blocks
    is kept; 100 pairs a piece: 8 ranges, more than the workers' 2 x 2)."""
    rng = np.random.default_rng(5)
    keys = np.arange(1, 41, dtype=np.uint64)
    segments = rng.integers(0, 2**63, (40, 2)).astype(np.uint64)
    pops = popcount_rows(segments).astype(np.int64)
    index = BlockIndex(np.array([0, 20, 40], np.int64), np.arange(40, dtype=np.int64))
    records = _records(keys, segments, pops)
    sides = [IndexedSide(c, records, index.starts, index.rows) for c in range(3)]
    plan = PairPlan.from_indexes(index, index, None)
    table = threshold_table(2, 0.0, 256)  # keeps every pair: 2 blocks of 20 x 20
    budget = LocalGauge(1 << 30)
    folder = str(tmp_path) if files else None
    with ClusterPairs(client, folder=folder, memory=budget) as pairs:
        for pair in ((0, 1), (0, 2)):
            pairs.submit(pair, plan, sides[pair[0]], sides[pair[1]], table, 3, 100)
        first, second = (pairs._jobs[pair].between for pair in ((0, 1), (0, 2)))
        held = budget.held  # the inputs' files and both pairs' keys (files)
        rows = [r for found, _, _ in pairs.kept_pairs((0, 1)) for r in found]
        assert sum(r.shape[0] for r in rows) == 800
        assert all(f.status == "cancelled" for f in first)
        assert not any(f.status == "cancelled" for f in second)
        assert not list(tmp_path.glob("keys-0-1-*"))
        assert budget.held == held - (800 * 8 if files else 0)
        list(pairs.kept_pairs((0, 2)))
        assert not list(tmp_path.glob("keys-*"))
    assert budget.held == 0 and workers_emptied(client)


@pytest.mark.slow
def test_the_partys_own_tls_scheduler_compares_like_the_threads(own_scheduler) -> None:  # type: ignore[no-untyped-def]
    """Workers started as processes of their own, with the party's CA: the same rows."""
    tables = _tables("many blocks", 3)
    want = compared(_exchanged(tables))
    got = compared_on_own_scheduler(own_scheduler, _exchanged(tables), ClusterPairs)
    equal_engines(want, got, STATS)


@pytest.mark.slow
@pytest.mark.parametrize("mapped", [True, False])
def test_a_lost_worker_is_replaced_or_a_clear_error(mapped: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A worker killed after the tasks were sent: its tasks run again on the other worker and
    the rows equal the threads', with the inputs and keys in files (the embedded cluster) or
    through Dask (every party's inputs are on every worker)."""
    tables = _tables("many blocks", 3)
    want = survivor_rows(compared(_exchanged(tables))[0])
    folder = str(tmp_path) if mapped else None
    compare_losing_a_worker(ClusterPairs, _fresh(tables), want, folder, recovers=True)


def test_the_coordinator_gets_a_reason_without_the_partys_addresses(tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """The comparison on an unreachable scheduler: the error the node reports names no
    address; the party's log has the scheduler's."""
    from party.cluster_tasks import compare_on_cluster
    from party.synthetic.cluster import make_certs

    certs = tmp_path / "certs"
    make_certs(certs, ["node"])
    cfg = ClusterConfig(
        "tls://127.0.0.1:9", certs / "ca.pem", certs / "node.pem", certs / "node.key"
    )
    e = _fresh(_tables("many blocks", 2))
    with (
        caplog.at_level("ERROR", logger="party.cluster_tasks"),
        pytest.raises(
            ClusterError, match=r"^its comparison on the party's Dask cluster failed"
        ) as err,
    ):
        compare_on_cluster(ClusterPairs, e, cfg, connect_timeout=2)
    assert "127.0.0.1" not in str(err.value) and "tls://" not in str(err.value)
    assert "cannot reach the scheduler tls://127.0.0.1:9" in caplog.text
    e.close()
