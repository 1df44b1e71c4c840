"""party/config.py: TOML loading, PPRL_* overrides, every problem reported at once, secrets."""

from __future__ import annotations

import pathlib

import pytest

from party.config import ConfigError, load_party_config, read_secret_file

SECRET_HEX = "5d0c2e8f41a7b39e6f12d84c0ab57e3910c6f4a28d7e5b1396fa0c42e81d7b65"
GOOD = """
[node]
name = "party-a"
listen = "127.0.0.1:0"
coordinator = "127.0.0.1:50060"
[data]
csv = "a.csv"
id_column = "id"
secret_file = "secret.key"
results = "results"
[tls]
ca = "ca.pem"
cert = "a.pem"
key = "a.key"
[timeouts]
stage = 12
[audit.policy]
max_alone_in_block = 0.1
"""


@pytest.fixture
def folder(tmp_path: pathlib.Path) -> pathlib.Path:
    for name in ("a.csv", "ca.pem", "a.pem", "a.key"):
        (tmp_path / name).write_text("x")
    (tmp_path / "secret.key").write_bytes(SECRET_HEX.encode() + b"\n")
    (tmp_path / "party.toml").write_text(GOOD)
    return tmp_path


def test_loads_and_resolves_paths_relative_to_the_file(folder: pathlib.Path) -> None:
    cfg = load_party_config(folder / "party.toml", env={})
    assert cfg.name == "party-a" and cfg.listen == "127.0.0.1:0"
    assert cfg.data_csv == folder / "a.csv" and cfg.results_dir == folder / "results"
    assert cfg.tls.complete and cfg.timeouts.stage == 12.0 and cfg.timeouts.rpc == 30.0
    assert dict(cfg.audit_policy or {}) == {"max_alone_in_block": 0.1}
    assert cfg.read_secret() == bytes.fromhex(SECRET_HEX)
    assert SECRET_HEX[:16] not in repr(cfg)


def test_environment_overrides(folder: pathlib.Path, tmp_path: pathlib.Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "b.csv").write_text("x")
    env = {
        "PPRL_NODE_NAME": "party-b",
        "PPRL_DATA_CSV": "b.csv",
        "PPRL_STAGE_TIMEOUT": "3.5",
        "PPRL_ID_COLUMN": "",
        "PPRL_COORDINATOR": "10.0.0.1:7000",
    }
    cfg = load_party_config(folder / "party.toml", env=env)
    assert cfg.name == "party-b" and cfg.data_csv == tmp_path / "b.csv"
    assert cfg.timeouts.stage == 3.5 and cfg.id_column is None
    assert cfg.coordinator == "10.0.0.1:7000"


def test_every_problem_is_reported_at_once(folder: pathlib.Path) -> None:
    (folder / "bad.toml").write_text(
        '[node]\nname = "Party A"\nlisten = "nowhere"\nextra = 1\n'
        '[data]\ncsv = "missing.csv"\n[timeouts]\nrpc = -1\n[surprise]\n'
    )
    with pytest.raises(ConfigError) as err:
        load_party_config(folder / "bad.toml", env={"PPRL_HEARTBEAT_INTERVAL": "soon"})
    text = str(err.value)
    for needle in (
        "node.name",
        "node.listen",
        "node.extra: unknown key",
        "node.coordinator",
        "data.secret_file: required",
        "data.results: required",
        "missing.csv does not exist",
        "tls.ca: required",
        "timeouts.rpc",
        "unknown table [surprise]",
        "PPRL_HEARTBEAT_INTERVAL",
    ):
        assert needle in text, needle
    assert len(err.value.problems) >= 11


def test_insecure_mode_needs_no_tls(folder: pathlib.Path) -> None:
    text = GOOD.split("[tls]")[0] + "[timeouts]\nstage = 12\n"
    (folder / "plain.toml").write_text(text)
    with pytest.raises(ConfigError, match="tls.cert: required"):
        load_party_config(folder / "plain.toml", env={})
    cfg = load_party_config(folder / "plain.toml", env={}, require_tls=False)
    assert not cfg.tls.complete


def test_invalid_toml_and_missing_file(folder: pathlib.Path) -> None:
    (folder / "broken.toml").write_text("[node\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_party_config(folder / "broken.toml", env={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_party_config(folder / "absent.toml", env={})


def test_short_secret_is_refused_without_echoing_it(tmp_path: pathlib.Path) -> None:
    (tmp_path / "s").write_bytes(b"tiny-secret\r\n")
    with pytest.raises(ConfigError) as err:
        read_secret_file(tmp_path / "s", "data.secret_file")
    assert "passphrase" in str(err.value) and "tiny" not in str(err.value)


def test_example_config_parses() -> None:
    root = pathlib.Path(__file__).resolve().parents[3]
    cfg = load_party_config(root / "examples" / "party.toml", env={}, check_files=False)
    assert cfg.name == "party-a" and cfg.id_column == "rec_id"


def test_memory_budget_from_file_and_environment(folder: pathlib.Path) -> None:
    assert load_party_config(folder / "party.toml", env={}).memory_budget_mib == 3072
    (folder / "party.toml").write_text(GOOD + "[limits]\nmemory_budget_mib = 4096\n")
    assert load_party_config(folder / "party.toml", env={}).memory_budget_mib == 4096
    cfg = load_party_config(folder / "party.toml", env={"PPRL_MEMORY_BUDGET_MIB": "1024"})
    assert cfg.memory_budget_mib == 1024
    with pytest.raises(ConfigError, match="PPRL_MEMORY_BUDGET_MIB: expected a whole number"):
        load_party_config(folder / "party.toml", env={"PPRL_MEMORY_BUDGET_MIB": "lots"})
    (folder / "party.toml").write_text(GOOD + "[limits]\nmemory_budget_mib = 2\n")
    with pytest.raises(ConfigError, match="limits.memory_budget_mib: expected a whole number"):
        load_party_config(folder / "party.toml", env={})


def test_workers_and_cluster_from_file_and_environment(folder: pathlib.Path) -> None:
    cfg = load_party_config(folder / "party.toml", env={})
    assert cfg.workers == 0 and cfg.cluster is None  # all cores, on this machine
    (folder / "party.toml").write_text(GOOD + "[limits]\nworkers = 3\n[cluster]\n")
    assert load_party_config(folder / "party.toml", env={}).workers == 3
    cfg = load_party_config(
        folder / "party.toml", env={"PPRL_WORKERS": "2", "PPRL_CLUSTER_SCHEDULER": "local"}
    )
    assert cfg.workers == 2 and cfg.cluster is not None and cfg.cluster.embedded
    with pytest.raises(ConfigError, match="PPRL_WORKERS: expected a whole number"):
        load_party_config(folder / "party.toml", env={"PPRL_WORKERS": "many"})
    (folder / "party.toml").write_text(
        GOOD + '[limits]\nworkers = -1\n[cluster]\nscheduler = "tcp://10.0.0.5:8786"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_party_config(folder / "party.toml", env={})
    problems = info.value.problems
    assert any(p.startswith("limits.workers: expected a whole number >= 0") for p in problems)
    assert any(p.startswith('cluster.scheduler: expected "local" or a "tls://') for p in problems)
    assert any(p.startswith("cluster.tls_ca: required") for p in problems)
    (folder / "party.toml").write_text(
        GOOD + '[cluster]\nscheduler = "tls://10.0.0.5:8786"\n'
        'tls_ca = "ca.pem"\ntls_cert = "a.pem"\ntls_key = "a.key"\n'
    )
    cfg = load_party_config(folder / "party.toml", env={})
    assert cfg.cluster is not None and not cfg.cluster.embedded
    assert cfg.cluster.tls_ca == folder / "ca.pem"
