"""Encoding on an embedded Dask LocalCluster (real worker processes, TLS) equals one process."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from party.cluster import (
    EMBEDDED_HEARTBEAT_S,
    ClusterError,
    WorkerUsage,
    dask_client,
    encode_csv_on_workers,
)
from party.cluster_waves import WaveLanes
from party.config import ClusterConfig
from party.encoding import encoder as encoder_module
from party.encoding.encoder import Encoder
from party.encoding.parallel import ParallelStats
from party.encoding.schema import parse_schema
from party.synthetic.cluster import make_certs
from party.synthetic.generator import generate

SECRET = bytes(range(50, 82))
SHIPPED = Path(__file__).resolve().parents[2] / "party" / "synthetic" / "data" / "schema.json"


def test_local_cluster_encodes_like_one_process(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(encoder_module, "CSV_BLOCK_BYTES", 32 * 1024)
    monkeypatch.setattr(WaveLanes, "RANGE_BLOCKS", 1)  # several ranges per worker
    path = tmp_path / "people.csv"
    generate(2, 3000, seed=9).tables[1].write_csv(path)
    schema = parse_schema(json.loads(SHIPPED.read_text()))
    ref, ref_report = Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")
    stats = ParallelStats()
    cpu: dict[str, WorkerUsage] = {}
    got, report = encode_csv_on_workers(
        Encoder(schema, SECRET),
        path,
        workers=2,
        cluster=ClusterConfig("local"),
        id_column="rec_id",
        stats=stats,
        usage_by_worker=cpu,
    )
    assert len(cpu) == 2 and all(c.process >= c.tasks >= 0 for c in cpu.values())
    assert all(c.start > 0 for c in cpu.values())  # start-up: joining (forked with imports)
    assert all(a.startswith("tls://") for a in cpu) and sum(c.process for c in cpu.values()) > 0
    assert got.record_ids == ref.record_ids
    assert np.array_equal(got.filters, ref.filters)
    assert np.array_equal(got.block_digests, ref.block_digests)
    assert report.encoded == ref_report.encoded == 3000 and report.skipped == ref_report.skipped
    assert stats.batches > 4 and 1 <= len(stats.cpu_by_worker) <= 2
    assert stats.first_sight_seconds > 0  # values both workers met: computed by one (waves)


def _origin() -> tuple[int, bool, bool, int, int]:
    """In a worker: its parent process, whether the encoder's numba loops were loaded before
    it started (only the forkserver's preload imports ``_numba_warm``), and Dask's, how
    many variants of the comparison tasks' filter loop it has loaded (``cluster_warm``; it
    takes read-only records, mapped or in memory), and of the mpc3 circuit's first AND."""
    import os

    from party.mpc._numba_gates import and_word_major
    from party.protocol._numba_pairs import kept_of_runs

    encoder = "party.encoding._numba_warm" in sys.modules
    loops = len(kept_of_runs.signatures), len(and_word_major.signatures)
    return os.getppid(), encoder, "distributed" in sys.modules, *loops


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forkserver: Linux")
def test_embedded_workers_are_forked_with_the_encoder_and_comparison_loaded() -> None:
    from multiprocessing import forkserver

    with dask_client(ClusterConfig("local"), 2) as client:
        server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
        origins = client.run(_origin)
    assert len(origins) == 2 and server is not None
    assert all(
        o[:3] == (server, True, True) and o[3] >= 1 and o[4] >= 1 for o in origins.values()
    ), origins


def _loop_variants() -> dict[str, int]:
    """In a worker: how many variants of each compiled loop of the comparison's tasks and the
    circuit's actors it has loaded."""
    import party.mpc._numba_gates as gates
    import party.protocol._numba_pairs as pairs

    return {
        f"{module.__name__}.{name}": len(getattr(module, name).signatures)
        for module in (gates, pairs)
        for name in dir(module)
        if hasattr(getattr(module, name), "signatures")
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forkserver: Linux")
def test_a_fresh_clusters_first_comparison_and_circuit_load_no_more_loops(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The forkserver's warm-up (``party.cluster_warm``) gives its workers every variant their
    first comparison and first circuit use (mapped inputs, read-only tables and payloads, the
    full adders on whole words): a node's cluster lives for one run, so a variant loaded there
    would cost every run (0.01-0.03 CPU-s each per worker)."""
    from party.cluster_mpc import ClusterCircuits
    from party.cluster_pairs import ClusterPairs
    from party.mpc.driver import run_keys
    from tests.integration.test_dask_mpc import _any_inputs, _run
    from tests.integration.test_dask_pairs import _fresh, _tables

    with dask_client(ClusterConfig("local"), 2) as client:
        before = client.run(_loop_variants)
        engine = _fresh(_tables("many blocks", 3))
        with ClusterPairs(client, folder=str(tmp_path)) as remote:
            engine.compare(remote=remote)
        engine.close()
        params, shares = _any_inputs()
        with ClusterCircuits(client, folder=str(tmp_path)) as circuits:
            _run(params, shares, run_keys(), circuits)
        after = client.run(_loop_variants)
    assert after == before


def _heartbeat_ms(dask_worker: Any) -> float:
    return float(dask_worker.periodic_callbacks["heartbeat"].callback_time)


def test_embedded_workers_heartbeat_every_few_seconds() -> None:
    import distributed.scheduler as scheduler

    default = scheduler.heartbeat_interval
    assert default(4) < EMBEDDED_HEARTBEAT_S  # Dask's own: 0.5 s for up to 10 workers
    with dask_client(ClusterConfig("local"), 1) as client:
        assert scheduler.heartbeat_interval(4) == EMBEDDED_HEARTBEAT_S
        deadline = time.monotonic() + 3 * EMBEDDED_HEARTBEAT_S
        while time.monotonic() < deadline:  # set by the scheduler's answers to the worker
            ms = list(client.run(_heartbeat_ms).values())
            if ms == [1000 * EMBEDDED_HEARTBEAT_S]:
                break
            time.sleep(0.2)
        assert ms == [1000 * EMBEDDED_HEARTBEAT_S]
    assert scheduler.heartbeat_interval is default


def test_embedded_cluster_talks_tls_only_and_straight_to_its_workers() -> None:
    """TLS everywhere; the client's calls to an actor go to its worker, not through the
    scheduler (Dask's default proxies them); the workers' malloc is set (``steady_malloc``)."""
    from party.cluster import steady_malloc

    with dask_client(ClusterConfig("local"), 1) as client:
        assert client.scheduler.address.startswith("tls://")
        workers = client.scheduler_info()["workers"]
        assert workers and all(addr.startswith("tls://") for addr in workers)
        assert client.direct_to_workers is True
        assert list(client.run(steady_malloc).values()) == [sys.platform.startswith("linux")]


@pytest.mark.slow
def test_the_partys_own_tls_scheduler_encodes_like_one_process(
    tmp_path, own_scheduler, monkeypatch
) -> None:
    monkeypatch.setattr(encoder_module, "CSV_BLOCK_BYTES", 32 * 1024)
    assert own_scheduler.scheduler.startswith("tls://")
    with dask_client(own_scheduler, connect_timeout=120) as client:
        client.wait_for_workers(2, timeout=120)
    path = tmp_path / "people.csv"
    generate(2, 1500, seed=2).tables[0].write_csv(path)
    schema = parse_schema(json.loads(SHIPPED.read_text()))
    ref, _ = Encoder(schema, SECRET).encode_csv(path)
    got, _ = encode_csv_on_workers(Encoder(schema, SECRET), path, cluster=own_scheduler)
    assert got.record_ids == ref.record_ids and np.array_equal(got.filters, ref.filters)
    assert np.array_equal(got.block_digests, ref.block_digests)


@pytest.mark.slow
@pytest.mark.parametrize("own_scheduler", [0], indirect=True)
def test_a_scheduler_without_workers_is_a_clear_error(own_scheduler) -> None:
    with (
        pytest.raises(ClusterError, match=r"no worker joined the scheduler tls://.* within 5 s"),
        dask_client(own_scheduler, connect_timeout=5),
    ):
        pass


def test_unreachable_scheduler_is_a_clear_error(tmp_path) -> None:
    certs = tmp_path / "certs"
    make_certs(certs, ["node"])
    cfg = ClusterConfig(
        "tls://127.0.0.1:9", certs / "ca.pem", certs / "node.pem", certs / "node.key"
    )
    with (
        pytest.raises(ClusterError, match=r"cannot reach the scheduler tls://127\.0\.0\.1:9"),
        dask_client(cfg, 1, connect_timeout=2),
    ):
        pass
