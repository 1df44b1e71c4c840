"""`pprl-party serve` and `pprl-party health`: run a party node and check its gRPC health."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from party.config import load_party_config

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("serve", help="run this party's node (gRPC, mutual TLS)")
    p.add_argument("--config", required=True, help="party TOML configuration")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="plaintext without mutual TLS (local experiments only)",
    )
    p.set_defaults(func=_serve)
    h = subparsers.add_parser("health", help="exit 0 iff this party's node reports SERVING")
    h.add_argument("--config", required=True, help="party TOML configuration")
    h.add_argument("--insecure", action="store_true", help="the node runs without TLS")
    h.add_argument(
        "--warm",
        action="store_true",
        help="exit 0 only once the node's start-up warm-up (compiled loops, encoding lanes) is over",
    )
    h.set_defaults(func=_health)


def _serve(args: argparse.Namespace) -> int:
    from rich.console import Console

    from party.node.server import INSECURE_WARNING, serve

    config = load_party_config(args.config, require_tls=not args.insecure)
    if args.insecure:
        Console(stderr=True).print(f"[bold red]{INSECURE_WARNING}[/]")
    asyncio.run(serve(config, insecure=args.insecure))
    return 0


def _health(args: argparse.Namespace) -> int:
    from party.node.probe import WARM_SERVICE, health

    config = load_party_config(args.config, require_tls=not args.insecure, check_files=False)
    status = asyncio.run(health(config, args.insecure, WARM_SERVICE if args.warm else ""))
    print(f"{config.name}: {status}", file=sys.stderr)  # plain: rich costs a probe ~0.05 s CPU
    return 0 if status == "SERVING" else 1
