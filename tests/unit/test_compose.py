"""Docker deployment checks that need no Docker: compose file, commands, config keys, probes, image recipe.

The compose file is read with PyYAML and its ${VAR} references are interpolated as Compose does, once with
no variables set (host networking, the default) and once with docker/bridge.env. Every command is parsed by
the real argparse parser of the program it names, every config it points at is loaded by the real loader
with the service's PPRL_* environment, and the setup/check helpers run for real on temporary folders.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import io
import json
import pathlib
import re
import shlex
import sys
import tomllib
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
BRIDGE_ENV = ROOT / "docker" / "bridge.env"
IMAGE_HOME = "/opt/pprl"  # where the Dockerfile copies scripts/ and docker/
NODE_HOME = "/var/lib/pprl"  # where each node's own volume is mounted
PARTIES = ("party-a", "party-b", "party-c")
SERVERS = ("coordinator", *PARTIES)

_VAR = re.compile(
    r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)"
)


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's variable substitution for the forms the file may use: $$, $V, ${V}, ${V-d}, ${V:-d}."""

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(4)
        op, default = m.group(2), m.group(3)
        if op == ":-" and not env.get(name):
            return default
        if op == "-" and name not in env:
            return default
        return env.get(name, "")

    assert "$" not in _VAR.sub("", value), f"unsupported variable syntax in {value!r}"
    return _VAR.sub(one, value)


def _interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_interpolate_tree(v, env) for v in node]
    if isinstance(node, dict):
        return {k: _interpolate_tree(v, env) for k, v in node.items()}
    return node


def read_env_file(path: pathlib.Path) -> dict[str, str]:
    env = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path}: not KEY=VALUE: {line!r}"
            env[key.strip()] = value.strip()
    return env


ENVS = {"host": {}, "bridge": read_env_file(BRIDGE_ENV)}


def load_compose(env: Mapping[str, str]) -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(raw, dict), "docker-compose.yml is not a mapping"
    return {k: v for k, v in _interpolate_tree(raw, env).items() if not k.startswith("x-")}


@pytest.fixture(params=sorted(ENVS), scope="module")
def compose(request: pytest.FixtureRequest) -> dict[str, Any]:
    return load_compose(ENVS[request.param])


def services(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def repo_path(image_path: str) -> pathlib.Path:
    """The repository file that the image holds at ``image_path`` (under /opt/pprl)."""
    assert image_path.startswith(IMAGE_HOME + "/"), f"{image_path} is not inside {IMAGE_HOME}"
    path = ROOT / image_path[len(IMAGE_HOME) + 1 :]
    assert path.is_file(), (
        f"{image_path}: {path.relative_to(ROOT)} does not exist in the repository"
    )
    return path


def load_script(path: pathlib.Path) -> ModuleType:
    name = f"_compose_test_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def parser_for(program: str) -> argparse.ArgumentParser:
    """The real parser of an entry point: pprl-party or pprl-coordinator."""
    if program == "pprl-party":
        from party.cli import build_parser

        return build_parser()
    if program == "pprl-coordinator":
        from coordinator.cli import build_parser as build_coordinator_parser

        return build_coordinator_parser()
    raise AssertionError(f"{program!r} is not an entry point of the project")


def parse(argv: list[str]) -> tuple[str, argparse.Namespace]:
    """Parse a container command with the parser of the program it runs; fails on unknown flags."""
    assert argv and all(isinstance(a, str) for a in argv), f"command must be a list: {argv!r}"
    program, rest = argv[0], argv[1:]
    if program in ("python", "python3"):
        script = repo_path(rest[0])
        parser = load_script(script).build_parser()
        program, rest = str(script.relative_to(ROOT)), rest[1:]
    else:
        parser = parser_for(program)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(rest)
    except SystemExit:
        pytest.fail(f"{program} rejects {shlex.join(rest)}: {err.getvalue().strip()}")
    return program, args


# -- the compose file ---------------------------------------------------------------------------


def test_services_and_volumes(compose: dict[str, Any]) -> None:
    svc = services(compose)
    assert {"setup", *SERVERS, "runner"} <= set(svc)
    assert set(compose["volumes"]) >= {"demo", *SERVERS}
    for name in SERVERS:
        mounts = svc[name]["volumes"]
        # Each node has its own volume (data, secret, certificates, results) and no other.
        assert mounts == [f"{name}:{NODE_HOME}"], f"{name} mounts {mounts}"
    assert all(
        f"{name}:{NODE_HOME}" not in str(s.get("volumes"))
        for other, s in svc.items()
        for name in PARTIES
        if other != name
    ), "a party's volume is mounted at /var/lib/pprl by another service"


def test_commands_are_real_entry_points_with_real_flags(compose: dict[str, Any]) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["pprl-party"] == "party.cli:main"
    assert scripts["pprl-coordinator"] == "coordinator.cli:main"
    for name, svc in services(compose).items():
        command = svc.get("command")
        assert isinstance(command, list), f"{name}: command must be an exec-form list"
        assert "sleep" not in " ".join(command), f"{name}: no sleeps as synchronisation"
        parse(command)
    svc = services(compose)
    assert parse(svc["coordinator"]["command"])[1].command == "serve"
    for party in PARTIES:
        _, args = parse(svc[party]["command"])
        assert args.command == "serve" and not args.insecure, f"{party} must serve with mutual TLS"
    _, run = parse(svc["runner"]["command"])
    assert run.command == "run" and run.timeout > 0 and not run.insecure


def test_health_checks_call_the_real_probe(compose: dict[str, Any]) -> None:
    svc = services(compose)
    for name in SERVERS:
        check = svc[name].get("healthcheck")
        assert check, f"{name} has no health check"
        test = check["test"]
        assert test[0] == "CMD", f"{name}: health check must be exec form"
        program, args = parse(test[1:])
        _, serve = parse(svc[name]["command"])
        assert args.command == "health", f"{name}: health check does not run `{program} health`"
        assert args.config == serve.config, f"{name}: health check reads another config"
        assert args.insecure == serve.insecure
        module = "coordinator.cli" if name == "coordinator" else "party.node.cli"
        assert args.func.__module__ == module
        assert args.func is not serve.func
        if name in PARTIES:  # healthy only once the start-up warm-up is over: no run beside it
            assert args.warm, f"{name}: health check does not wait for the warm-up (--warm)"


def test_start_order_uses_conditions_not_sleeps(compose: dict[str, Any]) -> None:
    svc = services(compose)

    def deps(name: str) -> dict[str, str]:
        raw = svc[name].get("depends_on", {})
        assert isinstance(raw, dict), f"{name}: depends_on must name conditions"
        return {k: v["condition"] for k, v in raw.items()}

    assert "depends_on" not in svc["setup"]
    assert deps("coordinator") == {"setup": "service_completed_successfully"}
    for party in PARTIES:
        assert deps(party) == {
            "setup": "service_completed_successfully",
            "coordinator": "service_healthy",
        }
    assert deps("runner") == dict.fromkeys(SERVERS, "service_healthy")


def test_network_is_parameterised(compose: dict[str, Any]) -> None:
    svc = services(compose)
    modes = {s.get("network_mode") for s in svc.values()}
    assert len(modes) == 1, f"services disagree on network_mode: {modes}"
    if modes == {"host"}:
        assert all("ports" not in s for s in svc.values()), "ports are meaningless with host mode"
    else:
        for name in SERVERS:
            assert svc[name].get("container_name"), f"{name}: needs a fixed name for Docker DNS"


def test_image_and_build_arguments(compose: dict[str, Any]) -> None:
    svc = services(compose)
    images = {s["image"] for s in svc.values()}
    assert len(images) == 1, "one image for coordinator and parties"
    build = svc["setup"]["build"]
    assert build["context"] == "."
    dockerfile = (ROOT / "Dockerfile").read_text()
    declared = set(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", dockerfile, re.MULTILINE))
    args = build_args(build["args"])
    assert set(args) <= declared, "compose passes a build argument the Dockerfile lacks"
    assert args["BASE_IMAGE"], "BASE_IMAGE must default to a real image"
    # With nothing set in the environment, no argument may be passed as an empty string: that is a
    # different build argument than none, so compose would not reuse the layers `docker build` made.
    # A value-less entry (taken from the environment) is sent empty by docker-compose 1.29 when unset.
    empty = sorted(k for k, v in args.items() if not v)
    assert not empty, f"build arguments passed empty when unset: {empty}"


def build_args(raw: Any) -> dict[str, str | None]:
    """Compose build args (mapping, or list of KEY=VALUE / KEY) -> {KEY: VALUE, or None = from env}."""
    if isinstance(raw, dict):
        return {str(k): None if v is None else str(v) for k, v in raw.items()}
    out: dict[str, str | None] = {}
    for item in raw:
        key, sep, value = str(item).partition("=")
        out[key] = value if sep else None
    return out


def test_containers_are_locked_down(compose: dict[str, Any]) -> None:
    for name, svc in services(compose).items():
        assert svc.get("read_only") is True, f"{name}: root filesystem must be read-only"
        assert svc.get("cap_drop") == ["ALL"], f"{name}: must drop every capability"
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert svc.get("init") is True, f"{name}: needs an init process to forward SIGTERM"
        assert "user" not in svc, f"{name}: must run as the image's unprivileged user"
        assert not svc.get("privileged"), name


# -- configuration keys: every key set is one the nodes read -----------------------------------


def _under_own_volume(path: pathlib.Path | None, what: str) -> None:
    assert path is not None and str(path).startswith(NODE_HOME + "/"), (
        f"{what} = {path} is not inside the node's own volume ({NODE_HOME})"
    )


def test_party_configuration(compose: dict[str, Any]) -> None:
    from party.audit.policy import POLICY_ENV
    from party.config import ENV_OVERRIDES, load_party_config

    svc = services(compose)
    coordinator_env = environment(svc["coordinator"])
    setup_args = parse(svc["setup"]["command"])[1]
    sans = dict(setup_args.san)
    known = {*ENV_OVERRIDES, *POLICY_ENV}
    for party in PARTIES:
        env = environment(svc[party])
        unknown = sorted(k for k in env if k.startswith("PPRL_") and k not in known)
        assert not unknown, f"{party} sets PPRL_* variables that party/config.py ignores: {unknown}"
        config_file = repo_path(parse(svc[party]["command"])[1].config)
        cfg = load_party_config(config_file, env=env, check_files=False)
        assert cfg.name == party
        for key, path in [
            ("data.csv", cfg.data_csv),
            ("data.secret_file", cfg.secret_file),
            ("data.results", cfg.results_dir),
            ("tls.ca", cfg.tls.ca),
            ("tls.cert", cfg.tls.cert),
            ("tls.key", cfg.tls.key),
        ]:
            _under_own_volume(path, f"{party}: {key}")
        assert cfg.tls.complete, f"{party}: mutual TLS material missing"
        assert cfg.advertise is not None
        assert cfg.listen.rpartition(":")[2] == cfg.advertise.rpartition(":")[2]
        assert cfg.advertise.rpartition(":")[0] == sans[party], (
            f"{party} advertises a host its certificate does not name"
        )
        assert cfg.coordinator == coordinator_env["PPRL_ADVERTISE"]
        assert cfg.coordinator_name == "coordinator"


def test_coordinator_configuration(compose: dict[str, Any]) -> None:
    from coordinator.config import ENV_OVERRIDES, load_coordinator_config

    svc = services(compose)
    setup_args = parse(svc["setup"]["command"])[1]
    for name in ("coordinator", "runner"):
        env = environment(svc[name])
        unknown = sorted(k for k in env if k.startswith("PPRL_") and k not in ENV_OVERRIDES)
        assert not unknown, f"{name} sets variables coordinator/config.py ignores: {unknown}"
        cfg = load_coordinator_config(
            repo_path(parse(svc[name]["command"])[1].config), env=env, check_files=False
        )
        assert cfg.name == setup_args.coordinator.name == "coordinator"
        for key in ("state_db", "tls_ca", "tls_cert", "tls_key"):
            _under_own_volume(getattr(cfg, key), f"{name}: {key}")
        assert cfg.address == environment(svc["coordinator"])["PPRL_ADVERTISE"]
        assert cfg.address.rpartition(":")[0] == dict(setup_args.san)["coordinator"]
        # The runner starts runs with the coordinator's own certificate: it must be an operator.
        assert cfg.name in cfg.operators
    assert svc["runner"]["volumes"] == [f"coordinator:{NODE_HOME}:ro"]


def test_parameters_match_the_parties(compose: dict[str, Any]) -> None:
    from party.encoding.schema import load_schema
    from party.synthetic import COLUMNS
    from proto.linkage import load_parameters

    svc = services(compose)
    run = parse(svc["runner"]["command"])[1]
    params_file = repo_path(run.parameters)
    params = load_parameters(params_file)
    names = [environment(svc[p])["PPRL_NODE_NAME"] for p in PARTIES]
    assert list(params.parties) == names
    # Setup gives party i of the generated dataset to the i-th --party volume: same order as the ring.
    setup_args = parse(svc["setup"]["command"])[1]
    assert [n.name for n in setup_args.party] == names
    schema_ref = json.loads(params_file.read_text())["schema"]
    schema = load_schema(params_file.parent / schema_ref)
    assert schema.output_bits % len(names) == 0, "filter length must split into P segments"
    # Every schema feature is a column of the demo data that setup generates.
    features = {
        f["identifier"]
        for f in json.loads((params_file.parent / schema_ref).read_text())["features"]
    }
    assert features <= set(COLUMNS), (
        f"schema fields {sorted(features - set(COLUMNS))} not in the data"
    )


# -- the image recipe ---------------------------------------------------------------------------


def _stages(dockerfile: str) -> list[list[str]]:
    lines = re.sub(r"\\\n", " ", dockerfile).splitlines()
    stages: list[list[str]] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.upper().startswith("FROM "):
            stages.append([])
        if stages:
            stages[-1].append(stripped)
    return stages


def test_dockerfile_is_multistage_slim_and_unprivileged() -> None:
    text = (ROOT / "Dockerfile").read_text()
    head = text.split("\nFROM ", 1)[0]
    assert re.search(r"^ARG BASE_IMAGE=\S*python:3\.1[1-9]", head, re.MULTILINE)
    stages = _stages(text)
    assert len(stages) >= 2, "multi-stage build expected"
    assert all(s[0].startswith("FROM ${BASE_IMAGE}") for s in stages)
    final = stages[-1]
    users = [line.split()[1] for line in final if line.upper().startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "final stage must run as a non-root user"
    final_text = "\n".join(final).lower()
    for banned in ("apt-get install", "gcc", "build-essential", "pip install"):
        assert banned not in final_text, f"final stage must not run {banned!r}"
    assert "--only-binary=:all:" in text, "dependencies must come as wheels (no compiler)"
    assert "PIP_NO_CACHE_DIR=1" in text
    for line in (x for s in stages for x in s if x.upper().startswith("COPY ")):
        parts = line.split()
        if any(p.startswith("--from") for p in parts):
            continue
        for src in parts[1:-1]:
            assert (ROOT / src).exists(), f"Dockerfile copies {src}, which does not exist"
    copies = {tuple(line.split()[1:]) for line in final if line.upper().startswith("COPY ")}
    assert ("docker", f"{IMAGE_HOME}/docker") in copies
    assert ("scripts", f"{IMAGE_HOME}/scripts") in copies


def _env_values(stage: list[str]) -> dict[str, str]:
    """KEY=VALUE pairs of a stage's ENV instructions (continuation lines joined)."""
    text = " ".join(line.rstrip("\\").strip() for line in stage)
    values: dict[str, str] = {}
    for instr in re.findall(r"\bENV\s+(.*?)(?=\s+[A-Z]+\s|$)", text):
        values.update(re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", instr))
    return values


def test_image_carries_a_numba_cache_that_read_only_containers_load(
    compose: dict[str, Any],
) -> None:
    # numba only loads from a cache folder it can write to: the image's cache (filled by
    # docker/warm_cache.py against the installed package) is copied by the entry point to a
    # NUMBA_CACHE_DIR on the tmpfs every service mounts; never into the node's volume (a stale copy
    # there would outlive an image upgrade).
    stages = _stages((ROOT / "Dockerfile").read_text())
    build, final = "\n".join(stages[0]), stages[-1]
    fill = next(line for line in stages[0] if "warm_cache.py" in line and line.startswith("RUN"))
    assert fill.startswith("RUN cd / &&"), "fill the cache outside /src, where party/ is the source"
    assert "NUMBA_CACHE_DIR=/opt/pprl/numba-cache" in fill
    assert build.index("pip install --no-deps") < build.index(fill)
    env = _env_values(final)
    cache, seed = env["NUMBA_CACHE_DIR"], env["PPRL_NUMBA_CACHE_SEED"]
    assert seed == "/opt/pprl/numba-cache"
    assert f"COPY --from=build {seed} {seed}" in final
    assert not cache.startswith(NODE_HOME) and not cache.startswith(seed)
    assert 'ENTRYPOINT ["/opt/pprl/docker/entrypoint.sh"]' in final
    for name, svc in services(compose).items():
        assert any(cache.startswith(t.rstrip("/") + "/") for t in svc["tmpfs"]), name


def _entrypoint(tmp: pathlib.Path, seed: pathlib.Path, cache: pathlib.Path, *argv: str) -> Any:
    import subprocess

    env = {
        "PATH": "/usr/bin:/bin",
        "PPRL_NUMBA_CACHE_SEED": str(seed),
        "NUMBA_CACHE_DIR": str(cache),
    }
    script = ROOT / "docker" / "entrypoint.sh"
    return subprocess.run(
        ["sh", str(script), *argv], env=env, capture_output=True, text=True, cwd=tmp
    )


def test_entrypoint_seeds_the_numba_cache_once_then_runs_the_command(
    tmp_path: pathlib.Path,
) -> None:
    seed = tmp_path / "seed"
    (seed / "protocol_ab").mkdir(parents=True)
    (seed / "protocol_ab" / "k.nbi").write_bytes(b"index")
    (seed / "protocol_ab" / "k.1.nbc").write_bytes(b"code")
    cache = tmp_path / "run" / "numba"
    proc = _entrypoint(tmp_path, seed, cache, "sh", "-c", 'echo "$0 $1"; exit 7', "a b", "c")
    assert (proc.returncode, proc.stdout, proc.stderr) == (7, "a b c\n", "")
    assert (cache / "protocol_ab" / "k.nbi").read_bytes() == b"index"
    assert (cache / "protocol_ab" / "k.1.nbc").read_bytes() == b"code"
    assert (cache / ".seeded").exists()
    # seeded once per container: what numba wrote since is kept
    (cache / "protocol_ab" / "k.1.nbc").write_bytes(b"newer")
    assert _entrypoint(tmp_path, seed, cache, "true").returncode == 0
    assert (cache / "protocol_ab" / "k.1.nbc").read_bytes() == b"newer"


def test_entrypoint_runs_the_command_when_the_cache_cannot_be_seeded(
    tmp_path: pathlib.Path,
) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "x.nbi").write_bytes(b"index")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = _entrypoint(tmp_path, seed, blocker / "numba", "echo", "ran")
    assert (proc.returncode, proc.stdout) == (0, "ran\n")
    assert "cannot copy numba's cache" in proc.stderr and "NUMBA_CACHE_DIR" in proc.stderr
    # no seed folder (an image built without one): silent
    proc = _entrypoint(tmp_path, tmp_path / "none", tmp_path / "c2", "echo", "ran")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ran\n", "")
    assert not (tmp_path / "c2").exists()


def test_dockerignore_keeps_secrets_out_of_the_context() -> None:
    patterns = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for needed in (".git", ".venv*", "certs", "results", "**/*.key", "**/*.pem"):
        assert needed in patterns, f".dockerignore lacks {needed}"


# -- the helpers, for real, on temporary folders -------------------------------------------------


def _setup_argv(compose: dict[str, Any], root: pathlib.Path, records: int) -> list[str]:
    argv = services(compose)["setup"]["command"][2:]
    out = [a.replace("=/volumes/", f"={root}/volumes/") for a in argv]
    return [a if not a.startswith("--records=") else f"--records={records}" for a in out]


def _node_config(
    compose: dict[str, Any], name: str, volume: pathlib.Path, tmp: pathlib.Path
) -> pathlib.Path:
    """The node's TOML with /var/lib/pprl pointing at ``volume`` (what the mount does)."""
    src = repo_path(parse(services(compose)[name]["command"])[1].config)
    dst = tmp / f"{name}.toml"
    dst.write_text(src.read_text().replace(NODE_HOME, str(volume)))
    return dst


@pytest.fixture(scope="module")
def demo_volumes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[pathlib.Path]:
    root = tmp_path_factory.mktemp("compose")
    setup = load_script(ROOT / "docker" / "setup_demo.py")
    assert setup.main(_setup_argv(load_compose({}), root, records=40)) == 0
    yield root


def test_setup_fills_exactly_what_the_configs_name(
    demo_volumes: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    from coordinator.config import load_coordinator_config
    from party.config import load_party_config

    compose = load_compose({})
    vols = demo_volumes / "volumes"
    secrets = set()
    for party in PARTIES:
        env = environment(services(compose)[party])
        cfg = load_party_config(_node_config(compose, party, vols / party, tmp_path), env=env)
        secrets.add(cfg.read_secret())
        assert len(cfg.read_secret()) == 32
        assert (cfg.secret_file.stat().st_mode & 0o077) == 0, "secret must be private"
        assert (cfg.tls.key is not None) and (cfg.tls.key.stat().st_mode & 0o077) == 0
        assert cfg.results_dir.is_dir()
        with cfg.data_csv.open() as fh:
            assert cfg.id_column in next(csv.reader(fh))
    assert len(secrets) == 1, "every party must hold the same linkage secret"
    env = environment(services(compose)["coordinator"])
    coordinator = load_coordinator_config(
        _node_config(compose, "coordinator", vols / "coordinator", tmp_path), env=env
    )
    assert coordinator.state_db.parent.is_dir()
    assert not (vols / "coordinator" / "secret").exists(), "the coordinator never gets the secret"
    assert not list((demo_volumes / "volumes" / "demo" / "ca").glob("party-*.key"))


def test_setup_secret_reads_back_whole_whatever_the_random_bytes() -> None:
    # 32 raw bytes whose last is a newline were read back as 31 (a text file's trailing newline
    # dropped) and refused about once in 256 setups; setup writes hex, and hex of only digits is
    # refused as regular, so it is redrawn.
    from party.encoding.secret import secret_from_file_bytes

    setup = load_script(ROOT / "docker" / "setup_demo.py")
    ends_in_newline = bytes(range(31)) + b"\n"
    only_digits = bytes([0x11] * 32)  # "1111..." in hex
    draws = iter([only_digits, ends_in_newline])
    text = setup.new_secret_text(lambda n: next(draws))
    assert secret_from_file_bytes(text, "secret") == ends_in_newline
    with pytest.raises(StopIteration):
        next(draws)  # the all-digit draw was redrawn, not written


def test_demo_parties_self_audit_admits_the_demo_run(
    demo_volumes: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    # Each party's real gate (its config with the service's PPRL_* environment, the demo data and the
    # demo's run parameters) must let the demo run through, or `up` ends in a declined run.
    from party.audit.gate import check_before_join
    from party.audit.policy import AuditPolicy
    from party.config import load_party_config
    from party.encoding.encoder import Encoder
    from party.encoding.schema import load_schema

    compose = load_compose({})
    runner = parse(services(compose)["runner"]["command"])[1]
    params_path = repo_path(runner.parameters)
    params = json.loads(params_path.read_text(encoding="utf-8"))
    schema = load_schema(params_path.parent / params["schema"])
    vols = demo_volumes / "volumes"
    for index, party in enumerate(params["parties"]):
        env = environment(services(compose)[party])
        config_path = _node_config(compose, party, vols / party, tmp_path)
        cfg = load_party_config(config_path, env=env)
        assert cfg.audit_policy is not None, "the demo keeps the gate on"
        encoder = Encoder(schema, cfg.read_secret())
        records, _ = encoder.encode_csv(cfg.data_csv, id_column=cfg.id_column)
        decision = check_before_join(
            records,
            encoder,
            schema,
            len(params["parties"]),
            AuditPolicy.from_mapping(dict(cfg.audit_policy), base=config_path.parent),
            data_csv=cfg.data_csv,
            id_column=cfg.id_column,
            self_index=index,
        )
        assert decision.allowed, (party, decision.reasons)


def test_setup_is_idempotent_and_never_replaces(
    demo_volumes: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = load_script(ROOT / "docker" / "setup_demo.py")
    vols = demo_volumes / "volumes"
    before = {p: p.read_bytes() for p in vols.rglob("*") if p.is_file()}
    argv = _setup_argv(load_compose({}), demo_volumes, records=40)
    assert setup.main(argv) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in vols.rglob("*") if p.is_file()} == before
    # A party that lost its secret gets the others' secret back, not a new one.
    lost = vols / "party-b" / "secret" / "linkage.key"
    lost.unlink()
    assert setup.main(argv) == 0
    assert lost.read_bytes() == before[lost]
    # Two different secrets: refuse, change nothing, and say which files (never the bytes).
    other = vols / "party-c" / "secret" / "linkage.key"
    other.write_bytes(b"another secret of enough bytes!!")
    assert setup.main(argv) == 2
    err = capsys.readouterr().err
    assert "party-c/secret/linkage.key" in err and "another secret" not in err
    other.write_bytes(before[other])


def _data_rows(path: pathlib.Path) -> int:
    with path.open(newline="") as fh:
        return sum(1 for _ in csv.reader(fh)) - 1


def test_a_new_demo_record_count_takes_effect_on_existing_volumes(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # PPRL_DEMO_RECORDS reaches setup as --records: a second `up` with another value must give the
    # parties the new data (not only fresh volumes), keeping certificates, secrets and results.
    setup = load_script(ROOT / "docker" / "setup_demo.py")
    compose = load_compose({})
    vols = tmp_path / "volumes"
    assert setup.main(_setup_argv(compose, tmp_path, records=40)) == 0
    result = vols / "party-a" / "results" / "run-1" / "matches.csv"
    result.parent.mkdir(parents=True)
    result.write_text("linkage_id,similarity,record_id\n")
    kept = {
        p: p.read_bytes()
        for p in vols.rglob("*")
        if p.is_file() and ("secret" in p.parts or "certs" in p.parts or "results" in p.parts)
    }
    capsys.readouterr()
    assert setup.main(_setup_argv(compose, tmp_path, records=25)) == 0
    assert "dataset of 3 x 25 records" in capsys.readouterr().out
    for party in PARTIES:
        assert _data_rows(vols / party / "data" / "records.csv") == 25
    assert {p: p.read_bytes() for p in kept} == kept
    # the same count again changes nothing
    assert setup.main(_setup_argv(compose, tmp_path, records=25)) == 0
    assert "nothing changed" in capsys.readouterr().out
    # a party's own (non-demo) data is never overwritten: refuse and name the file
    own = vols / "party-b" / "data" / "records.csv"
    own.write_text("rec_id,given_name\nx1,someone\n")
    assert setup.main(_setup_argv(compose, tmp_path, records=30)) == 2
    err = capsys.readouterr().err
    assert "party-b/data/records.csv" in err and "someone" not in err
    assert own.read_text() == "rec_id,given_name\nx1,someone\n"
    assert _data_rows(vols / "party-a" / "data" / "records.csv") == 25, "nothing changed"


def _write_matches(path: pathlib.Path, rows: list[tuple[str, float, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["linkage_id", "similarity", "record_id"])
        w.writerows(rows)


def _true_sets(demo_volumes: pathlib.Path) -> list[list[str]]:
    """Record ids (in party order) of the entities present at every party, from truth.csv."""
    by_entity: dict[str, dict[int, str]] = {}
    with (demo_volumes / "volumes" / "demo" / "data" / "truth.csv").open() as fh:
        for row in csv.DictReader(fh):
            by_entity.setdefault(row["entity_id"], {})[int(row["party"])] = row["rec_id"]
    return [
        [ids[p] for p in range(len(PARTIES))]
        for ids in by_entity.values()
        if len(ids) == len(PARTIES)
    ]


def test_check_results_accepts_a_correct_run_and_rejects_broken_ones(
    demo_volumes: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check = load_script(ROOT / "docker" / "check_results.py")
    compose = load_compose({})
    vols = demo_volumes / "volumes"
    argv = [a.replace("=/volumes/", f"={vols}/") for a in services(compose)["check"]["command"][2:]]
    true_sets = _true_sets(demo_volumes)
    assert len(true_sets) >= 5
    found = true_sets[:-1]  # one true set missed: recall < 1, precision 1
    for p, party in enumerate(PARTIES):
        _write_matches(
            vols / party / "results" / "run-1" / "matches.csv",
            [(f"L{i}", 0.9, ids[p]) for i, ids in enumerate(found)],
        )
    assert check.main(argv) == 0
    out = capsys.readouterr().out
    assert "run run-1" in out and "precision 1.0000" in out
    assert check.main([*argv, "--min-f1=1.0"]) == 1

    # Another party disagrees on one similarity.
    path_c = vols / "party-c" / "results" / "run-2" / "matches.csv"
    for p, party in enumerate(PARTIES):
        sim = 0.8 if party == "party-c" else 0.9
        _write_matches(
            vols / party / "results" / "run-2" / "matches.csv",
            [(f"L{i}", sim, ids[p]) for i, ids in enumerate(found)],
        )
    assert check.main([*argv, "--run-id=run-2"]) == 1
    assert "similarity" in capsys.readouterr().err
    # A record id the party does not hold.
    _write_matches(path_c, [("L0", 0.9, "no-such-record")])
    assert check.main([*argv, "--run-id=run-2"]) == 1
    assert "record_id is not in the party's data" in capsys.readouterr().err
    # A run missing at one party is not picked; the newest common run is.
    _write_matches(vols / "party-a" / "results" / "run-9" / "matches.csv", [])
    assert check.main(argv) == 1  # run-2 (newest common) is broken
    assert "run-2" in capsys.readouterr().err
    assert check.main([*argv, "--run-id=run-9"]) == 1
    assert "no matches.csv at party-b, party-c" in capsys.readouterr().err


def _true_groups(demo_volumes: pathlib.Path) -> list[dict[int, str]]:
    """Party index -> record id of the entities present at two or more parties, from truth.csv."""
    by_entity: dict[str, dict[int, str]] = {}
    with (demo_volumes / "volumes" / "demo" / "data" / "truth.csv").open() as fh:
        for row in csv.DictReader(fh):
            by_entity.setdefault(row["entity_id"], {})[int(row["party"])] = row["rec_id"]
    return [ids for ids in by_entity.values() if len(ids) >= 2]


def _write_any_matches(
    vols: pathlib.Path, run: str, groups: list[dict[int, str]], sims: dict[str, float] | None = None
) -> None:
    """Every party's target-any matches.csv of `groups` (linkage id G<i>, similarity 0.9)."""
    for p, party in enumerate(PARTIES):
        path = vols / party / "results" / run / "matches.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["linkage_id", "similarity", "record_id", "group_size", "parties"])
            for i, ids in enumerate(groups):
                if p in ids:
                    named = ";".join(PARTIES[q] for q in sorted(ids))
                    sim = (sims or {}).get(party, 0.9)
                    w.writerow([f"G{i}", sim, ids[p], len(ids), named])


def test_check_results_checks_target_any_groups(
    demo_volumes: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check = load_script(ROOT / "docker" / "check_results.py")
    vols = demo_volumes / "volumes"
    argv = [
        a.replace("=/volumes/", f"={vols}/")
        for a in services(load_compose({}))["check"]["command"][2:]
    ]
    groups = _true_groups(demo_volumes)
    assert len(groups) >= 6
    # every fifth group found at two of the parties only: precision stays 1, recall drops
    groups = [{p: r for p, r in g.items() if i % 5 or p != 2} for i, g in enumerate(groups)]
    _write_any_matches(vols, "any-1", groups)
    assert check.main([*argv, "--run-id=any-1"]) == 0
    out = capsys.readouterr().out
    assert "groups (target any)" in out and "precision 1.0000, recall 0.8" in out

    # a wrong pair lowers pairwise precision and F1: two groups of party-a merged into one
    merged = [dict(g) for g in groups]
    two_a = [g for g in merged if 0 in g and 1 in g][:2]
    two_a[0][1] = two_a[1].pop(1)  # party-b's record of the second joins the first group
    kept = [g for g in merged if len(g) >= 2]
    _write_any_matches(vols, "any-2", kept)
    assert check.main([*argv, "--run-id=any-2", "--min-f1=0.5"]) == 0
    assert "precision 1.0000" not in capsys.readouterr().out
    assert check.main([*argv, "--run-id=any-2", "--min-f1=1.0"]) == 1
    assert "below --min-f1" in capsys.readouterr().err

    # a group one of its named parties does not report
    _write_any_matches(vols, "any-3", groups)
    path_c = vols / "party-c" / "results" / "any-3" / "matches.csv"
    lines = path_c.read_text().splitlines()
    dropped = next(i for i, line in enumerate(lines[1:], 1) if "party-c" in line.split(",")[-1])
    path_c.write_text("\n".join(lines[:dropped] + lines[dropped + 1 :]) + "\n")
    assert check.main([*argv, "--run-id=any-3"]) == 1
    assert "is missing at party-c" in capsys.readouterr().err

    # parties disagree on a similarity; a group size that does not match the parties named
    _write_any_matches(vols, "any-4", groups, sims={"party-b": 0.8})
    assert check.main([*argv, "--run-id=any-4"]) == 1
    assert "disagree on the similarity" in capsys.readouterr().err
    _write_any_matches(vols, "any-5", groups)
    path_a = vols / "party-a" / "results" / "any-5" / "matches.csv"
    rows = list(csv.reader(path_a.open()))
    rows[1][3] = str(int(rows[1][3]) + 1)
    with path_a.open("w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    assert check.main([*argv, "--run-id=any-5"]) == 1
    assert "group_size does not match" in capsys.readouterr().err

    # one party wrote target all's header, the others target any's
    _write_any_matches(vols, "any-6", groups)
    _write_matches(vols / "party-b" / "results" / "any-6" / "matches.csv", [])
    assert check.main([*argv, "--run-id=any-6"]) == 1
    assert "different headers" in capsys.readouterr().err


# -- scripts and documentation stay in step with the compose file -------------------------------


def test_shell_scripts_parse() -> None:
    import subprocess

    for script in (
        "scripts/compose_smoke.sh",
        "scripts/docker_base_image.sh",
        "docker/pip-env.sh",
        "docker/entrypoint.sh",
    ):
        proc = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script}: {proc.stderr.strip()}"


def test_every_compose_variable_is_documented() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    names = {m.group(1) or m.group(4) for m in _VAR.finditer(body) if m.group(0) != "$$"}
    assert names, "the compose file is expected to be parameterised"
    docs = (ROOT / "docs" / "deployment.md").read_text(encoding="utf-8")
    bridge = set(read_env_file(BRIDGE_ENV))
    assert bridge <= names, f"docker/bridge.env sets variables compose ignores: {bridge - names}"

    # Documented literally, or as a host/port family: `PPRL_PARTY_A_HOST` / `_PORT` (B, C).
    def documented(name: str) -> bool:
        family = re.sub(r"_PARTY_[BC]_", "_PARTY_A_", name)
        base, _, suffix = family.rpartition("_")
        return name in docs or (suffix in ("HOST", "PORT") and f"`{base}_HOST` / `_PORT`" in docs)

    undocumented = sorted(n for n in names if not documented(n))
    assert not undocumented, f"docs/deployment.md does not mention {undocumented}"


# -- the documented container path -----------------------------------------------------------------

CONTAINER_DOCS = ("README.md", "docs/deployment.md")


def _shell_lines(markdown: str) -> list[str]:
    """Command lines of the ```bash blocks, comments dropped."""
    lines: list[str] = []
    for block in re.findall(r"```bash\n(.*?)```", markdown, re.DOTALL):
        for line in block.splitlines():
            command = line.split("#", 1)[0].strip()
            if command:
                lines.append(command)
    return lines


@pytest.mark.parametrize("doc", CONTAINER_DOCS)
def test_documented_container_path_builds_before_compose_and_works_without_a_registry(
    doc: str,
) -> None:
    # `up` pulls the base image (a registry) unless the image exists: the docs must build it first,
    # with the debootstrap base for machines without a registry.
    lines = _shell_lines((ROOT / doc).read_text(encoding="utf-8"))
    ups = [i for i, c in enumerate(lines) if re.search(r"docker[ -]compose .*\bup\b", c)]
    builds = [i for i, c in enumerate(lines) if c.startswith("docker build ")]
    base = [i for i, c in enumerate(lines) if "scripts/docker_base_image.sh" in c]
    assert ups, f"{doc} shows no compose up"
    assert base and base[0] < ups[0], f"{doc}: the no-registry base image must come before `up`"
    local = [i for i in builds if "BASE_IMAGE=local/debian-python:bookworm" in lines[i]]
    assert local and base[0] < local[0] < ups[0], f"{doc}: build on the local base before `up`"
    tag = re.search(r"-t (\S+)", lines[local[0]])
    assert tag and tag.group(1) == "pprl:local", "the image compose uses by default (PPRL_IMAGE)"


@pytest.mark.parametrize("doc", CONTAINER_DOCS)
def test_container_docs_work_with_compose_v1(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert "docker-compose" in text, f"{doc} must say how to run it with docker-compose v1"
    assert not re.search(r"docker[ -]compose[^\n`]* cp ", text), (
        f"{doc}: `compose cp` does not exist in docker-compose v1; use `docker cp pprl-party-a:...`"
    )
    assert "scripts/compose_smoke.sh" in text, f"{doc} must point developers at compose_smoke.sh"


def test_readme_development_section_lists_the_compose_smoke_test() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    development = readme.split("## Development", 1)[1]
    assert "scripts/compose_smoke.sh" in development


def test_party_config_comment_names_the_compose_ports() -> None:
    # the comment of docker/config/party.toml says which ports the parties listen on
    text = (ROOT / "docker" / "config" / "party.toml").read_text(encoding="utf-8")
    comment = next(line for line in text.splitlines() if line.startswith("#   PPRL_LISTEN"))
    prefixes = set(re.findall(r":(\d{4})x", comment))
    assert prefixes, comment
    for env in ENVS.values():
        compose = load_compose(env)
        for party in PARTIES:
            port = environment(services(compose)[party])["PPRL_LISTEN"].rpartition(":")[2]
            assert port[:4] in prefixes, f"{party} listens on {port}, the comment says {prefixes}"


def test_dependency_layer_depends_only_on_pyproject() -> None:
    # The slow layer (pip installing numpy, numba, pyarrow, ...) must survive edits of the code and
    # the docs: only pyproject.toml and the pip environment helper may be copied before it.
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    install = next(i for i, line in enumerate(lines) if "requirements.txt" in line)
    copied = [line.split()[1:-1] for line in lines[:install] if line.startswith("COPY ")]
    assert copied and {f for c in copied for f in c} <= {"pyproject.toml", "docker/pip-env.sh"}
