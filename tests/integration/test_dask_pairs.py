"""The comparison (target any) on Dask workers (real worker processes, TLS) equals the threads."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from party.cluster import ClusterError, dask_client
from party.cluster_pairs import ClusterPairs
from party.cluster_tasks import Mapped, forget_mapped
from party.config import ClusterConfig
from party.encoding.records import EncodedRecords
from party.protocol.driver import exchange_in_process
from party.protocol.errors import ComparisonCancelled
from party.protocol.pair_engine import PairEngine
from party.protocol.pairwise import PairSide, PairTarget
from party.protocol.spill import LocalGauge
from tests.unit.protocol.test_any_target import params, subset_tables

STATS = (
    "candidate_sets",
    "candidate_sets_uncapped",
    "largest_block_sets",
    "survivors",
    "survivors_with_duplicates",
)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """An embedded cluster of two worker processes (TLS), shared by this module's tests."""
    with dask_client(ClusterConfig("local"), 2) as c:
        yield c


def _tables(case: str, p: int) -> list[EncodedRecords]:
    """Entities at random subsets of the parties. "many blocks": an entity's own block (one row
    of each party) beside three coarse ones (many pairs, found in several blocks); "one block":
    every record in one block, which every range of a's rows visits."""
    out = []
    for t in subset_tables(60 + p, p, 200, 0.05):
        dig = t.block_digests.copy()
        if case == "one block":
            dig[:] = 5
        else:
            dig[:, 0] = [100 + int(r.split("e")[1]) for r in t.record_ids]
        out.append(EncodedRecords(t.record_ids, t.filters, t.filter_bits, dig))
    return out


def _engines(tables: list[EncodedRecords], cap: int | None, remote: Any = None) -> list[PairEngine]:
    """Engines that exchanged segments and compared, on one kernel thread or on ``remote``."""
    engines = _exchanged(tables, cap)
    for e in engines:
        if remote is None:
            e.compare()
        else:
            with remote(e) as pairs:
                e.compare(remote=pairs)
    return engines


def _exchanged(tables: list[EncodedRecords], cap: int | None = None) -> list[PairEngine]:
    """Engines after the segment exchange (the same pseudonyms every time), on one thread."""
    rng = random.Random(11)
    prm = params(len(tables), segment_threshold=0.5, max_block_size=cap)
    engines = [
        PairEngine(i, prm, t, random_bytes=rng.randbytes, workers=1) for i, t in enumerate(tables)
    ]
    exchange_in_process(engines)
    return engines


def _rows(engine: PairEngine) -> np.ndarray:
    assert engine._survivors is not None
    parts = list(engine._survivors.chunks(1 << 16))
    return np.concatenate(parts) if parts else np.zeros((0, engine.parties + 1), np.uint64)


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
@pytest.mark.parametrize(
    "inputs", ["through Dask", "mapped files", "no room for files", "budget refuses files"]
)
def test_pairs_on_local_workers_equal_the_threads(  # type: ignore[no-untyped-def]
    client, case: str, p: int, cap, inputs: str, tmp_path, monkeypatch
) -> None:
    """Every pair of parties in ranges of a's rows on two workers (several ranges per worker),
    the inputs sent through Dask, in files the workers map, or through Dask after the files
    found no room: the same survivor rows in the same order and the same stats as one kernel
    thread; nothing is left on the workers afterwards (no data, no mapped file)."""
    tables = _tables(case, p)
    want = _engines(tables, cap)
    made: list[ClusterPairs] = []
    folder = None if inputs == "through Dask" else str(tmp_path)
    # the files' bytes are reserved on the node's budget while they exist
    budget = LocalGauge(0 if inputs == "budget refuses files" else 1 << 40)
    if inputs == "no room for files":

        def full(*_args: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(Mapped, "write", full)

    def remote(_engine: PairEngine) -> ClusterPairs:
        made.append(ClusterPairs(client, ranges_per_worker=3, folder=folder, memory=budget))
        return made[-1]

    got = _engines(tables, cap, remote)
    if cap is not None:
        assert any(s.candidate_sets_uncapped > s.candidate_sets for s in _stats(want))
    for x, y in zip(want, got, strict=True):
        rows = _rows(x)
        assert rows.shape[0] > 0
        assert np.array_equal(rows, _rows(y))
        sx, sy = x.comparison_stats, y.comparison_stats
        for field in STATS:
            assert getattr(sx, field) == getattr(sy, field), field
        x.close()
        y.close()
    assert all(pairs.sent_bytes > 0 and pairs.received_bytes > 0 for pairs in made)
    assert _workers_emptied(client)
    if inputs == "mapped files":  # files per party and role, mapped by the workers, then dropped
        assert all(pairs.mapped_bytes > 0 for pairs in made)
        assert budget.peak >= max(pairs.mapped_bytes for pairs in made)
        assert all(n == 0 for n in client.run(forget_mapped, folder).values())
    else:
        assert all(pairs.mapped_bytes == 0 for pairs in made)
    assert list(tmp_path.iterdir()) == []  # removed at the end
    assert budget.held == 0


def _workers_emptied(client: Any) -> bool:
    """The workers hold no data of this client's (cancelled futures are released
    asynchronously: waits up to a minute for it)."""
    deadline = time.monotonic() + 60
    while any(client.has_what().values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _stats(engines: list[PairEngine]) -> list[Any]:
    return [e.comparison_stats for e in engines]


def test_a_cancelled_comparison_stops_and_frees_the_workers(client) -> None:  # type: ignore[no-untyped-def]
    e = _fresh(_tables("many blocks", 3))
    cancel = threading.Event()
    cancel.set()
    with ClusterPairs(client) as pairs, pytest.raises(ComparisonCancelled):
        e.compare(cancel=cancel, remote=pairs)
    assert _workers_emptied(client)
    e.close()


def _fresh(tables: list[EncodedRecords]) -> PairEngine:
    """Party 0's engine after the exchange, before its comparison."""
    engines = _exchanged(tables)
    for e in engines[1:]:
        e.close()
    return engines[0]


def test_a_failed_task_is_a_cluster_error_naming_the_worker_not_the_data(client) -> None:  # type: ignore[no-untyped-def]
    """A task the worker cannot run (here: a party count numba cannot type) fails the comparison
    with the worker's address and the error's type only, and frees the workers."""
    keys = np.arange(1, 5, dtype=np.uint64)
    segments, pops = np.zeros((4, 2), np.uint64), np.zeros(4, np.int64)
    side = PairSide(0, keys, segments, pops, np.zeros((4, 1), np.int32))
    index = (np.array([0, 4], np.int64), np.arange(4, dtype=np.int64))
    target = PairTarget(1, keys, segments, pops, *index)
    with ClusterPairs(client) as pairs:
        table = np.zeros(300, np.int64)
        pairs.submit((0, 1), side, target, None, table, "three", 100)  # type: ignore[arg-type]
        with pytest.raises(ClusterError, match=r"parties 0 and 1 failed on worker tls://") as err:
            list(pairs.kept_pairs((0, 1)))
        assert "three" not in str(err.value) and "Error)" in str(err.value)
    assert _workers_emptied(client)


@pytest.mark.slow
def test_the_partys_own_tls_scheduler_compares_like_the_threads(own_scheduler) -> None:  # type: ignore[no-untyped-def]
    """Workers started as processes of their own, with the party's CA: the same rows."""
    tables = _tables("many blocks", 3)
    want = _engines(tables, None)
    with dask_client(own_scheduler, connect_timeout=120) as own:
        own.wait_for_workers(2, timeout=120)
        got = _engines(tables, None, lambda _e: ClusterPairs(own))
    for x, y in zip(want, got, strict=True):
        assert np.array_equal(_rows(x), _rows(y)) and _rows(x).shape[0] > 0
        x.close()
        y.close()


class _LosesAWorker(ClusterPairs):
    """ClusterPairs whose first worker dies once every pair is submitted, before any result."""

    lost = False

    def kept_pairs(self, pair, cancel=None):  # type: ignore[no-untyped-def]
        if not self.lost:
            self.lost = True
            with contextlib.suppress(Exception):  # the worker dies before it answers
                self.client.run(os._exit, 1, workers=[self.workers[0]])
        return super().kept_pairs(pair, cancel)


@pytest.mark.slow
@pytest.mark.parametrize("mapped", [True, False])
def test_a_lost_worker_is_replaced_or_a_clear_error(mapped: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A worker killed after the tasks were sent: with mapped files (the embedded cluster) its
    tasks run again on the other worker and the rows equal the threads'; through Dask the ranges
    it held are lost: a ClusterError, not a hang."""
    tables = _tables("many blocks", 3)
    want = _rows(_engines(tables, None)[0])
    e = _fresh(tables)
    with (
        dask_client(ClusterConfig("local"), 2) as own,
        _LosesAWorker(own, folder=str(tmp_path) if mapped else None) as pairs,
    ):
        if mapped:
            e.compare(remote=pairs)
            assert np.array_equal(_rows(e), want) and want.shape[0] > 0
        else:
            with pytest.raises(ClusterError, match="failed on worker"):
                e.compare(remote=pairs)
        assert pairs.lost
    e.close()
