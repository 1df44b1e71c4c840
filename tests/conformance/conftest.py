"""Live conformance suite options and the deployment under test (local processes by default).

    pytest tests/conformance                                   # starts a local deployment itself
    pytest tests/conformance --coordinator HOST:PORT --ca CA.pem --cert OP.pem --key OP.key \
        [--coordinator-name coordinator] [--probe-cert P.pem --probe-key P.key --probe-host IP] \
        [--parameters parameters.json] [--expect-matches N] [--other-cert X.pem --other-key X.key] \
        [--secret-hex HEX]

``--cert/--key`` is an operator identity of the coordinator. Checks that act as the coordinator
towards party nodes (direct Propose/Prepare/Execute probes) need it to be the coordinator's own
identity (the default operator); checks that act as a party need a probe identity signed by the
deployment's CA (``--probe-cert``, e.g. ``scripts/gen_certs.py --out certs conformance-probe``) and
an address the parties can reach the suite at (``--probe-host``); the parties must list the probe
identity in their ``[trust] peers``, and checks that push block digests need the linkage secret's
key material (``--secret-hex``) because a party verifies a co-party's key confirmation directly. Checks whose material is missing
are skipped with the reason. Without ``--coordinator`` the suite starts a coordinator and three
parties as OS processes on loopback (party/synthetic/cluster.py) with mutual TLS, loaded with the
conformance data set (tests/conformance/dataset.py), so every check runs.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conformance import dataset
from tests.conformance.client import Identity

PROBE_NAME = "conformance-probe"


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("conformance", "pprl.v1 live conformance suite")
    g.addoption("--coordinator", default=None, help="HOST:PORT of the deployment's coordinator")
    g.addoption("--coordinator-name", default="coordinator", help="coordinator certificate name")
    g.addoption("--ca", default=None, help="CA bundle (PEM) of the deployment")
    g.addoption("--cert", default=None, help="operator certificate (PEM)")
    g.addoption("--key", default=None, help="operator private key (PEM)")
    g.addoption("--probe-cert", default=None, help="certificate of a probe party identity")
    g.addoption("--probe-key", default=None, help="key of the probe party identity")
    g.addoption("--probe-host", default="127.0.0.1", help="address parties reach the probe at")
    g.addoption("--other-cert", default=None, help="certificate of another party (identity tests)")
    g.addoption("--other-key", default=None, help="key of that other party")
    g.addoption("--parameters", default=None, help="parameters JSON for the known-answer run")
    g.addoption(
        "--secret-hex",
        default=None,
        help="the linkage secret's key material as hex (lets the probe confirm the key to parties)",
    )
    g.addoption("--expect-matches", default=None, type=int, help="matched sets expected (remote)")


@dataclass
class Deployment:
    """What the live checks talk to and what they know about it."""

    coordinator: str
    coordinator_name: str
    ca: bytes
    operator: Identity
    probe: Identity | None
    probe_host: str
    other: Identity | None
    parameters: dict[str, Any]
    expect_matches: int | None
    expected_groups: list[dict[str, str]] | None = None  # local: record ids per shared person
    secret: bytes | None = None  # local only
    cluster: Any = None  # party.synthetic.cluster.Cluster when local
    certs: pathlib.Path | None = None

    @property
    def acts_as_coordinator(self) -> bool:
        return self.operator.name == self.coordinator_name

    def result_rows(self, party: str, run_id: str) -> list[dict[str, str]] | None:
        """Rows of a party's matches.csv when the deployment is local, else None."""
        if self.cluster is None:
            return None
        rows: list[dict[str, str]] = self.cluster.results(party, run_id)
        return rows


def _read(path: str | None, what: str) -> bytes:
    if not path:
        raise pytest.UsageError(f"--{what} is required with --coordinator")
    return pathlib.Path(path).read_bytes()


def _remote(config: pytest.Config) -> Deployment:
    opt = config.getoption
    probe = other = None
    if opt("probe_cert") and opt("probe_key"):
        probe = Identity.load(
            _read(opt("probe_cert"), "probe-cert"), _read(opt("probe_key"), "probe-key")
        )
    if opt("other_cert") and opt("other_key"):
        other = Identity.load(
            _read(opt("other_cert"), "other-cert"), _read(opt("other_key"), "other-key")
        )
    params_path = opt("parameters")
    if params_path:
        p = pathlib.Path(params_path)
        params = json.loads(p.read_text(encoding="utf-8"))
        if isinstance(params.get("schema"), str):
            params["schema"] = json.loads((p.parent / params["schema"]).read_text("utf-8"))
    else:
        params = dataset.parameters()
    return Deployment(
        coordinator=opt("coordinator"),
        coordinator_name=opt("coordinator_name"),
        ca=_read(opt("ca"), "ca"),
        operator=Identity.load(_read(opt("cert"), "cert"), _read(opt("key"), "key")),
        probe=probe,
        probe_host=opt("probe_host"),
        other=other,
        parameters=params,
        expect_matches=opt("expect_matches"),
        secret=bytes.fromhex(opt("secret_hex")) if opt("secret_hex") else None,
    )


@pytest.fixture(scope="session")
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    config = request.config
    if config.getoption("coordinator", default=None):
        yield _remote(config)
        return
    from party.synthetic.cluster import SECRET, Cluster, make_certs

    root = tmp_path_factory.mktemp("conformance")
    csvs = dataset.write_tables(root / "data")
    cluster = Cluster(root, list(dataset.PARTIES), csvs, dataset.schema())
    make_certs(cluster.certs, [PROBE_NAME])  # same CA (gen_certs reuses ca.pem/ca.key)
    for name in dataset.PARTIES:  # the probe acts as a co-party: each party must trust it
        peers = [p for p in (*dataset.PARTIES, PROBE_NAME) if p != name]
        cluster.nodes[name].env["PPRL_TRUST_PEERS"] = ",".join(peers)
    certs = cluster.certs

    def ident(name: str) -> Identity:
        return Identity.load(
            (certs / f"{name}.pem").read_bytes(), (certs / f"{name}.key").read_bytes()
        )

    try:
        cluster.start()
        yield Deployment(
            coordinator=cluster.coordinator.address,
            coordinator_name="coordinator",
            ca=(certs / "ca.pem").read_bytes(),
            operator=ident("coordinator"),
            probe=ident(PROBE_NAME),
            probe_host="127.0.0.1",
            other=ident(dataset.PARTIES[-1]),
            parameters=dataset.parameters(),
            expect_matches=len(dataset.SHARED),
            expected_groups=dataset.expected_groups(),
            secret=SECRET,
            cluster=cluster,
            certs=certs,
        )
    finally:
        cluster.stop_all()
