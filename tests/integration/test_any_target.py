"""Target "any" over real party processes (mutual TLS): groups equal the plaintext oracle at s_m = 0,
matches.csv has the group columns, and Propose refuses bad target parameters with INVALID_ARGUMENT
before any data leaves a party."""

from __future__ import annotations

import json
import pathlib
import re
import uuid
from collections.abc import Callable
from typing import Any

import grpc
import pytest

from party.synthetic.cluster import SECRET, Cluster
from proto import common_pb2, linkage, party_pb2
from proto.party_pb2_grpc import PartyStub
from tests.integration.conftest import parameters, run_and_wait

S = common_pb2.Stage
Groups = set[tuple[tuple[tuple[int, str], ...], float, int, tuple[str, ...]]]


def subset_csvs(folder: pathlib.Path, parties: int, records: int, seed: int) -> list[pathlib.Path]:
    from party.synthetic.generator import write_dataset
    from party.synthetic.subsets import generate_subsets

    ds = generate_subsets(parties, records, single=0.3, corruption=0.3, seed=seed)
    return write_dataset(ds, folder)


def any_parameters(cluster: Cluster, name: str, **kw: Any) -> pathlib.Path:
    """A parameters file of target any: without a "target" key (the default is any) unless ``kw``
    names one."""
    path = parameters(cluster, name=name, match_threshold=0.75, segment_threshold=0.0, target=None)
    obj = json.loads(path.read_text(encoding="utf-8"))
    assert "target" not in obj
    obj.update(**kw)
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


def network_groups(cluster: Cluster, run_id: str) -> Groups:
    """Groups from every party's matches.csv: members (party, record id), similarity, size, parties."""
    members: dict[str, list[tuple[int, str]]] = {}
    info: dict[str, set[tuple[float, int, tuple[str, ...]]]] = {}
    for j, name in enumerate(cluster.parties):
        path = cluster.result_dir(name, run_id) / "matches.csv"
        header = path.read_text(encoding="utf-8").splitlines()[0]
        assert header == "linkage_id,similarity,record_id,group_size,parties"
        for row in cluster.results(name, run_id):
            members.setdefault(row["linkage_id"], []).append((j, row["record_id"]))
            parties = tuple(row["parties"].split(";"))
            assert name in parties
            info.setdefault(row["linkage_id"], set()).add(
                (float(row["similarity"]), int(row["group_size"]), parties)
            )
    out: Groups = set()
    for lid, ms in members.items():
        assert len(info[lid]) == 1, f"parties disagree on group {lid}"
        sim, size, parties = info[lid].pop()
        assert size == len(ms) == len(parties)
        out.add((tuple(sorted(ms)), sim, size, parties))
    return out


def oracle_any_groups(cluster: Cluster, params_path: pathlib.Path) -> Groups:
    """The independent oracle's groups on the cluster's CSVs (the data must not let tied Dice
    decide a group: the solver breaks ties by the run's secret pseudonyms)."""
    from party.encoding.encoder import Encoder
    from party.encoding.schema import parse_schema
    from party.protocol.params import ProtocolParameters
    from party.synthetic.network_any import oracle_group_set

    msg = linkage.load_parameters(params_path)
    schema = parse_schema(cluster.schema)
    prm = ProtocolParameters(
        parties=tuple(msg.parties),
        filter_bits=schema.output_bits,
        match_threshold=msg.match_threshold,
        segment_threshold=msg.segment_threshold,
        target="any",
        min_parties=msg.min_parties or 2,
        solver=msg.solver or "guarded",
    )
    tables = [
        Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")[0] for path in cluster.csvs
    ]
    want = oracle_group_set(tables, prm)
    assert want is not None, "tied Dice decide a group: pick other data"
    return {
        (members, sim, len(members), tuple(prm.parties[q] for q, _ in members))
        for members, sim in want
    }


def test_three_parties_any_equals_the_oracle(
    make_cluster: Callable[..., Cluster], tmp_path: pathlib.Path
) -> None:
    cluster = make_cluster(3, 0, csvs=subset_csvs(tmp_path / "data", 3, 150, seed=3))
    params = any_parameters(cluster, "p-any3.json")
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_groups(cluster, status.run_id)
    want = oracle_any_groups(cluster, params)
    assert got == want
    assert {size for _, _, size, _ in got} == {2, 3}, "groups of both sizes expected"
    steps = {
        "party-a": {"ring_out", "ring_back", "classify", "groups", "deliver"},
        "party-b": {"ring_step", "results_in"},  # passes the ring on as it comes
        "party-c": {"ring_step", "ring_send", "results_in"},
    }
    for s in status.summaries:
        assert s.candidate_sets > 0 and s.survivors > 0 and s.bytes_sent > 0
        # the summing stage's steps, wall and CPU seconds (the report's timeline)
        got_steps = {k.split(".", 1)[1] for k in s.stage_seconds if k.startswith("summing.")}
        assert got_steps == steps[s.party], s.party
        for step in got_steps:
            assert s.stage_seconds[f"cpu.summing.{step}"] >= 0.0
        # the exchanging stage's steps (wall and process CPU) and the shares' install (thread CPU)
        got_steps = {k.split(".", 1)[1] for k in s.stage_seconds if k.startswith("exchanging.")}
        assert got_steps == {"digests", "digests_sent", "common", "shares", "shares_sent"}
        for step in got_steps:
            assert s.stage_seconds[f"cpu.exchanging.{step}"] >= 0.0
        assert s.stage_seconds["cpu.exchanging.install"] > 0.0
    for name in cluster.parties:
        assert sorted(p.name for p in cluster.result_dir(name, status.run_id).iterdir()) == [
            "matches.csv"
        ]
        spill = cluster.root / "results" / name / ".spill"
        assert not spill.exists() or not list(spill.iterdir()), "the run's spill folder is gone"


def test_two_parties_all_pairs_equals_the_oracle(
    make_cluster: Callable[..., Cluster], tmp_path: pathlib.Path
) -> None:
    """A schema without blocking keys at P = 2: every record pair is a candidate (one block), the
    default solver is one-to-one greedy there, and the groups equal the oracle's."""
    from party.synthetic.cluster import write_schema

    schema = write_schema(tmp_path / "schema.json", 1020)
    schema["blocking"] = []
    csvs = subset_csvs(tmp_path / "data", 2, 250, seed=3)
    cluster = make_cluster(2, 0, csvs=csvs, schema=schema)
    params = any_parameters(cluster, "p-all-pairs.json")
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_groups(cluster, status.run_id)
    assert got == oracle_any_groups(cluster, params)
    rows = [len(cluster.results(name, status.run_id)) for name in cluster.parties]
    assert rows[0] == rows[1] == len(got) > 150  # one-to-one: every group is one pair
    from party.encoding.encoder import Encoder
    from party.encoding.schema import parse_schema

    encoder = Encoder(parse_schema(schema), SECRET)
    sizes = [len(encoder.encode_csv(c, id_column="rec_id")[0].record_ids) for c in csvs]
    for s in status.summaries:
        assert s.candidate_sets == sizes[0] * sizes[1]  # all pairs


@pytest.mark.slow
def test_four_parties_min_three_majority_equals_the_oracle(
    make_cluster: Callable[..., Cluster], tmp_path: pathlib.Path
) -> None:
    cluster = make_cluster(4, 0, csvs=subset_csvs(tmp_path / "data", 4, 100, seed=5))
    params = any_parameters(cluster, "p-any4.json", min_parties=3, solver="majority")
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    got = network_groups(cluster, status.run_id)
    assert got == oracle_any_groups(cluster, params)
    assert got and all(size >= 3 for _, _, size, _ in got)


async def test_propose_refuses_bad_target_parameters(cluster3: Cluster) -> None:
    """m outside 2..P, an unknown target, an unknown solver: INVALID_ARGUMENT at Propose naming the
    field; the run is never created."""
    security = cluster3.security("coordinator")
    node = cluster3.nodes["party-b"]
    base = linkage.load_parameters(parameters(cluster3, name="p-any-bad.json"))
    directory = [
        common_pb2.PartyAddress(name=n, address=cluster3.nodes[n].address) for n in cluster3.parties
    ]
    cases: list[tuple[dict[str, Any], str]] = [
        (dict(target="any", min_parties=4), "min_parties"),
        (dict(target="any", min_parties=1), "min_parties"),
        (dict(target="some"), "target"),
        (dict(target="any", solver="hungarian"), "solver"),
    ]
    channel = security.channel(node.address, "party-b", ["pprl.v1.Party"])
    stub = PartyStub(channel)
    try:
        for fields, words in cases:
            msg = common_pb2.LinkageParameters()
            msg.CopyFrom(base)
            for key, value in fields.items():
                setattr(msg, key, value)
            run_id = uuid.uuid4().hex
            try:
                digest = linkage.parameters_digest(msg)
            except linkage.ParametersFormatError:
                digest = "0" * 64  # the node's own check must name the field first
            request = party_pb2.ProposeRequest(
                run_id=run_id, parameters=msg, parameters_digest=digest, directory=directory
            )
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Propose(request, timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (fields, err.value)
            assert words in (err.value.details() or ""), (fields, err.value.details())
            ref = common_pb2.RunRef(run_id=run_id, parameters_digest=digest)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await stub.Prepare(party_pb2.PrepareRequest(run=ref), timeout=10)
            assert err.value.code() == grpc.StatusCode.NOT_FOUND  # nothing was created
    finally:
        await channel.close()


@pytest.mark.slow
def test_nodes_on_their_embedded_dask_clusters_equal_the_oracle(
    make_cluster: Callable[..., Cluster], tmp_path: pathlib.Path
) -> None:
    """Every node with ``[cluster] scheduler = "local"``: it encodes and compares (the pairs of
    parties in ranges of blocks and buckets of a's rows) on Dask workers of its own; the groups
    equal the oracle's."""
    cluster = make_cluster(3, 0, start=False, csvs=subset_csvs(tmp_path / "data", 3, 150, seed=3))
    for name in cluster.parties:
        cluster.nodes[name].env["PPRL_CLUSTER_SCHEDULER"] = "local"
        cluster.nodes[name].env["PPRL_WORKERS"] = "2"
    cluster.start()
    params = any_parameters(cluster, "p-any3-dask.json")
    status = run_and_wait(cluster, params)
    assert status.stage == S.STAGE_DONE, status.reason
    assert network_groups(cluster, status.run_id) == oracle_any_groups(cluster, params)
    for s in status.summaries:
        assert s.candidate_sets > 0 and s.survivors > 0
    for name in cluster.parties:  # each node's pairs went to its workers
        text = cluster.log_text(name)
        assert re.search(r"compared on 2 Dask workers: [1-9]\d* tasks", text), name
