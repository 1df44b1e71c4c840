"""The `pprl-coordinator` command: `serve`, `run` (start a linkage and follow it) and `health`."""

from __future__ import annotations

import argparse
import asyncio
import logging
import pathlib
import sys
import time
from collections.abc import Sequence

import grpc
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from coordinator.config import CoordinatorConfig, load_coordinator_config, security_for
from coordinator.errors import CoordinatorError
from proto import common_pb2, coordinator_pb2, coordinator_pb2_grpc, linkage
from proto.transport import check_health

log = logging.getLogger(__name__)
S = common_pb2.Stage
STAGES = [
    S.STAGE_AGREED,
    S.STAGE_AUDITED,
    S.STAGE_EXCHANGING,
    S.STAGE_COMPARING,
    S.STAGE_SUMMING,
    S.STAGE_DONE,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pprl-coordinator",
        description="The coordinator of multi-party privacy-preserving record linkage.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("serve", help="run the coordinator (gRPC, mutual TLS)")
    s.add_argument("--config", required=True, help="coordinator TOML configuration")
    s.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext without mutual TLS (local experiments only)",
    )
    s.set_defaults(func=_serve)
    r = sub.add_parser("run", help="start a linkage and follow its progress")
    r.add_argument("--config", required=True, help="coordinator TOML configuration")
    r.add_argument("--parameters", required=True, help="linkage parameters JSON")
    r.add_argument("--timeout", type=float, default=0.0, help="whole-run timeout in seconds")
    r.add_argument("--insecure", action="store_true", help="the coordinator runs without TLS")
    r.set_defaults(func=_run)
    h = sub.add_parser("health", help="exit 0 iff the coordinator reports SERVING")
    h.add_argument("--config", required=True, help="coordinator TOML configuration")
    h.add_argument("--insecure", action="store_true", help="the coordinator runs without TLS")
    h.set_defaults(func=_health)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from coordinator.server import INSECURE_WARNING, serve

    config = load_coordinator_config(args.config, require_tls=not args.insecure)
    if args.insecure:
        Console(stderr=True).print(f"[bold red]{INSECURE_WARNING}[/]")
    asyncio.run(serve(config, insecure=args.insecure))
    return 0


def _health(args: argparse.Namespace) -> int:
    config = load_coordinator_config(args.config, require_tls=not args.insecure, check_files=False)
    status = asyncio.run(
        check_health(
            security_for(config, args.insecure),
            config.dial_address(),
            config.name,
            config.timeouts.rpc,
        )
    )
    Console(stderr=True).print(f"{config.name}: {status}")
    return 0 if status == "SERVING" else 1


def _stage_label(stage: int) -> str:
    return S.Name(stage).removeprefix("STAGE_").lower()


async def run_linkage(
    config: CoordinatorConfig,
    params: common_pb2.LinkageParameters,
    timeout: float,
    insecure: bool,
    console: Console,
) -> coordinator_pb2.RunStatus:
    """Start a run, show live progress, return the final status. Raises CoordinatorError on RPC errors."""
    security = security_for(config, insecure)
    async with security.channel(
        config.dial_address(), config.name, ["pprl.v1.Coordinator"]
    ) as channel:
        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
        try:
            started = await stub.StartRun(
                coordinator_pb2.StartRunRequest(parameters=params, timeout_seconds=timeout),
                timeout=config.timeouts.rpc * 2,
                metadata=security.metadata(),
            )
        except grpc.aio.AioRpcError as exc:
            raise CoordinatorError(
                f"the linkage could not start: {exc.code().name}: {exc.details()}"
            ) from None
        target = linkage.target_of(params)
        if target == "any":
            target += (
                f", min_parties {params.min_parties or 2}, solver {params.solver or 'guarded'}"
            )
        console.print(
            f"run [bold]{started.run_id}[/] agreed (target {target}; parameters digest "
            f"{started.parameters_digest[:16]}...)"
        )
        final: coordinator_pb2.RunStatus | None = None
        with Progress(
            TextColumn("{task.fields[party]:>12}"),
            TextColumn("{task.fields[stage]:<11}"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as bars:
            tasks: dict[str, TaskID] = {}
            try:
                async for update in stub.WatchRun(
                    coordinator_pb2.WatchRunRequest(run_id=started.run_id),
                    timeout=(timeout or config.timeouts.run) + config.timeouts.rpc,
                    metadata=security.metadata(),
                ):
                    status = update.status
                    for p in status.parties:
                        if p.party not in tasks:
                            tasks[p.party] = bars.add_task("", total=1.0, party=p.party, stage="")
                        stage = p.stage or status.stage
                        frac = 0.0
                        if stage == S.STAGE_COMPARING and p.total:
                            frac = p.done / p.total
                        elif stage == S.STAGE_DONE:
                            frac = 1.0
                        base = STAGES.index(stage) if stage in STAGES else 0
                        overall = (
                            min(1.0, (base + frac) / (len(STAGES) - 1))
                            if stage != S.STAGE_DONE
                            else 1.0
                        )
                        bars.update(
                            tasks[p.party],
                            completed=overall,
                            stage=_stage_label(stage) if stage else "",
                        )
                    final = status
            except grpc.aio.AioRpcError as exc:
                raise CoordinatorError(
                    f"lost the run's progress stream: {exc.code().name}: {exc.details()}"
                ) from None
        assert final is not None
        return final


def print_summary(console: Console, status: coordinator_pb2.RunStatus, seconds: float) -> None:
    table = Table(title=f"run {status.run_id}: {_stage_label(status.stage)} after {seconds:.1f}s")
    for col in (
        "party",
        "matches",
        "sent (MB)",
        "peak RSS (MB)",
        "candidate sets",
        "RR_f",
        "exchange s",
        "compare s",
        "summing s",
        "results",
    ):
        table.add_column(col)
    for s in status.summaries:
        table.add_row(
            s.party,
            str(s.matches),
            f"{s.bytes_sent / 1e6:.2f}",
            f"{s.peak_rss_bytes / 2**20:.0f}",
            f"{s.candidate_sets:,}",
            f"{s.reduction_ratio:.3f}",
            f"{s.stage_seconds.get('exchanging', 0):.2f}",
            f"{s.stage_seconds.get('comparing', 0):.2f}",
            f"{s.stage_seconds.get('summing', 0):.2f}",
            s.result_path,
        )
    console.print(table)
    if status.stage == S.STAGE_FAILED:
        console.print(f"[bold red]run failed:[/] {status.reason}")


def _run(args: argparse.Namespace) -> int:
    config = load_coordinator_config(args.config, require_tls=not args.insecure, check_files=False)
    try:
        params = linkage.load_parameters(pathlib.Path(args.parameters))
    except linkage.ParametersFormatError as exc:
        raise CoordinatorError(str(exc)) from None
    console = Console()
    t0 = time.perf_counter()
    status = asyncio.run(run_linkage(config, params, args.timeout, args.insecure, console))
    print_summary(console, status, time.perf_counter() - t0)
    return 0 if status.stage == S.STAGE_DONE else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except CoordinatorError as exc:
        print(f"pprl-coordinator {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pprl-coordinator {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
