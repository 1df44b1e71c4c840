"""End-to-end benchmark: the same linkage in process and over real processes with mutual TLS.

    python scripts/bench_e2e.py [--parties 3] [--records 10000] [--repeat 3] [--keep DIR]
        [--mode segments|mpc3]

Generates P tables (party.synthetic), then runs the linkage twice with the same data, schema,
secret and parameters, doing the same work on the same cores:
1. in process: encode every table from its CSV (``encode_csv_parallel`` on ``--workers``
   processes, one table after another), then party.protocol.driver.run_in_process with
   ``--workers`` kernel threads per party;
2. networked: a coordinator and P party nodes as separate OS processes on loopback with mutual TLS
   (party/synthetic/cluster.py), each node with ``[limits] workers`` = ``--workers``
   (PPRL_WORKERS); timed from StartRun until the run is DONE (each party encodes its own table
   from its CSV, exchanges segments, compares, takes part in the ring and writes its results).
Neither side runs the self-audit (the harness's nodes have no audit policy; the in-process run has
none either). Process start-up and the kernel warm-up (which every node does once at start) are
excluded from both. It prints both wall times, their ratio (goal: networked within 1.3x the
in-process run), the bytes each party sent and the stage times each party reported, and checks
that both runs found the same matched sets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parties", type=int, default=3)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--filter-bits", type=int, default=1020)
    parser.add_argument("--match-threshold", type=float, default=0.8)
    parser.add_argument("--segment-threshold", type=float, default=0.7, help="mode segments")
    parser.add_argument("--mode", choices=["segments", "mpc3"], default="segments")
    parser.add_argument(
        "--repeat", type=int, default=3, help="interleaved repeats (medians compared)"
    )
    parser.add_argument(
        "--keep", type=pathlib.Path, help="work folder to keep (default: temporary)"
    )
    parser.add_argument("--workers", type=int, default=0, help="per party (0: every core)")
    parser.add_argument(
        "--schema",
        type=pathlib.Path,
        default=ROOT / "party" / "synthetic" / "data" / "schema.json",
        help="linkage schema JSON (default: the shipped party/synthetic/data/schema.json, whose "
        "blocking keys generated data needs at 100k+); its l is set to --filter-bits",
    )
    parser.add_argument(
        "--memory-budget-mib",
        type=int,
        default=1024,
        help="comparison budget per party, both sides",
    )
    args = parser.parse_args()

    from party.encoding.encoder import Encoder
    from party.encoding.parallel import encode_csv_parallel, resolve_workers, start_lanes_for
    from party.encoding.schema import parse_schema
    from party.mpc.driver import run_mpc3_in_process
    from party.protocol.driver import run_in_process
    from party.protocol.errors import MemoryBudgetError
    from party.protocol.params import ProtocolParameters
    from party.synthetic.cluster import (
        SECRET,
        Cluster,
        generate_data,
        party_names,
        write_parameters,
    )
    from proto import common_pb2

    console = Console()
    root = args.keep or pathlib.Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    root.mkdir(parents=True, exist_ok=True)
    names = party_names(args.parties)
    console.print(f"generating {args.parties} x {args.records} records in {root}")
    csvs = generate_data(root / "data", args.parties, args.records, seed=11)
    schema_obj = json.loads(args.schema.read_text(encoding="utf-8"))
    schema_obj["l"] = args.filter_bits
    (root / "schema.json").write_text(json.dumps(schema_obj), encoding="utf-8")
    s_m = args.segment_threshold if args.mode == "segments" else 0.0
    params_path = write_parameters(
        root / "params.json", names, schema_obj, args.match_threshold, s_m, mode=args.mode
    )
    schema = parse_schema(schema_obj)
    params = ProtocolParameters(
        parties=tuple(names),
        filter_bits=schema.output_bits,
        match_threshold=args.match_threshold,
        segment_threshold=s_m,
        memory_budget_bytes=args.memory_budget_mib * 2**20,
        mode=args.mode,
        target="all",
    )

    from party.node.warmup import warm_up

    def in_process() -> tuple[float, float, set[tuple[str, ...]]]:
        t0 = time.perf_counter()
        tables = [
            encode_csv_parallel(
                Encoder(schema, SECRET), p, workers=args.workers, id_column="rec_id"
            )[0]
            for p in csvs
        ]
        t_encode = time.perf_counter() - t0
        link = run_mpc3_in_process if args.mode == "mpc3" else run_in_process
        try:
            run = link(tables, params, workers=resolve_workers(args.workers))
        except MemoryBudgetError as exc:
            raise SystemExit(
                f"in-process run: {exc} (--memory-budget-mib {args.memory_budget_mib}, "
                f"--schema {args.schema})"
            ) from None
        elapsed = time.perf_counter() - t0
        groups: dict[str, dict[int, str]] = {}
        for j, rows in enumerate(run.matches):
            for r in rows:
                groups.setdefault(r.linkage_id, {})[j] = r.record_id
        return (
            elapsed,
            t_encode,
            {tuple(g[j] for j in range(args.parties)) for g in groups.values()},
        )

    cluster = Cluster(root, names, csvs, schema_obj, liveness=60.0, stage_timeout=600.0)

    def networked() -> tuple[float, Any, set[tuple[str, ...]]]:
        async def go():  # type: ignore[no-untyped-def]
            run_id = await cluster.start_run(params_path, 3600.0)
            return await cluster.wait_run(run_id, 3600.0)

        t0 = time.perf_counter()
        status = asyncio.run(go())
        elapsed = time.perf_counter() - t0
        if status.stage != common_pb2.STAGE_DONE:
            raise SystemExit(f"networked run failed: {status.reason}")
        groups: dict[str, dict[int, str]] = {}
        for j, name in enumerate(names):
            for row in cluster.results(name, status.run_id):
                groups.setdefault(row["linkage_id"], {})[j] = row["record_id"]
        return elapsed, status, {tuple(g[j] for j in range(args.parties)) for g in groups.values()}

    # Both sides warmed up (kernel compiled/loaded) before timing, then interleaved repeats so that
    # load from other processes on the machine hits both alike; medians are compared.
    warm_up()
    inproc_times: list[float] = []
    net_times: list[float] = []
    try:
        node_env = {
            "PPRL_WORKERS": str(args.workers),
            "PPRL_MEMORY_BUDGET_MIB": str(args.memory_budget_mib),
        }
        cluster.start({name: node_env for name in names})
        # Each node's start-up warm-up (compiled loops loaded, encoding lanes started) over, and
        # this process's own lanes started, before either side is timed: neither pays start-up.
        cluster.wait_warm(names)
        start_lanes_for(csvs[0], args.workers)
        for i in range(args.repeat):
            t_inproc, t_encode, inproc_sets = in_process()
            t_net, status, net_sets = networked()
            inproc_times.append(t_inproc)
            net_times.append(t_net)
            console.print(
                f"repeat {i + 1}: in-process {t_inproc:.2f}s (encoding {t_encode:.2f}s), "
                f"networked {t_net:.2f}s"
            )
    finally:
        cluster.stop_all()
    table = Table(
        title=f"{args.parties} parties x {args.records} records, l={args.filter_bits}, "
        f"mode {args.mode}"
    )
    for col in (
        "party",
        "sent (MB)",
        "peak RSS (MB)",
        "audited s",
        "exchanging s",
        "comparing s",
        "summing s",
    ):
        table.add_column(col)
    for s in status.summaries:
        table.add_row(
            s.party,
            f"{s.bytes_sent / 1e6:.2f}",
            f"{s.peak_rss_bytes / 2**20:.0f}",
            *(
                f"{s.stage_seconds.get(k, 0.0):.2f}"
                for k in ("audited", "exchanging", "comparing", "summing")
            ),
        )
    console.print(table)
    med_in, med_net = statistics.median(inproc_times), statistics.median(net_times)
    console.print(
        f"in-process: median {med_in:.2f}s, best {min(inproc_times):.2f}s over {args.repeat} runs"
    )
    console.print(
        f"networked (mTLS, {args.parties + 1} processes): median {med_net:.2f}s, "
        f"best {min(net_times):.2f}s"
    )
    console.print(
        f"ratio networked / in-process (medians): {med_net / med_in:.2f} (goal <= 1.3); "
        f"load {os.getloadavg()[0]:.1f}"
    )
    console.print(
        f"matched sets: in-process {len(inproc_sets)}, networked {len(net_sets)}, "
        f"equal: {inproc_sets == net_sets}"
    )
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if inproc_sets == net_sets else 1


if __name__ == "__main__":
    sys.exit(main())
