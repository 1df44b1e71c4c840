#!/usr/bin/env python3
"""Prepares the compose demo's volumes: certificates, a shared linkage secret and synthetic data.

Run by the one-shot `setup` service of docker-compose.yml (and by the tests on temporary folders):

    python docker/setup_demo.py --demo-dir /volumes/demo \
        --coordinator coordinator=/volumes/coordinator \
        --party party-a=/volumes/party-a --party party-b=/volumes/party-b --party party-c=/volumes/party-c \
        [--san party-a=HOST ...] [--records 1000 --overlap 0.5 --corruption 0.2 --seed 1]

Volume layout it writes (every node's volume is mounted at /var/lib/pprl inside that node's container;
docker/config/*.toml name these paths):

    <node>/certs/ca.pem              CA certificate (trust anchor of mutual TLS)
    <node>/certs/node.pem, node.key  the node's certificate (CN = node name) and private key (0600)
    <party>/secret/linkage.key       the linkage secret, 32 random bytes as hex text (0600), the same at every party
    <party>/data/records.csv         that party's synthetic records (party i of the generated dataset)
    <party>/results/                 where the node writes <run-id>/matches.csv
    <coordinator>/state/             the coordinator's run-state store
    <demo>/ca/ca.pem, ca.key         the demo CA (kept so that nodes can be added later)
    <demo>/data/                     the generated dataset: party-<i>.csv, truth.csv, dataset.json,
                                     request.json (the settings it was generated from)

Idempotent and non-destructive: anything that already exists is kept, only what is missing is made
(so `docker compose up` can be repeated, and a party's results and secret are never replaced). The one
exception is the demo data: when the dataset settings change (PPRL_DEMO_RECORDS, PPRL_DEMO_SEED), the
dataset is generated again and every party's records.csv that still holds the previous demo data is
replaced (ensure_data). If a
party already holds a secret, that secret is copied to the parties missing one; two different existing
secrets are an error. Certificates come from scripts/gen_certs.py and data from scripts/gen_data.py
(the real project tools; their main() runs in this process). The secret is never printed.

In a real deployment none of this runs: each organisation installs its own certificate (from a shared
or cross-signed CA), receives the secret out of band and provides its own data (docs/deployment.md).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import pathlib
import secrets
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

SECRET_BYTES = 32
HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_SCRIPTS = HERE.parent / "scripts"
DEFAULT_SANS = ("localhost", "127.0.0.1", "::1")


class SetupError(Exception):
    """A problem that stops the setup; the message names the file or argument."""


@dataclass(frozen=True)
class Node:
    name: str
    volume: pathlib.Path


def _node_arg(value: str) -> Node:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {value!r}")
    return Node(name, pathlib.Path(path))


def _san_arg(value: str) -> tuple[str, str]:
    name, sep, host = value.partition("=")
    if not sep or not name or not host:
        raise argparse.ArgumentTypeError(f"expected NAME=HOST, got {value!r}")
    return name, host


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--demo-dir", type=pathlib.Path, required=True, help="CA and generated data")
    ap.add_argument(
        "--coordinator", type=_node_arg, required=True, help="NAME=DIR of the coordinator volume"
    )
    ap.add_argument(
        "--party",
        type=_node_arg,
        action="append",
        required=True,
        help="NAME=DIR of a party volume; repeat, in party (ring) order",
    )
    ap.add_argument(
        "--san",
        type=_san_arg,
        action="append",
        default=[],
        help="NAME=HOST: an extra host name or IP in NAME's certificate (e.g. its DNS name)",
    )
    ap.add_argument("--records", type=int, default=1000, help="records per party")
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--corruption", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scripts-dir", type=pathlib.Path, default=DEFAULT_SCRIPTS)
    return ap


def _write_atomic(path: pathlib.Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _load_tool(path: pathlib.Path) -> ModuleType:
    """Import a project script (its ``main(argv) -> int`` is what its command line runs)."""
    name = f"_pprl_tool_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SetupError(f"{path}: cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _run(argv: list[str], what: str) -> None:
    """Run ``python SCRIPT ARGS...`` in this process (saves an interpreter start per call)."""
    _, script, *rest = argv
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = _load_tool(pathlib.Path(script)).main(rest)
    except SystemExit as exc:  # argparse rejected the arguments
        code = exc.code if isinstance(exc.code, int) else 2
    if code:
        tail = "\n".join(out.getvalue().strip().splitlines()[-10:])
        raise SetupError(f"{what} failed (exit {code}):\n{tail}")


def gen_certs_argv(
    scripts: pathlib.Path, ca_dir: pathlib.Path, name: str, hosts: Sequence[str]
) -> list[str]:
    argv = [sys.executable, str(scripts / "gen_certs.py"), "--out", str(ca_dir)]
    for host in hosts:
        argv += ["--host", host]
    return [*argv, name]


def gen_data_argv(args: argparse.Namespace, out: pathlib.Path) -> list[str]:
    return [
        sys.executable,
        str(args.scripts_dir / "gen_data.py"),
        "--parties",
        str(len(args.party)),
        "--records",
        str(args.records),
        "--overlap",
        str(args.overlap),
        "--corruption",
        str(args.corruption),
        "--seed",
        str(args.seed),
        "--out",
        str(out),
    ]


def ensure_certificates(args: argparse.Namespace, log: list[str]) -> None:
    ca_dir = args.demo_dir / "ca"
    hosts: dict[str, list[str]] = {}
    for name, host in args.san:
        # gen_certs always adds the node name, localhost, 127.0.0.1 and ::1.
        if host not in {name, *DEFAULT_SANS} and host not in hosts.get(name, []):
            hosts.setdefault(name, []).append(host)
    for node in [args.coordinator, *args.party]:
        certs = node.volume / "certs"
        if all((certs / f).is_file() for f in ("ca.pem", "node.pem", "node.key")):
            continue
        _run(
            gen_certs_argv(args.scripts_dir, ca_dir, node.name, hosts.get(node.name, [])),
            "gen_certs",
        )
        _write_atomic(certs / "ca.pem", (ca_dir / "ca.pem").read_bytes(), 0o644)
        _write_atomic(certs / "node.pem", (ca_dir / f"{node.name}.pem").read_bytes(), 0o644)
        _write_atomic(certs / "node.key", (ca_dir / f"{node.name}.key").read_bytes(), 0o600)
        # Only the node keeps its private key.
        (ca_dir / f"{node.name}.key").unlink()
        log.append(f"certificate for {node.name}")


def new_secret_text(token_bytes: Callable[[int], bytes] = secrets.token_bytes) -> bytes:
    """SECRET_BYTES random bytes as a line of hex text: raw bytes would lose a last byte that
    happens to be a newline when read back (1 draw in 256); hex reads back whatever they are, once
    it has both digits and letters (the nodes refuse hex of one kind as too regular; redrawn)."""
    while True:
        text = token_bytes(SECRET_BYTES).hex()
        if any(c.isdigit() for c in text) and any(c.isalpha() for c in text):
            return text.encode() + b"\n"


def ensure_secret(parties: Sequence[Node], log: list[str]) -> None:
    existing = {}
    for node in parties:
        path = node.volume / "secret" / "linkage.key"
        if path.is_file():
            existing[node.name] = path.read_bytes()
    if len(set(existing.values())) > 1:
        raise SetupError(
            "the parties' existing secret files differ ("
            + ", ".join(f"{n}/secret/linkage.key" for n in sorted(existing))
            + "); remove the wrong ones"
        )
    secret = next(iter(existing.values())) if existing else new_secret_text()
    for node in parties:
        if node.name not in existing:
            _write_atomic(node.volume / "secret" / "linkage.key", secret, 0o600)
            log.append(f"secret for {node.name}")


def dataset_request(args: argparse.Namespace) -> dict[str, float | int]:
    """What the demo dataset is generated from; a change (e.g. PPRL_DEMO_RECORDS) regenerates it."""
    return {
        "parties": len(args.party),
        "records": args.records,
        "overlap": args.overlap,
        "corruption": args.corruption,
        "seed": args.seed,
    }


def ensure_data(args: argparse.Namespace, log: list[str]) -> None:
    """Give every party its part of the demo dataset made from the requested settings.

    The settings of the current dataset are kept in ``<demo>/data/request.json``. When they differ
    from the requested ones (another ``--records``, i.e. PPRL_DEMO_RECORDS, or seed), the dataset is
    generated again and the parties' records.csv files, which must still hold the previous demo data,
    are replaced; if any holds other content nothing is changed (SetupError naming it).
    Certificates, secrets and results are not touched.
    """
    out = args.demo_dir / "data"
    request_file = out / "request.json"
    wanted = dataset_request(args)
    try:
        current = json.loads(request_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        current = None
    targets = [node.volume / "data" / "records.csv" for node in args.party]
    sources = [out / f"party-{index}.csv" for index in range(len(args.party))]
    if current != wanted or not (out / "truth.csv").is_file():
        # Check every party before anything changes: only the previous demo data may be replaced.
        for target, source in zip(targets, sources, strict=True):
            if target.is_file() and (
                not source.is_file() or target.read_bytes() != source.read_bytes()
            ):
                raise SetupError(
                    f"{target} is not the previous demo data, so it is kept: remove it (or use "
                    "fresh volumes: docker compose down -v) to use a new demo dataset"
                )
        for target in targets:
            target.unlink(missing_ok=True)
        _run(gen_data_argv(args, out), "gen_data")
        log.append(f"dataset of {len(args.party)} x {args.records} records")
    for node, target, source in zip(args.party, targets, sources, strict=True):
        if target.is_file():
            continue
        if not source.is_file():
            raise SetupError(f"{source} is missing: remove {out} to regenerate the dataset")
        _write_atomic(target, source.read_bytes(), 0o644)
        log.append(f"records for {node.name}")
    if current != wanted:
        _write_atomic(request_file, (json.dumps(wanted, sort_keys=True) + "\n").encode(), 0o644)


def setup(args: argparse.Namespace) -> list[str]:
    """Make whatever is missing; returns a list of what was made."""
    names = [n.name for n in [args.coordinator, *args.party]]
    if len(set(names)) != len(names):
        raise SetupError(f"node names must be distinct, got {names}")
    unknown = sorted({name for name, _ in args.san} - set(names))
    if unknown:
        raise SetupError(f"--san names unknown nodes: {unknown}")
    if len(args.party) < 2:
        raise SetupError("at least two --party volumes are needed")
    for script in ("gen_certs.py", "gen_data.py"):
        if not (args.scripts_dir / script).is_file():
            raise SetupError(f"{args.scripts_dir / script} does not exist (--scripts-dir)")
    log: list[str] = []
    ensure_certificates(args, log)
    ensure_secret(args.party, log)
    ensure_data(args, log)
    for node in args.party:
        (node.volume / "results").mkdir(parents=True, exist_ok=True)
    (args.coordinator.volume / "state").mkdir(parents=True, exist_ok=True)
    return log


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        made = setup(args)
    except (SetupError, OSError) as exc:
        print(f"setup_demo: error: {exc}", file=sys.stderr)
        return 2
    if made:
        print("setup_demo: made " + "; ".join(made))
    else:
        print("setup_demo: everything was already in place; nothing changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
