"""The comparison (target all) on Dask workers (real worker processes, TLS) equals the threads."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

from party.cluster import ClusterError
from party.cluster_blocks import ClusterBlocks
from party.encoding.records import EncodedRecords
from party.protocol.block_ranges import FastIndex, FastInputs
from party.protocol.engine import PartyEngine
from party.protocol.errors import ComparisonCancelled
from proto import common_pb2
from tests.integration.conftest import expected_sets, network_sets, parameters, run_and_wait
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
from tests.unit.protocol.helpers import linked_tables
from tests.unit.protocol.test_any_target import params

S = common_pb2.Stage

STATS = (
    "blocks",
    "sub_blocked_blocks",
    "candidate_sets",
    "candidate_sets_uncapped",
    "largest_block_sets",
    "join_order",
    "evaluated_per_stage",
    "survived_per_stage",
    "survivors",
    "survivors_with_duplicates",
)


def _tables(case: str, p: int) -> list[EncodedRecords]:
    """P parties' records, 70 entities at all of them (bit noise), three blocking passes of
    small blocks (a set found in several). "one big block": every record also in one block of
    the first pass (more sets than a fast block holds: the node's own)."""
    rng = np.random.default_rng(40 + p)
    tables = linked_tables(rng, p, 90, 60 * p, shared=70, blocks=30, keys=3, flip=0.04)
    for t in tables:
        t.block_digests[:, 1:] += np.arange(1, 3, dtype=np.uint64) * 1000  # a pass's own blocks
        if case == "one big block":
            t.block_digests[:, 0] = 5
    return tables


def _exchanged(tables: list[EncodedRecords], cap: int | None = None) -> list[PartyEngine]:
    prm = params(len(tables), target="all", segment_threshold=0.5, max_block_size=cap)
    return exchanged(PartyEngine, tables, prm)


@pytest.mark.parametrize(
    ("case", "p", "cap"),
    [
        ("small blocks", 2, None),
        ("small blocks", 3, None),
        ("small blocks", 4, None),
        ("small blocks", 3, 4),  # sub-blocked blocks beside fast ones: the node's own part
        ("one big block", 3, None),
    ],
)
@pytest.mark.parametrize("inputs", INPUTS)
def test_blocks_on_local_workers_equal_the_threads(  # type: ignore[no-untyped-def]
    client, case: str, p: int, cap, inputs: str, tmp_path, monkeypatch
) -> None:
    """The fast blocks in ranges on two workers (several ranges per worker), the inputs sent
    through Dask, in a file the workers map, or through Dask after the file found no room or
    the budget refused it: the same survivor rows and the same stats (stage counts included) as
    one kernel thread; nothing is left on the workers afterwards (no data, no mapped file, no
    reservation)."""
    tables = _tables(case, p)
    want = compared(_exchanged(tables, cap))
    folder, budget = inputs_case(inputs, tmp_path, monkeypatch)
    made: list[ClusterBlocks] = []

    def remote(_engine: PartyEngine) -> ClusterBlocks:
        # with mapped files, one task at a time (``gated``: as 4 workers on 2 cores would be)
        slots = 1 if inputs == "mapped files" else None
        made.append(
            ClusterBlocks(client, ranges_per_worker=3, folder=folder, memory=budget, slots=slots)
        )
        return made[-1]

    got = compared(_exchanged(tables, cap), remote)
    stats = [e.comparison_stats for e in want if e.comparison_stats is not None]
    if cap is not None:
        assert all(s.sub_blocked_blocks > 0 for s in stats)
    if case == "one big block":
        assert all(s.largest_block_sets > 4096 for s in stats)
    equal_engines(want, got, STATS)
    check_inputs_after(inputs, list(made), client, tmp_path, budget)


def _fresh(tables: list[EncodedRecords]) -> PartyEngine:
    """Party 0's engine after the exchange, before its comparison."""
    engines = _exchanged(tables)
    for e in engines[1:]:
        e.close()
    return engines[0]


def test_a_cancelled_comparison_stops_and_frees_the_workers(client) -> None:  # type: ignore[no-untyped-def]
    e = _fresh(_tables("small blocks", 3))
    cancel = threading.Event()
    cancel.set()
    with ClusterBlocks(client) as blocks, pytest.raises(ComparisonCancelled):
        e.compare(cancel=cancel, remote=blocks)
    assert blocks.tasks > 0  # submitted before the cancel was seen
    assert workers_emptied(client)
    e.compare()  # a cancelled comparison may run again (here on the threads)
    assert e.comparison_stats is not None and e.comparison_stats.survivors > 0
    e.close()


def test_a_failed_task_is_a_cluster_error_naming_the_worker_not_the_data(client) -> None:  # type: ignore[no-untyped-def]
    """A range the worker cannot compare (segments and popcounts of different lengths) fails
    the comparison with the worker's address and the error's type only, and frees them."""
    keys = (np.arange(1, 5, dtype=np.uint64),) * 2
    segs = (np.zeros((4, 1), np.uint64),) * 2
    pops = (np.zeros(3, np.int64),) * 2  # one short
    inputs = FastInputs(segs, pops, keys, np.arange(2, dtype=np.int64), 64, 0.5)
    starts = (np.array([0, 4], np.int64),) * 2
    index = FastIndex(starts, (np.arange(4, dtype=np.int64),) * 2, np.ones(1, np.bool_))
    with ClusterBlocks(client) as blocks:
        blocks.submit(inputs, index, [(0, 1)])
        with pytest.raises(ClusterError, match=r"range 0 of blocks failed on worker tls://") as err:
            list(blocks.results())
        assert "Error)" in str(err.value)
    assert workers_emptied(client)


@pytest.mark.slow
def test_the_partys_own_tls_scheduler_compares_like_the_threads(own_scheduler) -> None:  # type: ignore[no-untyped-def]
    """Workers started as processes of their own, with the party's CA: the same rows."""
    tables = _tables("small blocks", 3)
    want = compared(_exchanged(tables))
    got = compared_on_own_scheduler(own_scheduler, _exchanged(tables), ClusterBlocks)
    equal_engines(want, got, STATS)


def test_nodes_on_their_embedded_dask_clusters_equal_the_oracle(make_cluster) -> None:  # type: ignore[no-untyped-def]
    """Every node with ``[cluster] scheduler = "local"`` and target all: it encodes and compares
    (the fast blocks in ranges) on Dask workers of its own; the sets equal the in-process
    driver's and the oracle's."""
    cluster = make_cluster(3, 200, start=False)
    for name in cluster.parties:
        cluster.nodes[name].env["PPRL_CLUSTER_SCHEDULER"] = "local"
        cluster.nodes[name].env["PPRL_WORKERS"] = "2"
    cluster.start()
    params = parameters(
        cluster, name="p-all-dask.json", match_threshold=0.75, segment_threshold=0.5
    )
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_sets(cluster, status.run_id)
    inproc, oracle = expected_sets(cluster, params)
    assert got and got == inproc
    assert got <= oracle  # s_m > 0 may only lose matches
    for name in cluster.parties:  # each node's fast blocks went to its workers
        text = cluster.log_text(name)
        assert re.search(r"compared on 2 Dask workers: [1-9]\d* tasks", text), name


@pytest.mark.slow
@pytest.mark.parametrize("mapped", [True, False])
def test_a_lost_worker_is_replaced_or_a_clear_error(mapped: bool, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A worker killed after the ranges were sent: with the mapped file (the embedded cluster)
    its tasks run again on the other worker and the rows equal the threads'; through Dask the
    ranges it held are lost: a ClusterError, not a hang."""
    tables = _tables("small blocks", 3)
    want = survivor_rows(compared(_exchanged(tables))[0])
    folder = str(tmp_path) if mapped else None
    compare_losing_a_worker(ClusterBlocks, _fresh(tables), want, folder, recovers=mapped)
