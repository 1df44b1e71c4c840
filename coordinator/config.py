"""Coordinator configuration: frozen dataclass loaded from TOML, then PPRL_* environment overrides.

File format (``examples/coordinator.toml``; relative paths are relative to the TOML file)::

    [coordinator]
    name = "coordinator"              # must equal the CN of the coordinator's certificate
    listen = "127.0.0.1:50060"        # host:port to bind; port 0 picks a free port
    address = "127.0.0.1:50060"       # optional: where `run`/`health` clients dial (default: listen)
    state_db = "state/coordinator.sqlite"   # run and registry state (SQLite), survives restarts
    port_file = "run/coordinator.port"      # optional: the bound port is written here
    operators = ["coordinator"]       # identities allowed to start and watch runs (default: name)
    allowed_parties = ["party-a", "party-b", "party-c"]   # optional: only these may register

    [tls]                             # required unless serving with --insecure
    ca = "certs/ca.pem"
    cert = "certs/coordinator.pem"
    key = "certs/coordinator.key"

    [timeouts]                        # seconds, all optional
    rpc = 30.0                        # deadline of unary calls (Propose, Abort, ...)
    prepare = 600.0                   # encoding + self-audit at every party
    run = 3600.0                      # default whole-run timeout (StartRun may set another)
    liveness = 15.0                   # longest silence on a party's Execute stream

Environment overrides: PPRL_NODE_NAME, PPRL_LISTEN, PPRL_ADVERTISE (address), PPRL_STATE_DB,
PPRL_PORT_FILE, PPRL_OPERATORS (comma-separated), PPRL_ALLOWED_PARTIES (comma-separated), PPRL_TLS_CA, PPRL_TLS_CERT, PPRL_TLS_KEY,
PPRL_RPC_TIMEOUT, PPRL_PREPARE_TIMEOUT, PPRL_RUN_TIMEOUT, PPRL_LIVENESS_TIMEOUT. An override set to
the empty string clears an optional key.
"""

from __future__ import annotations

import os
import pathlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.errors import ConfigError
from proto.transport import Security, check_address

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

ENV_OVERRIDES: dict[str, tuple[str, str, str]] = {
    "PPRL_NODE_NAME": ("coordinator", "name", "str"),
    "PPRL_LISTEN": ("coordinator", "listen", "str"),
    "PPRL_ADVERTISE": ("coordinator", "address", "str"),
    "PPRL_STATE_DB": ("coordinator", "state_db", "path"),
    "PPRL_PORT_FILE": ("coordinator", "port_file", "path"),
    "PPRL_OPERATORS": ("coordinator", "operators", "list"),
    "PPRL_ALLOWED_PARTIES": ("coordinator", "allowed_parties", "list"),
    "PPRL_TLS_CA": ("tls", "ca", "path"),
    "PPRL_TLS_CERT": ("tls", "cert", "path"),
    "PPRL_TLS_KEY": ("tls", "key", "path"),
    "PPRL_RPC_TIMEOUT": ("timeouts", "rpc", "float"),
    "PPRL_PREPARE_TIMEOUT": ("timeouts", "prepare", "float"),
    "PPRL_RUN_TIMEOUT": ("timeouts", "run", "float"),
    "PPRL_LIVENESS_TIMEOUT": ("timeouts", "liveness", "float"),
}
_KNOWN = {
    "coordinator": {
        "name",
        "listen",
        "address",
        "state_db",
        "port_file",
        "operators",
        "allowed_parties",
    },
    "tls": {"ca", "cert", "key"},
    "timeouts": {"rpc", "prepare", "run", "liveness"},
}


@dataclass(frozen=True)
class Timeouts:
    rpc: float = 30.0
    prepare: float = 600.0
    run: float = 3600.0
    liveness: float = 15.0


@dataclass(frozen=True)
class CoordinatorConfig:
    name: str
    listen: str
    state_db: pathlib.Path
    address: str | None = None
    port_file: pathlib.Path | None = None
    operators: tuple[str, ...] = ()
    allowed_parties: tuple[str, ...] | None = None  # None: any identity certified by the CA
    tls_ca: pathlib.Path | None = None
    tls_cert: pathlib.Path | None = None
    tls_key: pathlib.Path | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    source: str = "<config>"

    def read_tls(self) -> tuple[bytes, bytes, bytes]:
        out = []
        for key in ("tls_ca", "tls_cert", "tls_key"):
            path = getattr(self, key)
            if path is None:
                raise ConfigError(self.source, [f"tls.{key[4:]}: required for mutual TLS"])
            try:
                out.append(path.read_bytes())
            except OSError as exc:
                raise ConfigError(
                    self.source, [f"tls.{key[4:]}: cannot read {path} ({exc.strerror})"]
                ) from None
        return out[0], out[1], out[2]

    def dial_address(self) -> str:
        """Where clients reach this coordinator (port file wins when listen uses port 0)."""
        address = self.address or self.listen
        host, _, port = address.rpartition(":")
        if (
            self.port_file is not None
            and self.port_file.exists()
            and (port == "0" or not self.address)
        ):
            port = self.port_file.read_text().strip()
        if host in ("0.0.0.0", "[::]", ""):
            host = "127.0.0.1"
        return f"{host}:{port}"


def load_coordinator_config(
    path: str | pathlib.Path,
    *,
    env: Mapping[str, str] | None = None,
    require_tls: bool = True,
    check_files: bool = True,
) -> CoordinatorConfig:
    """Load ``path``, apply PPRL_* overrides and validate, reporting every problem at once."""
    path = pathlib.Path(path)
    try:
        with path.open("rb") as fh:
            raw: dict[str, Any] = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read the file ({exc.strerror})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML ({exc})"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            str(path), [f"not UTF-8 text (invalid byte at offset {exc.start}); TOML is UTF-8"]
        ) from None
    env = os.environ if env is None else env
    base = path.resolve().parent
    problems: list[str] = []
    for section, table in raw.items():
        if section not in _KNOWN:
            problems.append(f"unknown table [{section}]")
        elif not isinstance(table, dict):
            problems.append(f"{section}: expected a table")
        else:
            problems.extend(
                f"{section}.{k}: unknown key" for k in sorted(set(table) - _KNOWN[section])
            )
    from_env: set[str] = set()
    for var, (section, key, kind) in ENV_OVERRIDES.items():
        if var not in env:
            continue
        sect = raw.setdefault(section, {})
        if not isinstance(sect, dict):
            continue
        value: Any = env[var]
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
            value = [v.strip() for v in value.split(",") if v.strip()]
        sect[key] = value
        from_env.add(f"{section}.{key}")

    def get(section: str, key: str) -> Any:
        sect = raw.get(section, {})
        return sect.get(key) if isinstance(sect, dict) else None

    def pathof(section: str, key: str, required: bool) -> pathlib.Path | None:
        value = get(section, key)
        if value is None:
            if required:
                problems.append(f"{section}.{key}: required")
            return None
        if not isinstance(value, str) or not value:
            problems.append(f"{section}.{key}: expected a path")
            return None
        p = pathlib.Path(value).expanduser()
        if not p.is_absolute():
            p = (pathlib.Path.cwd() if f"{section}.{key}" in from_env else base) / p
        return p

    name = get("coordinator", "name") or "coordinator"
    if not isinstance(name, str) or not NAME_RE.match(name):
        problems.append("coordinator.name: lower-case letters, digits and '-' (max 63)")
    listen = check_address(get("coordinator", "listen"), "coordinator.listen", problems, True)
    address = get("coordinator", "address")
    if address is not None:
        address = check_address(address, "coordinator.address", problems, False)
    operators = get("coordinator", "operators")
    if operators is None:
        operators = [name]
    if not isinstance(operators, list) or not all(
        isinstance(o, str) and NAME_RE.match(o) for o in operators
    ):
        problems.append("coordinator.operators: expected a list of identities")
        operators = []
    allowed = get("coordinator", "allowed_parties")
    if allowed is not None and (
        not isinstance(allowed, list)
        or not all(isinstance(o, str) and NAME_RE.match(o) for o in allowed)
    ):
        problems.append("coordinator.allowed_parties: expected a list of party names")
        allowed = None
    state_db = pathof("coordinator", "state_db", True)
    port_file = pathof("coordinator", "port_file", False)
    ca = pathof("tls", "ca", False)
    cert = pathof("tls", "cert", False)
    tls_key = pathof("tls", "key", False)
    if require_tls:
        for k, v in (("ca", ca), ("cert", cert), ("key", tls_key)):
            if v is None:
                problems.append(f"tls.{k}: required for mutual TLS (or serve with --insecure)")
    if check_files:
        for k, v in (("tls.ca", ca), ("tls.cert", cert), ("tls.key", tls_key)):
            if v is not None and not v.is_file():
                problems.append(f"{k}: file {v} does not exist")
    timeouts: dict[str, float] = {}
    traw = raw.get("timeouts", {})
    if isinstance(traw, dict):
        for k, v in traw.items():
            if k not in _KNOWN["timeouts"]:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
                problems.append(f"timeouts.{k}: expected a positive number of seconds")
            else:
                timeouts[k] = float(v)
    if problems:
        raise ConfigError(str(path), problems)
    assert state_db is not None
    return CoordinatorConfig(
        name=name,
        listen=listen,
        address=address,
        state_db=state_db,
        port_file=port_file,
        operators=tuple(operators),
        allowed_parties=None if allowed is None else tuple(allowed),
        tls_ca=ca,
        tls_cert=cert,
        tls_key=tls_key,
        timeouts=Timeouts(**timeouts),
        source=str(path),
    )


def security_for(config: CoordinatorConfig, insecure: bool) -> Security:
    """The coordinator's TLS identity (here, not in server.py, so that probes stay light)."""
    return Security.for_node(config.name, insecure, config.read_tls)
