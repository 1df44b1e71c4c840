"""Party node configuration: frozen dataclasses loaded from TOML, then PPRL_* environment overrides.

File format (``examples/party.toml``; relative paths are relative to the TOML file)::

    [node]
    name = "party-a"                  # must equal the CN of the node certificate
    listen = "127.0.0.1:50061"        # host:port to bind; port 0 picks a free port
    advertise = "127.0.0.1:50061"     # optional: address the other nodes dial (default: listen,
                                      #   with the bound port when listen uses port 0)
    coordinator = "127.0.0.1:50060"   # host:port of the coordinator
    coordinator_name = "coordinator"  # optional: certificate identity of the coordinator
    port_file = "run/party-a.port"    # optional: the bound port is written here once serving
    role = "party"                    # optional: "party" (default) or "compute": a helper compute
                                      #   node of mpc3 runs with P = 2; it holds no data, so it
                                      #   needs no [data] table (and never the linkage secret)

    [data]
    csv = "data/party-a.csv"          # the party's records (CSV with header)
    id_column = "id"                  # optional: column with the party's record ids
    secret_file = "secret.key"        # linkage secret shared by the parties out of band
    schema = "schema.json"            # optional: pin; proposals with another schema are rejected
    results = "results/party-a"       # results go to <results>/<run-id>/matches.csv

    [tls]                             # required unless serving with --insecure
    ca = "certs/ca.pem"
    cert = "certs/party-a.pem"
    key = "certs/party-a.key"

    [timeouts]                        # seconds, all optional
    rpc = 30.0                        # deadline of every outgoing unary call / stream
    stage = 300.0                     # longest wait for another party within one stage
    heartbeat = 2.0                   # interval of liveness messages to the coordinator
    register = 30.0                   # interval of re-registration with the coordinator

    [limits]                          # optional
    memory_budget_mib = 3072          # the node's memory for its runs: resident data (encodings,
                                      #   received segments, indexes) and, from what they leave,
                                      #   comparison, row stores (spill beyond) and solver
    workers = 0                       # processes for encoding, threads for comparison
                                      #   (0: every core this node may use)

    [cluster]                         # optional: encode and compare on a Dask cluster the
                                      #   party runs itself
    scheduler = "local"               # "local": an embedded Dask LocalCluster of `workers`
                                      #   processes (TLS with throw-away certificates), or the
                                      #   address of the party's own scheduler, "tls://host:8786"
    tls_ca = "certs/cluster-ca.pem"   # required with a scheduler address: the party's cluster
    tls_cert = "certs/node.pem"       #   CA, and the node's client certificate and key
    tls_key = "certs/node.key"

    [trust]                           # required to take part in runs
    peers = ["party-b", "party-c"]    # certificate identities this party agrees to send run data
                                      #   to (co-parties, helper compute nodes); a proposal naming
                                      #   anyone else, or the coordinator, is refused

    [audit]                           # optional
    default_policy = true             # false: without [audit.policy] no policy applies (tests and
                                      #   simulations only; every run is allowed)

    [audit.policy]                    # optional: limits of the self-audit gate, validated by
    max_insider_record_one_to_one = 0.05  # party.audit.policy.AuditPolicy.from_mapping; without
                                      #   this table the shipped DEFAULT_POLICY applies (docs/audit.md)

Environment overrides (applied after the file; paths relative to the working directory):
PPRL_NODE_NAME, PPRL_LISTEN, PPRL_ADVERTISE, PPRL_COORDINATOR, PPRL_COORDINATOR_NAME,
PPRL_PORT_FILE, PPRL_NODE_ROLE, PPRL_DATA_CSV, PPRL_ID_COLUMN, PPRL_SECRET_FILE, PPRL_SCHEMA, PPRL_RESULTS_DIR,
PPRL_TLS_CA, PPRL_TLS_CERT, PPRL_TLS_KEY, PPRL_RPC_TIMEOUT, PPRL_STAGE_TIMEOUT,
PPRL_HEARTBEAT_INTERVAL, PPRL_REGISTER_INTERVAL, PPRL_MEMORY_BUDGET_MIB, PPRL_TRUST_PEERS (comma-separated names),
PPRL_WORKERS, PPRL_CLUSTER_SCHEDULER, PPRL_CLUSTER_TLS_CA, PPRL_CLUSTER_TLS_CERT,
PPRL_CLUSTER_TLS_KEY, PPRL_AUDIT_DEFAULT_POLICY, and PPRL_AUDIT_<KEY> for every [audit.policy] key (e.g.
PPRL_AUDIT_MAX_INSIDER_RECORD_ONE_TO_ONE=0.05; tables as ``field=value,field=value``,
allowed_modes as ``mpc3,segments``). An override set to the empty string clears an optional
key.

Secret file: at least 32 random bytes (256 bits) of key material, as raw bytes
(``head -c 32 /dev/urandom``; a trailing newline is dropped when 32 bytes remain) or as hex /
base64 text (``openssl rand -hex 32``), which is decoded; passphrases are refused
(party.encoding.secret.secret_from_file_bytes says exactly how). The secret is never logged;
``repr`` of the config shows only the path.
"""

from __future__ import annotations

import os
import pathlib
import re
import tomllib
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from party.encoding.secret import SecretError, secret_from_file_bytes
from party.errors import PprlError
from proto.transport import check_address

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
ROLES = ("party", "compute")

# env var -> (section, key, kind); kind is "str", "path", "float" or "int"
ENV_OVERRIDES: dict[str, tuple[str, str, str]] = {
    "PPRL_NODE_NAME": ("node", "name", "str"),
    "PPRL_LISTEN": ("node", "listen", "str"),
    "PPRL_ADVERTISE": ("node", "advertise", "str"),
    "PPRL_COORDINATOR": ("node", "coordinator", "str"),
    "PPRL_COORDINATOR_NAME": ("node", "coordinator_name", "str"),
    "PPRL_PORT_FILE": ("node", "port_file", "path"),
    "PPRL_NODE_ROLE": ("node", "role", "str"),
    "PPRL_DATA_CSV": ("data", "csv", "path"),
    "PPRL_ID_COLUMN": ("data", "id_column", "str"),
    "PPRL_SECRET_FILE": ("data", "secret_file", "path"),
    "PPRL_SCHEMA": ("data", "schema", "path"),
    "PPRL_RESULTS_DIR": ("data", "results", "path"),
    "PPRL_TLS_CA": ("tls", "ca", "path"),
    "PPRL_TLS_CERT": ("tls", "cert", "path"),
    "PPRL_TLS_KEY": ("tls", "key", "path"),
    "PPRL_RPC_TIMEOUT": ("timeouts", "rpc", "float"),
    "PPRL_STAGE_TIMEOUT": ("timeouts", "stage", "float"),
    "PPRL_HEARTBEAT_INTERVAL": ("timeouts", "heartbeat", "float"),
    "PPRL_REGISTER_INTERVAL": ("timeouts", "register", "float"),
    "PPRL_MEMORY_BUDGET_MIB": ("limits", "memory_budget_mib", "int"),
    "PPRL_TRUST_PEERS": ("trust", "peers", "list"),
    "PPRL_AUDIT_DEFAULT_POLICY": ("audit", "default_policy", "bool"),
    # and PPRL_AUDIT_<KEY> for every [audit.policy] key: party.audit.policy.POLICY_ENV
    "PPRL_WORKERS": ("limits", "workers", "int"),
    "PPRL_CLUSTER_SCHEDULER": ("cluster", "scheduler", "str"),
    "PPRL_CLUSTER_TLS_CA": ("cluster", "tls_ca", "path"),
    "PPRL_CLUSTER_TLS_CERT": ("cluster", "tls_cert", "path"),
    "PPRL_CLUSTER_TLS_KEY": ("cluster", "tls_key", "path"),
}

_KNOWN: dict[str, set[str]] = {
    "node": {"name", "listen", "advertise", "coordinator", "coordinator_name", "port_file", "role"},
    "data": {"csv", "id_column", "secret_file", "schema", "results"},
    "tls": {"ca", "cert", "key"},
    "timeouts": {"rpc", "stage", "heartbeat", "register"},
    "limits": {"memory_budget_mib", "workers"},
    "trust": {"peers"},
    "audit": {"policy", "default_policy"},
    "cluster": {"scheduler", "tls_ca", "tls_cert", "tls_key"},
}


class ConfigError(PprlError):
    """The configuration is invalid; ``problems`` lists every problem, each naming its key."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        lines = "\n  - ".join(self.problems)
        super().__init__(f"{source}: invalid configuration:\n  - {lines}")


@dataclass(frozen=True)
class TlsConfig:
    """Mutual-TLS material: CA bundle, node certificate chain and private key (PEM files)."""

    ca: pathlib.Path | None = None
    cert: pathlib.Path | None = None
    key: pathlib.Path | None = None

    @property
    def complete(self) -> bool:
        return self.ca is not None and self.cert is not None and self.key is not None

    def read(self) -> tuple[bytes, bytes, bytes]:
        """(ca, cert, key) PEM bytes; ConfigError naming the file that cannot be read."""
        out = []
        for key in ("ca", "cert", "key"):
            path = getattr(self, key)
            if path is None:
                raise ConfigError("tls", [f"tls.{key} is not set"])
            try:
                out.append(path.read_bytes())
            except OSError as exc:
                raise ConfigError(
                    "tls", [f"tls.{key}: cannot read {path} ({exc.strerror})"]
                ) from None
        return out[0], out[1], out[2]


@dataclass(frozen=True)
class Timeouts:
    rpc: float = 30.0
    stage: float = 300.0
    heartbeat: float = 2.0
    register: float = 30.0


@dataclass(frozen=True)
class ClusterConfig:
    """A Dask cluster of the party's own: "local" (embedded) or a scheduler address with TLS."""

    scheduler: str = "local"
    tls_ca: pathlib.Path | None = None
    tls_cert: pathlib.Path | None = None
    tls_key: pathlib.Path | None = None

    @property
    def embedded(self) -> bool:
        return self.scheduler == "local"


@dataclass(frozen=True)
class PartyConfig:
    """Everything a party node needs; built by load_party_config."""

    name: str
    listen: str
    coordinator: str
    data_csv: pathlib.Path
    secret_file: pathlib.Path
    results_dir: pathlib.Path
    advertise: str | None = None
    coordinator_name: str = "coordinator"
    port_file: pathlib.Path | None = None
    id_column: str | None = None
    schema: pathlib.Path | None = None
    tls: TlsConfig = field(default_factory=TlsConfig)
    timeouts: Timeouts = field(default_factory=Timeouts)
    audit_policy: Mapping[str, Any] | None = None  # None: no gate ([audit] default_policy = false)
    audit_policy_origin: str = "[audit.policy]"  # or "default policy", with PPRL_AUDIT_* overrides
    memory_budget_mib: int = 3072  # what it must hold: docs/scaling.md, "Memory"
    trusted_peers: frozenset[str] = frozenset()
    workers: int = 0  # 0: every core this node may use
    cluster: ClusterConfig | None = None  # None: worker processes/threads on this machine
    role: str = "party"
    source: str = "<config>"

    @property
    def is_compute_only(self) -> bool:
        """A helper compute node (mpc3, P = 2): no data, no secret, no results.

        Its data_csv, secret_file and results_dir are the empty path and never read.
        """
        return self.role == "compute"

    def read_secret(self) -> bytes:
        """The linkage secret (see the module docstring). Never log the result."""
        return read_secret_file(self.secret_file, "data.secret_file")


def read_secret_file(path: pathlib.Path, key: str) -> bytes:
    """The key material of the secret file (party.encoding.secret.secret_from_file_bytes)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            str(path), [f"{key}: cannot read the secret file ({exc.strerror})"]
        ) from None
    try:
        return secret_from_file_bytes(data, key)
    except SecretError as exc:
        raise ConfigError(str(path), [str(exc)]) from None


def _load_toml(path: pathlib.Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file ({exc.strerror})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML ({exc})"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(path), [f"not UTF-8 text (invalid byte at offset {exc.start}); TOML is UTF-8"]
        ) from None


def apply_env(
    raw: dict[str, Any],
    env: Mapping[str, str],
    table: Mapping[str, tuple[str, str, str]],
    problems: list[str],
) -> dict[str, tuple[str, str]]:
    """Apply overrides in place; return {section.key: (env var, kind)} for the keys overridden."""
    overridden: dict[str, tuple[str, str]] = {}
    for var, (section, key, kind) in table.items():
        if var not in env:
            continue
        value: Any = env[var]
        sect = raw.setdefault(section, {})
        if not isinstance(sect, dict):
            continue
        if value == "":
            sect.pop(key, None)
            continue
        if kind == "float":
            try:
                value = float(value)
            except ValueError:
                problems.append(f"{var}: expected a number")
                continue
        elif kind == "list":
            value = [item.strip() for item in value.split(",") if item.strip()]
        elif kind == "int":
            try:
                value = int(value)
            except ValueError:
                problems.append(f"{var}: expected a whole number")
                continue
        elif kind == "bool":
            if value.lower() not in ("true", "false", "1", "0"):
                problems.append(f"{var}: expected true or false")
                continue
            value = value.lower() in ("true", "1")
        sect[key] = value
        overridden[f"{section}.{key}"] = (var, kind)
    return overridden


def resolve_path(
    value: Any, key: str, base: pathlib.Path, from_env: bool, problems: list[str]
) -> pathlib.Path | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        problems.append(f"{key}: expected a path")
        return None
    p = pathlib.Path(value).expanduser()
    if not p.is_absolute():
        p = (pathlib.Path.cwd() if from_env else base) / p
    return p


def whole_number(value: Any, default: int, minimum: int, problem: str, problems: list[str]) -> int:
    """``value`` if it is an int >= minimum, ``default`` if absent; else records ``problem``."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        problems.append(problem)
        return default
    return value


def parse_timeouts(raw: Any, problems: list[str], defaults: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    if not isinstance(raw, dict):
        problems.append("timeouts: expected a table")
        return out
    for key, value in raw.items():
        if not hasattr(defaults, key):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            problems.append(f"timeouts.{key}: expected a positive number of seconds")
            continue
        out[key] = float(value)
    return out


def load_party_config(
    path: str | pathlib.Path,
    *,
    env: Mapping[str, str] | None = None,
    require_tls: bool = True,
    check_files: bool = True,
) -> PartyConfig:
    """Load ``path``, apply PPRL_* overrides from ``env`` (default os.environ) and validate.

    Every problem is reported at once in one ConfigError. ``require_tls=False`` (``--insecure``)
    makes the [tls] table optional; ``check_files=False`` skips checks that files exist.
    """
    path = pathlib.Path(path)
    raw = _load_toml(path)
    env = os.environ if env is None else env
    base = path.resolve().parent
    problems: list[str] = []
    for section, value in raw.items():
        if section not in _KNOWN:
            problems.append(f"unknown table [{section}]")
        elif not isinstance(value, dict):
            problems.append(f"{section}: expected a table")
        else:
            unknown = sorted(set(value) - _KNOWN[section])
            problems.extend(f"{section}.{k}: unknown key" for k in unknown)
    overridden = apply_env(raw, env, ENV_OVERRIDES, problems)

    def get(section: str, key: str) -> Any:
        sect = raw.get(section, {})
        return sect.get(key) if isinstance(sect, dict) else None

    def pathof(section: str, key: str, required: bool) -> pathlib.Path | None:
        value = get(section, key)
        if value is None:
            if required:
                problems.append(f"{section}.{key}: required")
            return None
        return resolve_path(
            value, f"{section}.{key}", base, f"{section}.{key}" in overridden, problems
        )

    name = get("node", "name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append("node.name: required, lower-case letters, digits and '-' (max 63)")
        name = ""
    listen = check_address(get("node", "listen"), "node.listen", problems, allow_port_zero=True)
    advertise = get("node", "advertise")
    if advertise is not None:
        advertise = check_address(advertise, "node.advertise", problems, allow_port_zero=False)
    coordinator = check_address(
        get("node", "coordinator"), "node.coordinator", problems, allow_port_zero=False
    )
    coordinator_name = get("node", "coordinator_name") or "coordinator"
    if not isinstance(coordinator_name, str) or not NAME_RE.match(coordinator_name):
        problems.append("node.coordinator_name: lower-case letters, digits and '-'")
    role = get("node", "role") or "party"
    if role not in ROLES:
        problems.append(f"node.role: expected one of {list(ROLES)}, got {role!r}")
        role = "party"
    data_required = role == "party"
    id_column = get("data", "id_column")
    if id_column is not None and (not isinstance(id_column, str) or not id_column):
        problems.append("data.id_column: expected a column name")
        id_column = None

    data_csv = pathof("data", "csv", data_required)
    secret_file = pathof("data", "secret_file", data_required)
    schema = pathof("data", "schema", False)
    results = pathof("data", "results", data_required)
    port_file = pathof("node", "port_file", False)
    tls = TlsConfig(
        pathof("tls", "ca", False), pathof("tls", "cert", False), pathof("tls", "key", False)
    )
    if require_tls and not tls.complete:
        missing = [k for k in ("ca", "cert", "key") if getattr(tls, k) is None]
        problems.extend(
            f"tls.{k}: required for mutual TLS (or serve with --insecure)" for k in missing
        )
    if check_files:
        for key, p in (
            ("data.csv", data_csv),
            ("data.secret_file", secret_file),
            ("data.schema", schema),
            ("tls.ca", tls.ca),
            ("tls.cert", tls.cert),
            ("tls.key", tls.key),
        ):
            if p is not None and not p.is_file():
                problems.append(f"{key}: file {p} does not exist")
    timeouts = Timeouts(**parse_timeouts(raw.get("timeouts", {}), problems, Timeouts()))
    budget = whole_number(
        get("limits", "memory_budget_mib"),
        PartyConfig.memory_budget_mib,
        16,
        "limits.memory_budget_mib: expected a whole number of MiB, at least 16",
        problems,
    )
    peers = get("trust", "peers")
    trusted_peers: frozenset[str] = frozenset()
    if peers is not None:
        if not isinstance(peers, list) or not all(
            isinstance(p, str) and NAME_RE.match(p) for p in peers
        ):
            problems.append(
                "trust.peers: expected a list of node names (lower-case letters, digits and '-')"
            )
        else:
            trusted_peers = frozenset(peers)
            if coordinator_name in trusted_peers:
                problems.append(
                    "trust.peers: must not name the coordinator "
                    f"({coordinator_name}): it never receives run data"
                )
    policy, policy_origin = _audit_policy(raw.get("audit"), env, base, problems)
    workers = whole_number(
        get("limits", "workers"),
        PartyConfig.workers,
        0,
        "limits.workers: expected a whole number >= 0 (0: every core)",
        problems,
    )
    cluster: ClusterConfig | None = None
    if isinstance(raw.get("cluster"), dict) and raw["cluster"]:
        cluster = ClusterConfig(
            scheduler=get("cluster", "scheduler") or "local",
            tls_ca=pathof("cluster", "tls_ca", False),
            tls_cert=pathof("cluster", "tls_cert", False),
            tls_key=pathof("cluster", "tls_key", False),
        )
        if not isinstance(cluster.scheduler, str):
            problems.append('cluster.scheduler: expected "local" or "tls://host:port"')
        elif not cluster.embedded:
            if not cluster.scheduler.startswith("tls://"):
                problems.append(
                    'cluster.scheduler: expected "local" or a "tls://host:port" address (the '
                    "party's encodings must not cross a network unencrypted)"
                )
            for key in ("tls_ca", "tls_cert", "tls_key"):
                p = getattr(cluster, key)
                if p is None:
                    problems.append(f"cluster.{key}: required with a scheduler address")
                elif check_files and not p.is_file():
                    problems.append(f"cluster.{key}: file {p} does not exist")
    if problems:
        raise ConfigError(str(path), problems)
    if not data_required:  # a compute-only helper: never reads data, secret or results
        data_csv, secret_file, results = pathlib.Path(), pathlib.Path(), pathlib.Path()
    assert data_csv is not None and secret_file is not None and results is not None
    return PartyConfig(
        name=name,
        listen=listen,
        advertise=advertise,
        coordinator=coordinator,
        coordinator_name=coordinator_name,
        port_file=port_file,
        data_csv=data_csv,
        id_column=id_column,
        secret_file=secret_file,
        schema=schema,
        results_dir=results,
        tls=tls,
        timeouts=timeouts,
        audit_policy=policy,
        audit_policy_origin=policy_origin,
        memory_budget_mib=budget,
        trusted_peers=trusted_peers,
        workers=workers,
        cluster=cluster,
        role=role,
        source=str(path),
    )


def _audit_policy(
    audit: Any, env: Mapping[str, str], base: pathlib.Path, problems: list[str]
) -> tuple[Mapping[str, Any] | None, str]:
    """[audit] -> the validated policy mapping (the shipped default when absent) and its origin."""
    from party.audit.policy import AuditPolicy, PolicyError, configured_policy

    audit = audit if isinstance(audit, dict) else {}
    table = audit.get("policy")
    if table is not None and not isinstance(table, dict):
        problems.append("audit.policy: expected a table")
        table = None
    use_default = audit.get("default_policy", True)
    if not isinstance(use_default, bool):
        problems.append("audit.default_policy: expected true or false")
        use_default = True
    policy, origin = configured_policy(table, use_default, env, pathlib.Path.cwd(), problems)
    if policy is None:
        return None, origin
    try:
        AuditPolicy.from_mapping(policy, base=base)
    except PolicyError as exc:
        problems.extend(f"audit.policy ({origin}): {p}" for p in exc.problems)
    return types.MappingProxyType(policy), origin
