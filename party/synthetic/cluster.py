"""A local cluster of real OS processes: one coordinator and N party nodes on loopback (mutual TLS).

Used by the networked simulation harness (party/synthetic/network_sim.py), the integration and
conformance tests and scripts/bench_e2e.py. It needs a source checkout (it runs scripts/gen_certs.py
and reads examples/schema.json) and starts the nodes through their real entry points. Ports are
chosen by the OS (each node binds port 0 and writes its bound port to a file given through
PPRL_PORT_FILE); readiness is awaited through the gRPC health service, never with fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
PY = sys.executable
# The fixed secret of test clusters (32 raw bytes of key material, written as is to the nodes'
# secret file); simulations pass their own (Cluster.secret).
SECRET = bytes.fromhex("a25418502af44106e329be60c5aa0687b4ff912473917964330cc1e39d844a83")


PARTY_ENTRY = "party.cli"  # the real `pprl-party` entry point
EXTRA_MARK = "\n# -- extra tables set by the test --\n"


def party_names(n: int) -> list[str]:
    return [f"party-{chr(ord('a') + i)}" for i in range(n)]


def make_certs(folder: pathlib.Path, names: Sequence[str], ca_name: str = "pprl test CA") -> None:
    subprocess.run(
        [
            PY,
            str(ROOT / "scripts" / "gen_certs.py"),
            "--out",
            str(folder),
            "--ca-name",
            ca_name,
            *names,
        ],
        check=True,
        capture_output=True,
    )


def write_schema(path: pathlib.Path, filter_bits: int) -> dict[str, Any]:
    schema = json.loads((ROOT / "examples" / "schema.json").read_text(encoding="utf-8"))
    schema["l"] = filter_bits
    path.write_text(json.dumps(schema, indent=2), encoding="utf-8")
    return schema


def write_parameters(
    path: pathlib.Path,
    parties: Sequence[str],
    schema: Mapping[str, Any],
    match_threshold: float = 0.8,
    segment_threshold: float = 0.0,
    mode: str = "segments",
    compute_parties: Sequence[str] = (),
    target: str | None = "all",
) -> pathlib.Path:
    """Write a parameters file; ``target`` is written as given (this helper's callers compare
    target-all sets, so "all"; None leaves it out: the file default, target any)."""
    obj: dict[str, Any] = {
        "version": 1,
        "parties": list(parties),
        "schema": schema,
        "match_threshold": match_threshold,
        "segment_threshold": segment_threshold,
        "one_to_one": False,
        "max_block_size": None,
    }
    if mode != "segments":
        obj["mode"] = mode
    if compute_parties:
        obj["compute_parties"] = list(compute_parties)
    if target is not None:
        obj["target"] = target
    path.write_text(json.dumps(obj, indent=2), encoding="utf-8")
    return path


def generate_data(
    folder: pathlib.Path, parties: int, records: int, seed: int = 7
) -> list[pathlib.Path]:
    from party.synthetic.generator import generate, write_dataset

    ds = generate(parties, records, overlap=0.6, corruption=0.2, seed=seed)
    return write_dataset(ds, folder)


@dataclass
class Node:
    name: str
    config: pathlib.Path
    env: dict[str, str]
    port_file: pathlib.Path
    log: pathlib.Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        return int(self.port_file.read_text().strip())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Cluster:
    """Files and processes of one local deployment under ``root``."""

    root: pathlib.Path
    parties: list[str]
    csvs: list[pathlib.Path]
    schema: dict[str, Any]
    liveness: float = 6.0
    stage_timeout: float = 20.0
    secret: bytes = SECRET
    id_column: str = "rec_id"
    # Helper compute nodes (mode mpc3 with P = 2): node processes with role "compute", no data.
    helpers: list[str] = field(default_factory=list)
    certs: pathlib.Path = field(init=False)
    coordinator: Node = field(init=False)
    nodes: dict[str, Node] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.certs = self.root / "certs"
        if not (self.certs / "ca.pem").exists():
            make_certs(self.certs, ["coordinator", "intruder", *self.all_nodes])
        (self.root / "secret.key").write_bytes(self.secret)
        cfg = self.root / "coordinator.toml"
        cfg.write_text(
            "[coordinator]\n"
            'name = "coordinator"\n'
            'listen = "127.0.0.1:0"\n'
            'state_db = "state/coordinator.sqlite"\n'
            'port_file = "coordinator.port"\n'
            f"allowed_parties = {json.dumps(self.all_nodes)}\n"
            "[tls]\n"
            'ca = "certs/ca.pem"\ncert = "certs/coordinator.pem"\nkey = "certs/coordinator.key"\n'
            "[timeouts]\n"
            f"rpc = 10.0\nprepare = 60.0\nrun = 120.0\nliveness = {self.liveness}\n",
            encoding="utf-8",
        )
        self.coordinator = Node(
            "coordinator", cfg, {}, self.root / "coordinator.port", self.root / "coordinator.log"
        )
        for name, data in zip(self.parties, self.csvs, strict=True):
            pcfg = self.root / f"{name}.toml"
            pcfg.write_text(
                "[node]\n"
                f'name = "{name}"\n'
                'listen = "127.0.0.1:0"\n'
                'coordinator = "127.0.0.1:1"\n'  # replaced through PPRL_COORDINATOR at start
                f'port_file = "{name}.port"\n'
                "[data]\n"
                f'csv = "{data}"\n'
                f"id_column = {json.dumps(self.id_column)}\n"
                'secret_file = "secret.key"\n'
                f'results = "results/{name}"\n'
                "[tls]\n"
                f'ca = "certs/ca.pem"\ncert = "certs/{name}.pem"\nkey = "certs/{name}.key"\n'
                "[timeouts]\n"
                f"rpc = 10.0\nstage = {self.stage_timeout}\nheartbeat = 0.5\nregister = 2.0\n"
                "[trust]\n"
                f"peers = {json.dumps([p for p in self.all_nodes if p != name])}\n"
                # a harness, not a deployment: no audit gate unless a test sets [audit.policy]
                "[audit]\ndefault_policy = false\n",
                encoding="utf-8",
            )
            self.nodes[name] = Node(
                name, pcfg, {}, self.root / f"{name}.port", self.root / f"{name}.log"
            )
        for name in self.helpers:
            hcfg = self.root / f"{name}.toml"
            hcfg.write_text(
                "[node]\n"
                f'name = "{name}"\n'
                'role = "compute"\n'
                'listen = "127.0.0.1:0"\n'
                'coordinator = "127.0.0.1:1"\n'
                f'port_file = "{name}.port"\n'
                "[tls]\n"
                f'ca = "certs/ca.pem"\ncert = "certs/{name}.pem"\nkey = "certs/{name}.key"\n'
                "[timeouts]\n"
                f"rpc = 10.0\nstage = {self.stage_timeout}\nheartbeat = 0.5\n"
                "[trust]\n"
                f"peers = {json.dumps(self.all_nodes)}\n",
                encoding="utf-8",
            )
            self.nodes[name] = Node(
                name, hcfg, {}, self.root / f"{name}.port", self.root / f"{name}.log"
            )

    @property
    def all_nodes(self) -> list[str]:
        """The parties, then the helper compute nodes."""
        return [*self.parties, *self.helpers]

    # -- processes -----------------------------------------------------------------------------

    def _spawn(self, node: Node, argv: list[str], extra_env: Mapping[str, str] | None) -> None:
        with contextlib.suppress(FileNotFoundError):
            node.port_file.unlink()
        env = {**os.environ, **node.env, **(extra_env or {})}
        env.setdefault("PYTHONUNBUFFERED", "1")
        log = node.log.open("ab")
        node.proc = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root
        )
        log.close()

    def start_coordinator(self, extra_env: Mapping[str, str] | None = None) -> None:
        self._spawn(
            self.coordinator,
            [PY, "-m", "coordinator.cli", "serve", "--config", str(self.coordinator.config)],
            extra_env,
        )
        self.wait_healthy(self.coordinator)

    def start_party(self, name: str, extra_env: Mapping[str, str] | None = None) -> None:
        node = self.nodes[name]
        env = {"PPRL_COORDINATOR": self.coordinator.address, **(extra_env or {})}
        self._spawn(node, [PY, "-m", PARTY_ENTRY, "serve", "--config", str(node.config)], env)

    def start(self, extra_env: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """Start the coordinator and every node; return when all are SERVING and registered."""
        self.start_coordinator()
        for name in self.all_nodes:
            self.start_party(name, (extra_env or {}).get(name))
        for name in self.all_nodes:
            self.wait_healthy(self.nodes[name])
        self.wait_registered(self.all_nodes)

    def set_extra_toml(self, name: str, text: str) -> None:
        """Replace the extra TOML tables appended to ``name``'s config (e.g. [audit.policy])."""
        node = self.nodes[name]
        base = node.config.read_text(encoding="utf-8").split(EXTRA_MARK)[0]
        node.config.write_text(base + (EXTRA_MARK + text if text else ""), encoding="utf-8")

    def restart_party(self, name: str, extra_env: Mapping[str, str] | None = None) -> None:
        """Stop ``name`` (if running), start it with ``extra_env``, wait for health + registration."""
        self.stop(name)
        self.start_party(name, extra_env)
        self.wait_healthy(self.nodes[name])
        self.wait_registered([name])

    def wait_port(self, node: Node, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not node.port_file.exists():
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(
                    f"{node.name} exited with {node.proc.returncode}: {self.tail(node)}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node.name} did not bind a port: {self.tail(node)}")
            time.sleep(0.05)

    def wait_healthy(self, node: Node, timeout: float = 60.0, service: str = "") -> None:
        """Block until the node's gRPC health service answers SERVING for ``service`` ("": the
        node is up; ``WARM_SERVICE``: its start-up warm-up is over)."""
        self.wait_port(node, timeout)
        deadline = time.monotonic() + timeout
        while True:
            status = asyncio.run(self.health(node.name, service))
            if status == "SERVING":
                return
            if node.proc is not None and node.proc.poll() is not None:
                raise RuntimeError(
                    f"{node.name} exited with {node.proc.returncode}: {self.tail(node)}"
                )
            if time.monotonic() > deadline:
                what = f"{service or 'health'} not SERVING"
                raise TimeoutError(f"{node.name} {what} ({status}): {self.tail(node)}")
            time.sleep(0.05)

    def wait_warm(self, names: Sequence[str], timeout: float = 600.0) -> None:
        """Block until every node in ``names`` reports its start-up warm-up over (compiled loops
        loaded, encoding lanes started): what a long-running deployment has before its runs."""
        from party.node.probe import WARM_SERVICE

        for name in names:
            self.wait_healthy(self.nodes[name], timeout, WARM_SERVICE)

    async def health(self, name: str, service: str = "") -> str:
        from proto.transport import check_health

        node = self.coordinator if name == "coordinator" else self.nodes[name]
        return await check_health(self.security("coordinator"), node.address, name, 2.0, service)

    def wait_registered(self, names: Sequence[str], timeout: float = 30.0) -> None:
        """Block until the coordinator lists every name with its current address."""
        deadline = time.monotonic() + timeout
        want = {n: self.nodes[n].address for n in names}
        while True:
            listed = asyncio.run(self._list_parties())
            if all(listed.get(n) == a for n, a in want.items()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"parties not registered: {want} vs {listed}")
            asyncio.run(asyncio.sleep(0.05))

    async def _list_parties(self) -> dict[str, str]:
        from proto import coordinator_pb2, coordinator_pb2_grpc

        sec = self.security("coordinator")
        async with sec.channel(
            self.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
        ) as ch:
            resp = await coordinator_pb2_grpc.CoordinatorStub(ch).ListParties(
                coordinator_pb2.ListPartiesRequest(), timeout=5.0
            )
        return {p.name: p.address for p in resp.parties}

    def security(self, name: str, certs: pathlib.Path | None = None) -> Any:
        from proto.transport import Security, TlsMaterial

        d = certs or self.certs
        return Security(
            name=name,
            tls=TlsMaterial(
                ca=(d / "ca.pem").read_bytes(),
                cert=(d / f"{name}.pem").read_bytes(),
                key=(d / f"{name}.key").read_bytes(),
            ),
        )

    def signal(self, name: str, sig: int) -> None:
        node = self.coordinator if name == "coordinator" else self.nodes[name]
        assert node.proc is not None
        node.proc.send_signal(sig)

    def stop(self, name: str, timeout: float = 10.0) -> None:
        node = self.coordinator if name == "coordinator" else self.nodes[name]
        if node.proc is None or node.proc.poll() is not None:
            return
        node.proc.send_signal(signal.SIGCONT)
        node.proc.terminate()
        try:
            node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait()

    def stop_all(self) -> None:
        for name in self.all_nodes:
            self.stop(name)
        self.stop("coordinator")

    def alive(self, name: str) -> bool:
        node = self.coordinator if name == "coordinator" else self.nodes[name]
        return node.proc is not None and node.proc.poll() is None

    def log_text(self, name: str) -> str:
        node = self.coordinator if name == "coordinator" else self.nodes[name]
        return node.log.read_text(errors="replace")

    def tail(self, node: Node, lines: int = 30) -> str:
        try:
            return "\n".join(node.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # -- runs ----------------------------------------------------------------------------------

    def run(
        self, parameters: pathlib.Path, timeout: float = 90.0
    ) -> subprocess.CompletedProcess[str]:
        """`pprl-coordinator run` as a subprocess (the real CLI)."""
        return subprocess.run(
            [
                PY,
                "-m",
                "coordinator.cli",
                "run",
                "--config",
                str(self.coordinator.config),
                "--parameters",
                str(parameters),
                "--timeout",
                str(timeout),
            ],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout + 30,
            env={**os.environ, "COLUMNS": "200"},
        )

    async def start_run(self, parameters: pathlib.Path, timeout: float = 90.0) -> str:
        from proto import coordinator_pb2, coordinator_pb2_grpc, linkage

        sec = self.security("coordinator")
        async with sec.channel(
            self.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
        ) as ch:
            resp = await coordinator_pb2_grpc.CoordinatorStub(ch).StartRun(
                coordinator_pb2.StartRunRequest(
                    parameters=linkage.load_parameters(parameters), timeout_seconds=timeout
                ),
                timeout=30.0,
            )
        return resp.run_id

    async def wait_run(
        self, run_id: str, timeout: float = 120.0, on_update: Callable[[Any], None] | None = None
    ) -> Any:
        """Follow WatchRun until the run is DONE or FAILED; return the final RunStatus.

        ``on_update`` is called with every RunStatus the coordinator streams (progress display).
        """
        from proto import coordinator_pb2, coordinator_pb2_grpc

        sec = self.security("coordinator")
        last = None
        async with sec.channel(
            self.coordinator.address, "coordinator", ["pprl.v1.Coordinator"]
        ) as ch:
            stub = coordinator_pb2_grpc.CoordinatorStub(ch)
            async for update in stub.WatchRun(
                coordinator_pb2.WatchRunRequest(run_id=run_id), timeout=timeout
            ):
                last = update.status
                if on_update is not None:
                    on_update(last)
        return last

    def results(self, name: str, run_id: str) -> list[dict[str, str]]:
        path = self.root / "results" / name / run_id / "matches.csv"
        with path.open(encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))

    def result_dir(self, name: str, run_id: str) -> pathlib.Path:
        return self.root / "results" / name / run_id
