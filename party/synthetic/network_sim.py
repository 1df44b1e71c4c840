"""The networked simulation: a coordinator and P party nodes as real OS processes, loopback, mutual TLS.

It uses the local-cluster launcher (`party/synthetic/cluster.py`: certificates
from `scripts/gen_certs.py`, TOML configs, `pprl-coordinator serve` / `pprl-party serve` processes on
OS-chosen ports, readiness through the gRPC health service), starts one linkage with the run's
parameters file, follows the coordinator's WatchRun stream for progress, and reads every party's
`matches.csv` and final summary (bytes sent, peak RSS, seconds per stage) as the nodes report them.

Then, on the same CSVs, schema and secret, it encodes locally and runs the in-process driver
(reference) and the plaintext oracle, so the report shows whether the networked matches equal the
in-process ones. Candidate sets per stage, survivors and RR_f come from the nodes' summaries.

Folder layout under the simulation's out folder: `data/` (the CSVs), `network/` (certs/, configs,
node logs `<name>.log`, parameters.json, coordinator state, `results/<party>/<run-id>/matches.csv`),
and the usual `results/party-<i>/matches.csv`, `summary.json`, `report.md`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from party.errors import PprlError
from party.synthetic.cluster import Cluster
from party.synthetic.metrics import LinkageQuality, evaluate, read_matches_csv
from party.synthetic.simulation import (
    EncodedData,
    Progress,
    SimulationConfig,
    SimulationError,
    SimulationResult,
    compute_parties,
    encode_parties,
    load_schema_for,
    matches_path,
    party_name,
    party_rows,
    prepare_data,
    protocol_parameters,
    run_protocol_in_process,
    simulation_secret,
    write_matches_csv,
    write_report,
)

log = logging.getLogger(__name__)


def parameters_object(cfg: SimulationConfig, schema_obj: dict[str, Any]) -> dict[str, Any]:
    """The run's parameters file (the format of examples/parameters.json) for target all
    (target any adds its own keys: party.synthetic.network_any)."""
    obj: dict[str, Any] = {
        "version": 1,
        "target": "all",
        "parties": [party_name(i) for i in range(cfg.parties)],
        "schema": schema_obj,
        "match_threshold": cfg.match_threshold,
        "segment_threshold": cfg.s_m,
        "one_to_one": cfg.one_to_one,
        "max_block_size": cfg.max_block_size,
    }
    if cfg.mode != "segments":
        obj["mode"] = cfg.mode
        obj["compute_parties"] = list(compute_parties(cfg))
    return obj


def canonical_sets(matches: list[list[Any]]) -> set[tuple[tuple[tuple[int, str], ...], float]]:
    """Matched sets as ((party, record id) ..., similarity), independent of linkage ids."""
    groups: dict[str, list[tuple[int, str]]] = {}
    sims: dict[str, float] = {}
    for party, rows in enumerate(matches):
        for m in rows:
            groups.setdefault(str(m.linkage_id), []).append((party, str(m.record_id)))
            sims[str(m.linkage_id)] = float(m.similarity)
    return {(tuple(sorted(g)), sims[lid]) for lid, g in groups.items()}


def _progress_display(progress: Progress) -> Callable[[Any], None]:
    """A WatchRun callback that shows each party's stage (and comparison progress) as a bar."""
    from proto import common_pb2

    stages = [
        common_pb2.STAGE_AGREED,
        common_pb2.STAGE_AUDITED,
        common_pb2.STAGE_EXCHANGING,
        common_pb2.STAGE_COMPARING,
        common_pb2.STAGE_SUMMING,
        common_pb2.STAGE_DONE,
    ]

    def show(status: Any) -> None:
        for p in status.parties:
            stage = p.stage or status.stage
            label = common_pb2.Stage.Name(stage).removeprefix("STAGE_").lower()
            base = stages.index(stage) if stage in stages else 0
            frac = p.done / p.total if stage == common_pb2.STAGE_COMPARING and p.total else 0.0
            done = 1000 if stage == common_pb2.STAGE_DONE else int(1000 * (base + frac) / 5)
            progress(f"{p.party}: {label}", min(done, 1000), 1000)

    return show


def run_on_cluster(
    cfg: SimulationConfig,
    paths: Sequence[Path],
    id_column: str,
    schema_obj: dict[str, Any],
    parameters: dict[str, Any],
    progress: Progress | None = None,
    *,
    timeout: float = 1800.0,
    helpers: Sequence[str] = (),
) -> tuple[Cluster, str, Any, dict[str, float]]:
    """Start the coordinator and the party nodes under ``<out>/network``, run one linkage with
    ``parameters``, stop the nodes; (cluster, run id, final RunStatus, seconds per step).
    SimulationError (naming the node logs) unless the run is done."""
    root = (cfg.out_dir / "network").resolve()  # the launcher runs nodes with cwd=root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    names = [party_name(i) for i in range(cfg.parties)]
    steps: dict[str, float] = {}
    cluster = Cluster(
        root,
        names,
        [p.resolve() for p in paths],
        schema_obj,
        liveness=30.0,
        stage_timeout=max(60.0, timeout),
        secret=simulation_secret(cfg.seed),
        id_column=id_column,
        helpers=list(helpers),
    )
    params_path = root / "parameters.json"
    params_path.write_text(json.dumps(parameters, indent=2) + "\n")
    try:
        if progress:
            progress("start nodes", 0, cfg.parties + 1)
        t0 = time.perf_counter()
        cluster.start_coordinator(
            {
                "PPRL_RUN_TIMEOUT": str(timeout),
                "PPRL_PREPARE_TIMEOUT": str(timeout),
                "PPRL_RPC_TIMEOUT": "60",
            }
        )
        party_env = {
            "PPRL_RPC_TIMEOUT": "60",
            "PPRL_MEMORY_BUDGET_MIB": str(cfg.memory_budget_mib),
        }
        if cfg.cluster is not None:  # encode and compare on the node's Dask cluster
            party_env["PPRL_CLUSTER_SCHEDULER"] = cfg.cluster
        for name in cluster.all_nodes:
            cluster.start_party(name, party_env)
        for i, name in enumerate(cluster.all_nodes):
            cluster.wait_healthy(cluster.nodes[name])
            if progress:
                progress("start nodes", i + 2, len(cluster.all_nodes) + 1)
        cluster.wait_registered(cluster.all_nodes)
        steps["start nodes"] = time.perf_counter() - t0
        # a deployment's nodes run for many linkages: a run starts on warm nodes (compiled loops
        # loaded, encoding lanes up), and the warm-up is reported as its own step
        t0 = time.perf_counter()
        for i, name in enumerate(cluster.all_nodes):
            if progress:
                progress("warm nodes", i, len(cluster.all_nodes))
            cluster.wait_warm([name])
        steps["warm nodes"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        run_id = asyncio.run(cluster.start_run(params_path, timeout))
        on_update = _progress_display(progress) if progress else None
        final = asyncio.run(cluster.wait_run(run_id, timeout + 60, on_update))
        steps["networked run"] = time.perf_counter() - t0
    except PprlError:
        raise
    except Exception as exc:  # launcher errors (timeouts, exited processes) as a clear message
        raise SimulationError(
            f"networked run could not complete: {type(exc).__name__}: {exc} (node logs in {root})"
        ) from None
    finally:
        cluster.stop_all()

    from proto import common_pb2

    if final is None or final.stage != common_pb2.STAGE_DONE:
        reason = "no status" if final is None else final.reason
        raise SimulationError(f"networked run failed: {reason} (node logs in {root})")
    return cluster, run_id, final, steps


def run_networked_simulation(
    cfg: SimulationConfig,
    progress: Progress | None = None,
    *,
    timeout: float = 1800.0,
    reference: bool = True,
) -> SimulationResult:
    """One networked simulation (see the module docstring); writes the results folder.

    With `reference=False` the local encoding, in-process run and oracle are skipped (for large
    runs); quality is then computed from the nodes' matches alone.
    """
    from party.synthetic.simulation import oracle_quality

    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    steps: dict[str, float] = {}
    schema, schema_obj, note = load_schema_for(cfg.schema_path, cfg.parties)
    (cfg.out_dir / "schema.json").write_text(json.dumps(schema_obj, indent=2) + "\n")
    params = protocol_parameters(cfg, schema)  # validates l % P and thresholds before launching
    data = prepare_data(cfg, progress)
    steps["generate"] = data.seconds

    names = [party_name(i) for i in range(cfg.parties)]
    secret = simulation_secret(cfg.seed)
    t_all = time.perf_counter()
    cluster, run_id, final, launch_steps = run_on_cluster(
        cfg,
        data.paths,
        data.id_column,
        schema_obj,
        parameters_object(cfg, schema_obj),
        progress,
        timeout=timeout,
        helpers=[c for c in compute_parties(cfg) if c not in names],
    )
    steps.update(launch_steps)
    summaries = {s.party: s for s in final.summaries}
    node_matches = []
    for p, name in enumerate(names):
        rows = read_matches_csv(cluster.result_dir(name, run_id) / "matches.csv")
        node_matches.append(rows)
        write_matches_csv(matches_path(cfg.out_dir, p), rows)
    quality = evaluate(node_matches, data.truth)
    order = ["created", "agreed", "audited", "exchanging", "comparing", "summing", "done"]
    stage_names = sorted(
        {k for s in summaries.values() for k in s.stage_seconds},
        key=lambda k: (order.index(k) if k in order else len(order), k),
    )
    for stage_name in stage_names:
        vals = [s.stage_seconds.get(stage_name, 0.0) for s in summaries.values()]
        steps[f"nodes.{stage_name} (max over parties)"] = max(vals)

    notes = [n for n in [note] if n]
    oq: LinkageQuality | None = None
    method = "not computed (reference disabled)"
    party_info: list[dict[str, Any]]
    totals: dict[str, Any] = {
        "run_id": run_id,
        "filter_bits": params.filter_bits,
        "s_t": params.match_threshold,
        "s_m": params.segment_threshold,
        "networked_wall_seconds": round(time.perf_counter() - t_all, 3),
    }
    if reference:
        t0 = time.perf_counter()
        tables, reports = encode_parties(schema, secret, data.paths, data.id_column, progress)
        enc = EncodedData(schema, schema_obj, note, data, tables, reports, time.perf_counter() - t0)
        steps["reference: encode"] = enc.encode_seconds
        t0 = time.perf_counter()
        ref = run_protocol_in_process(tables, params)
        steps["reference: in-process protocol"] = time.perf_counter() - t0
        same = canonical_sets(ref.matches) == canonical_sets(node_matches)
        totals["identical_to_in_process"] = same
        if not same:
            notes.append("networked matches DIFFER from the in-process run on the same inputs")
        cand = max((c.candidate_sets for c in ref.metrics.comparison), default=0)
        t0 = time.perf_counter()
        oq, method = oracle_quality(tables, params, data.truth, cfg.oracle, ref.pseudonyms, cand)
        steps["oracle"] = time.perf_counter() - t0
        party_info = party_rows(cfg, enc, params, ref.metrics)
        totals["sets_summed"] = ref.metrics.sets_summed
        totals["matches"] = ref.metrics.matches
    else:
        party_info = [
            {
                "name": n,
                "records": len(data.truth.record_ids[i]),
                "records_in_common_blocks": "n/a",
                "candidate_sets": "n/a",
                "evaluated_per_stage": [],
                "survived_per_stage": [],
                "survivors": "n/a",
                "rr_f": None,
            }
            for i, n in enumerate(names)
        ]
    for info in party_info:
        s = summaries.get(info["name"])
        if s is None:
            info.update(bytes_sent=None, peak_memory_bytes=None, stage_seconds={})
            continue
        info["bytes_sent"] = int(s.bytes_sent)
        info["peak_memory_bytes"] = int(s.peak_rss_bytes)
        info["stage_seconds"] = dict(s.stage_seconds)
        info["candidate_sets"] = int(s.candidate_sets)
        info["evaluated_per_stage"] = [int(v) for v in s.evaluated_per_stage]
        info["survived_per_stage"] = [int(v) for v in s.kept_per_stage]
        info["survivors"] = int(s.survivors)
        info["rr_f"] = s.reduction_ratio
    mpc_summaries = [
        {
            "party": name,
            "candidate_sets": int(s.candidate_sets),
            "batches": int(s.mpc_batches),
            "rounds": int(s.mpc_rounds),
            "and_gates": int(s.mpc_and_gates),
            "round_bytes": int(s.mpc_round_bytes),
            "bytes_sent": int(s.bytes_sent),
            "peak_rss_bytes": int(s.peak_rss_bytes),
        }
        for name, s in summaries.items()
        if s.mpc_rounds  # a compute party of an mpc3 run (possibly the helper)
    ]
    for info in mpc_summaries:
        totals[f"mpc3 compute party {info['party']}"] = (
            f"{info['candidate_sets']} candidate sets, {info['batches']} batches, "
            f"{info['rounds']} rounds, {info['and_gates']} AND gates, {info['round_bytes']} round "
            f"bytes sent, {info['bytes_sent']} bytes sent in all, peak RSS "
            f"{info['peak_rss_bytes'] / 2**20:.0f} MiB"
        )
    notes.append(
        "bytes sent, peak memory, candidate sets per stage, survivors and RR_f are what each party "
        "node reports (serialized bytes it sent to other parties; the peak RSS of its process)"
    )
    result = SimulationResult(
        mode=f"networked (mutual TLS, loopback), {cfg.mode}",
        config=cfg,
        quality=quality,
        oracle_quality=oq,
        oracle_method=method,
        steps=steps,
        parties=party_info,
        totals=totals,
        out_dir=cfg.out_dir,
        notes=notes,
        mpc_summaries=mpc_summaries,
    )
    write_report(result)
    return result
