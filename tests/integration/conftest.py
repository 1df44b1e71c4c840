"""Fixtures that start a coordinator and N party nodes as OS processes (mutual TLS, loopback).

``cluster3`` (session scope) is shared by the integration tests, which restore it after they
restart or stop a node. ``make_cluster(n, records, csvs=None, schema=None, liveness=...,
stage_timeout=..., helpers=[...], start=True)`` builds (and starts, unless ``start=False``) another
deployment in a fresh folder (stopped at teardown).
Expected results come from the same CSVs encoded in this process and run through
``run_in_process`` and the plaintext oracle.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from party.config import ClusterConfig
from party.synthetic.cluster import (
    SECRET,
    Cluster,
    generate_data,
    make_certs,
    party_names,
    write_parameters,
    write_schema,
)

FILTER_BITS = 1020  # divisible by 3 and 5

MatchSet = set[tuple[tuple[str, ...], float]]


def build_cluster(
    root: pathlib.Path,
    n: int,
    records: int,
    *,
    csvs: list[pathlib.Path] | None = None,
    schema: dict[str, Any] | None = None,
    **kw: Any,
) -> Cluster:
    """Files for n parties under ``root``: generated data (or ``csvs``, one per party, with a
    ``rec_id`` column) and the example schema with l = 1020 (or ``schema``)."""
    names = party_names(n)
    if csvs is None:
        csvs = generate_data(root / "data", n, records)
    if schema is None:
        schema = write_schema(root / "schema.json", FILTER_BITS)
    return Cluster(root, names, csvs, schema, **kw)


@pytest.fixture(scope="session")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster3")
    cluster = build_cluster(root, 3, 200)
    cluster.nodes["party-a"].env["PPRL_TEST_CAPTURE_FILE"] = str(root / "party-a.capture")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop_all()


@pytest.fixture
def make_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def factory(n: int, records: int, start: bool = True, **kw: Any) -> Cluster:
        cluster = build_cluster(tmp_path_factory.mktemp(f"cluster{n}"), n, records, **kw)
        made.append(cluster)
        if start:
            cluster.start()
        return cluster

    try:
        yield factory
    finally:
        for c in made:
            c.stop_all()


def parameters(
    cluster: Cluster,
    name: str = "params.json",
    *,
    one_to_one: bool = False,
    max_block_size: int | None = None,
    **kw: Any,
) -> pathlib.Path:
    path = write_parameters(cluster.root / name, cluster.parties, cluster.schema, **kw)
    if one_to_one or max_block_size is not None:
        import json

        obj = json.loads(path.read_text(encoding="utf-8"))
        obj.update(one_to_one=one_to_one, max_block_size=max_block_size)
        path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def network_sets(cluster: Cluster, run_id: str) -> MatchSet:
    """Matched sets as (record id per party, similarity) from every party's matches.csv."""
    groups: dict[str, dict[int, str]] = {}
    sims: dict[str, set[float]] = {}
    for j, name in enumerate(cluster.parties):
        for row in cluster.results(name, run_id):
            groups.setdefault(row["linkage_id"], {})[j] = row["record_id"]
            sims.setdefault(row["linkage_id"], set()).add(float(row["similarity"]))
    out: MatchSet = set()
    for lid, members in groups.items():
        assert sorted(members) == list(range(len(cluster.parties))), f"linkage {lid} incomplete"
        assert len(sims[lid]) == 1, f"parties disagree on the similarity of {lid}"
        out.add((tuple(members[j] for j in range(len(cluster.parties))), sims[lid].pop()))
    return out


def expected_sets(cluster: Cluster, params_path: pathlib.Path) -> tuple[MatchSet, MatchSet]:
    """(in-process driver's sets, plaintext oracle's sets) for the cluster's data."""
    from party.encoding.encoder import Encoder
    from party.encoding.schema import parse_schema
    from party.protocol.driver import run_in_process
    from party.protocol.oracle import oracle_matches
    from party.protocol.params import ProtocolParameters
    from proto import linkage

    msg = linkage.load_parameters(params_path)
    schema = parse_schema(cluster.schema)
    params = ProtocolParameters(
        parties=tuple(msg.parties),
        filter_bits=schema.output_bits,
        match_threshold=msg.match_threshold,
        segment_threshold=msg.segment_threshold,
        one_to_one=msg.one_to_one,
        max_block_size=msg.max_block_size or None,
        target="all",
    )
    tables = [
        Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")[0] for path in cluster.csvs
    ]
    run = run_in_process(tables, params)
    groups: dict[str, dict[int, str]] = {}
    sims: dict[str, float] = {}
    for j, rows in enumerate(run.matches):
        for r in rows:
            groups.setdefault(r.linkage_id, {})[j] = r.record_id
            sims[r.linkage_id] = r.similarity
    inproc = {(tuple(g[j] for j in range(len(tables))), sims[lid]) for lid, g in groups.items()}
    oracle = {
        (tuple(tables[j].record_ids[i] for j, i in enumerate(m.records)), m.dice)
        for m in oracle_matches(tables, params)
    }
    return inproc, oracle


def run_and_wait(cluster: Cluster, params_path: pathlib.Path, timeout: float = 90.0) -> Any:
    async def go() -> Any:
        run_id = await cluster.start_run(params_path, timeout)
        return await cluster.wait_run(run_id, timeout + 30)

    return asyncio.run(go())


def declined_run(cluster: Cluster, name: str, party: str, timeout: float = 60.0) -> tuple[str, str]:
    """Run `pprl-coordinator run` on fresh parameters ``name``; it must fail because ``party``'s
    self-audit declined. Returns (the CLI's output with rich's line wrapping undone, run id) and
    checks that no party kept results."""
    proc = cluster.run(parameters(cluster, name=name), timeout=timeout)
    out = " ".join(proc.stdout.split())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"run failed: {party} declined in stage audited (self-audit)" in out, out
    run_id = out.split("run ", 1)[1].split(" ", 1)[0]
    for node in cluster.parties:
        assert not cluster.result_dir(node, run_id).exists(), f"{node} kept results"
    return out, run_id


@pytest.fixture
def own_scheduler(tmp_path, request):
    """A TLS Dask scheduler and two workers (or ``request.param``) as separate processes, as a
    party would run them."""
    nworkers = getattr(request, "param", 2)
    certs = tmp_path / "certs"
    make_certs(certs, ["scheduler", "worker", "node"], ca_name="party cluster CA")
    tls = ["--tls-ca-file", str(certs / "ca.pem")]
    sched_file = tmp_path / "scheduler.json"
    dask = str(pathlib.Path(sys.executable).with_name("dask"))
    procs = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol", "tls",
             "--scheduler-file", str(sched_file), "--no-dashboard", *tls,
             "--tls-cert", str(certs / "scheduler.pem"), "--tls-key", str(certs / "scheduler.key")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # an upper bound for a loaded CI machine
        while not sched_file.exists() or not sched_file.read_text().strip():
            assert time.monotonic() < deadline, "scheduler did not start"
            assert procs[0].poll() is None, "scheduler exited"
            time.sleep(0.1)
        address = json.loads(sched_file.read_text())["address"]
        if nworkers:
            procs.append(
                subprocess.Popen(
                    [dask, "worker", address, "--nworkers", str(nworkers), "--nthreads", "1",
                     "--no-dashboard", *tls, "--tls-cert", str(certs / "worker.pem"),
                     "--tls-key", str(certs / "worker.key")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        yield ClusterConfig(address, certs / "ca.pem", certs / "node.pem", certs / "node.key")
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """An embedded Dask cluster of two worker processes (TLS), shared by a module's tests."""
    from party.cluster import dask_client

    with dask_client(ClusterConfig("local"), 2) as c:
        yield c
