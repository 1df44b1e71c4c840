"""Mode mpc3 with target "any" over real party processes (mutual TLS): the groups every party
writes equal the independent plaintext oracle's (P = 3; P = 2 with a helper compute node; P = 4
with a data party that is not a compute party), and the compute parties agree on the circuit."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import pytest

from party.synthetic.cluster import Cluster
from proto import common_pb2, coordinator_pb2
from tests.integration.conftest import run_and_wait
from tests.integration.test_any_target import (
    any_parameters,
    network_groups,
    oracle_any_groups,
    subset_csvs,
)

S = common_pb2.Stage


def _check_compute_parties(status: coordinator_pb2.RunStatus, compute: list[str]) -> None:
    summaries = {s.party: s for s in status.summaries}
    for name in compute:
        s = summaries[name]
        assert s.mpc_rounds > 0 and s.mpc_batches > 0 and s.candidate_sets > 0, name
    # the three compute parties evaluated the same candidate pairs with the same rounds
    assert len({(summaries[n].candidate_sets, summaries[n].mpc_round_bytes) for n in compute}) == 1
    for name, s in summaries.items():
        if name not in compute:
            assert s.mpc_rounds == 0 and s.mpc_round_bytes == 0, name


def test_three_parties_mpc3_any_equals_the_oracle(
    make_cluster: Callable[..., Cluster], tmp_path: pathlib.Path
) -> None:
    cluster = make_cluster(3, 0, csvs=subset_csvs(tmp_path / "data", 3, 150, seed=3))
    params = any_parameters(cluster, "p-mpc3-any3.json", mode="mpc3")
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_groups(cluster, status.run_id)
    assert got == oracle_any_groups(cluster, params)
    assert {size for _, _, size, _ in got} == {2, 3}, "groups of both sizes expected"
    _check_compute_parties(status, list(cluster.parties))


def test_two_parties_and_a_helper_mpc3_any_equals_the_oracle(
    make_cluster: Callable[..., Cluster], tmp_path: pathlib.Path
) -> None:
    cluster = make_cluster(
        2, 0, csvs=subset_csvs(tmp_path / "data", 2, 150, seed=4), helpers=["helper"]
    )
    compute = [*cluster.parties, "helper"]
    params = any_parameters(cluster, "p-mpc3-any2.json", mode="mpc3", compute_parties=compute)
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_groups(cluster, status.run_id)
    assert got and got == oracle_any_groups(cluster, params)
    _check_compute_parties(status, compute)
    helper = {s.party: s for s in status.summaries}["helper"]
    assert helper.matches == 0 and helper.result_path == ""


@pytest.mark.slow
def test_four_parties_mpc3_any_min_parties_3_equals_the_oracle(
    make_cluster: Callable[..., Cluster], tmp_path: pathlib.Path
) -> None:
    cluster = make_cluster(4, 0, csvs=subset_csvs(tmp_path / "data", 4, 100, seed=5))
    params = any_parameters(
        cluster, "p-mpc3-any4.json", mode="mpc3", min_parties=3, solver="majority"
    )
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_groups(cluster, status.run_id)
    assert got == oracle_any_groups(cluster, params)
    assert got and all(size >= 3 for _, _, size, _ in got)
    _check_compute_parties(status, list(cluster.parties[:3]))
