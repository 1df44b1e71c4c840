"""coordinator/config.py and coordinator/store.py: config validation, durable run state."""

from __future__ import annotations

import pathlib

import pytest

from coordinator.config import load_coordinator_config
from coordinator.errors import ConfigError
from coordinator.store import Store
from proto import common_pb2, linkage

S = common_pb2.Stage
ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_example_config_and_overrides(tmp_path: pathlib.Path) -> None:
    cfg = load_coordinator_config(ROOT / "examples" / "coordinator.toml", env={}, check_files=False)
    assert cfg.name == "coordinator" and cfg.operators == ("coordinator",)
    assert cfg.dial_address() == "127.0.0.1:50060"
    env = {"PPRL_OPERATORS": "coordinator, ops", "PPRL_LIVENESS_TIMEOUT": "4", "PPRL_ADVERTISE": ""}
    cfg = load_coordinator_config(
        ROOT / "examples" / "coordinator.toml", env=env, check_files=False
    )
    assert cfg.operators == ("coordinator", "ops") and cfg.timeouts.liveness == 4.0
    assert cfg.address is None
    assert cfg.allowed_parties == ("party-a", "party-b", "party-c")
    cfg = load_coordinator_config(
        ROOT / "examples" / "coordinator.toml", env={"PPRL_ALLOWED_PARTIES": ""}, check_files=False
    )
    assert cfg.allowed_parties is None


def test_every_problem_at_once(tmp_path: pathlib.Path) -> None:
    (tmp_path / "c.toml").write_text(
        '[coordinator]\nlisten = "x"\noperators = "me"\n[timeouts]\nrun = 0\n'
    )
    with pytest.raises(ConfigError) as err:
        load_coordinator_config(tmp_path / "c.toml", env={})
    text = str(err.value)
    for needle in (
        "coordinator.listen",
        "operators",
        "state_db: required",
        "tls.ca",
        "timeouts.run",
    ):
        assert needle in text, needle


def _params() -> common_pb2.LinkageParameters:
    return linkage.parameters_from_mapping(
        {"parties": ["a", "b"], "schema": {"l": 8}, "match_threshold": 0.8, "segment_threshold": 0}
    )


def test_store_survives_restart_and_fails_unfinished_runs(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "state" / "c.sqlite"
    store = Store(db)
    store.register("a", "127.0.0.1:1", "a")
    store.register("a", "127.0.0.1:2", "a")
    store.create_run("r1", "d1", _params(), 10.0)
    store.create_run("r2", "d2", _params(), 10.0)
    store.set_stage("r1", S.STAGE_DONE)
    store.set_stage("r2", S.STAGE_COMPARING)
    store.set_progress(
        "r2", common_pb2.Progress(party="b", stage=S.STAGE_COMPARING, done=3, total=9)
    )
    store.set_summary("r1", common_pb2.PartySummary(party="a", matches=4))
    store.close()

    again = Store(db)
    assert again.parties()["a"].address == "127.0.0.1:2"
    recovered = again.recover()
    assert recovered == [("r2", ["a", "b"])]
    r2 = again.status("r2")
    assert r2 is not None and r2.stage == S.STAGE_FAILED
    assert r2.reason == "the coordinator restarted while the run was comparing"
    assert [(p.party, p.done, p.total) for p in r2.parties] == [("a", 0, 0), ("b", 3, 9)]
    r1 = again.status("r1")
    assert r1 is not None and r1.stage == S.STAGE_DONE and r1.summaries[0].matches == 4
    assert again.status("nope") is None
    again.close()
