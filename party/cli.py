"""The `pprl-party` command: one argparse tree whose subcommands live beside the code they drive."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from party.errors import PprlError

# Each module exposes `register(subparsers)`, adding one or more subcommands whose handler is stored
# as `func` (taking the parsed namespace, returning an exit status).
SUBCOMMAND_MODULES = (
    "party.encoding.cli",
    "party.node.cli",
    "party.audit.cli",
    "party.audit.cvpl_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pprl-party",
        description="A party node of multi-party privacy-preserving record linkage.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except PprlError as exc:
        print(f"pprl-party {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pprl-party {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
