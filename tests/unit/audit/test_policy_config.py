"""Which policy a party config yields: its table, the shipped default, none; PPRL_AUDIT_* overrides."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from party.audit.policy import DEFAULT_POLICY, KNOWN_KEYS, POLICY_ENV, AuditPolicy
from party.config import ENV_OVERRIDES, ConfigError, load_party_config

ROOT = Path(__file__).resolve().parents[3]
BASE = """[node]
name = "party-a"
listen = "127.0.0.1:0"
coordinator = "127.0.0.1:1"
[data]
csv = "a.csv"
secret_file = "secret.key"
results = "results"
"""


def load(tmp_path: Path, extra: str = "", env: dict[str, str] | None = None) -> Any:
    config = tmp_path / "party.toml"
    config.write_text(BASE + extra, encoding="utf-8")
    return load_party_config(config, env=env or {}, require_tls=False, check_files=False)


def test_without_a_policy_table_the_default_policy_applies(tmp_path: Path) -> None:
    cfg = load(tmp_path)
    assert dict(cfg.audit_policy) == dict(DEFAULT_POLICY)
    assert cfg.audit_policy_origin == "default policy"
    explicit = load(tmp_path, "[audit.policy]\nmax_alone_in_block = 0.3\n")
    assert dict(explicit.audit_policy) == {"max_alone_in_block": 0.3}  # the table replaces it
    assert explicit.audit_policy_origin == "[audit.policy]"
    off = load(tmp_path, "[audit]\ndefault_policy = false\n")
    assert off.audit_policy is None
    # opting out of the default does not ignore a table that is given
    both = load(tmp_path, "[audit]\ndefault_policy = false\n[audit.policy]\nmax_dr_mark = 0.1\n")
    assert dict(both.audit_policy) == {"max_dr_mark": 0.1}
    assert load(tmp_path, env={"PPRL_AUDIT_DEFAULT_POLICY": "false"}).audit_policy is None
    back_on = load(
        tmp_path, "[audit]\ndefault_policy = false\n", {"PPRL_AUDIT_DEFAULT_POLICY": "1"}
    )
    assert dict(back_on.audit_policy) == dict(DEFAULT_POLICY)
    with pytest.raises(ConfigError, match="audit.default_policy: expected true or false"):
        load(tmp_path, '[audit]\ndefault_policy = "no"\n')
    with pytest.raises(ConfigError, match="PPRL_AUDIT_DEFAULT_POLICY: expected true or false"):
        load(tmp_path, env={"PPRL_AUDIT_DEFAULT_POLICY": "perhaps"})


def test_the_policy_is_validated_when_the_config_loads(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, "[audit.policy]\nmax_everything = 2\nmax_dr_mark = 1.5\n")
    text = str(err.value)
    assert "audit.policy ([audit.policy]): unknown key(s) max_everything" in text
    assert "max_dr_mark: expected a number between 0 and 1" in text
    with pytest.raises(ConfigError, match="audit.policy: expected a table"):
        load(tmp_path, "[audit]\npolicy = 3\n")


# one environment value per [audit.policy] key, and the policy value it must give
ENV_CASES: dict[str, tuple[str, Any]] = {
    "max_insider_reidentification": ("0.05", 0.05),
    "max_insider_record_one_to_one": ("0.01", 0.01),
    "max_insider_top1": ("0.2", 0.2),
    "max_dr_mark": ("0", 0.0),
    "max_dr_mean": ("0.125", 0.125),
    "max_alone_in_block": ("0.3", 0.3),
    "max_unique_segment": ("1", 1.0),
    "max_cvpl_lr": ("0.4", 0.4),
    "max_insider_one_to_one": ("surname=0.1, given_name=0.2", {"surname": 0.1, "given_name": 0.2}),
    "cvpl_tau": ("0.85", 0.85),
    "conservative": ("true", True),
    "insider_max_targets": ("500", 500),
    "external_dictionaries": ("surname=lists/surnames.txt", None),  # checked below
    "allowed_modes": ("mpc3", ("mpc3",)),
}


def test_every_policy_key_has_an_environment_override() -> None:
    assert set(ENV_CASES) == set(KNOWN_KEYS)
    assert {POLICY_ENV[f"PPRL_AUDIT_{k.upper()}"] for k in KNOWN_KEYS} == set(KNOWN_KEYS)
    assert not set(POLICY_ENV) & set(ENV_OVERRIDES)


@pytest.mark.parametrize("key", sorted(ENV_CASES))
def test_policy_environment_override(
    key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    text, want = ENV_CASES[key]
    var = f"PPRL_AUDIT_{key.upper()}"
    cfg = load(tmp_path, "[audit.policy]\nmax_dr_mean = 0.5\n", {var: text})
    assert cfg.audit_policy_origin == f"[audit.policy] with {var}"
    policy = AuditPolicy.from_mapping(dict(cfg.audit_policy), base=tmp_path)
    got = getattr(policy, key)
    if key == "external_dictionaries":
        assert dict(got) == {"surname": tmp_path / "lists" / "surnames.txt"}
    elif key == "max_insider_one_to_one":
        assert dict(got) == want
    else:
        assert got == want
    if key != "max_dr_mean":
        assert policy.max_dr_mean == 0.5  # the other keys of the table stay
    # on a config without a table the override applies on top of the default policy
    cfg = load(tmp_path, "", {var: text})
    assert cfg.audit_policy_origin == f"default policy with {var}"
    expected_keys = {*DEFAULT_POLICY, key}
    assert set(cfg.audit_policy) == expected_keys


def test_policy_environment_clears_and_reports_bad_values(tmp_path: Path) -> None:
    cleared = load(
        tmp_path, env={"PPRL_AUDIT_MAX_INSIDER_RECORD_ONE_TO_ONE": "", "PPRL_AUDIT_MAX_CVPL_LR": ""}
    )
    assert dict(cleared.audit_policy) == {}
    assert AuditPolicy.from_mapping(dict(cleared.audit_policy)).empty
    # an override on a party without a policy gives it one with that key only
    off = load(tmp_path, "[audit]\ndefault_policy = false\n", {"PPRL_AUDIT_MAX_DR_MARK": "0.1"})
    assert dict(off.audit_policy) == {"max_dr_mark": 0.1}
    with pytest.raises(ConfigError) as err:
        load(
            tmp_path,
            env={
                "PPRL_AUDIT_MAX_DR_MARK": "low",
                "PPRL_AUDIT_CONSERVATIVE": "maybe",
                "PPRL_AUDIT_INSIDER_MAX_TARGETS": "1e3",
                "PPRL_AUDIT_MAX_INSIDER_ONE_TO_ONE": "surname=high",
                "PPRL_AUDIT_EXTERNAL_DICTIONARIES": "surnames.txt",
                "PPRL_AUDIT_ALLOWED_MODES": "mpc3,carrier-pigeon",
                "PPRL_AUDIT_MAX_CVPL_LR": "2",
            },
        )
    problems = err.value.problems
    for expected in (
        "PPRL_AUDIT_MAX_DR_MARK: expected a number",
        "PPRL_AUDIT_CONSERVATIVE: expected true or false",
        "PPRL_AUDIT_INSIDER_MAX_TARGETS: expected a whole number",
        "PPRL_AUDIT_MAX_INSIDER_ONE_TO_ONE (surname): expected a number",
        "PPRL_AUDIT_EXTERNAL_DICTIONARIES: expected FIELD=VALUE pairs separated by commas",
    ):
        assert expected in problems, (expected, problems)
    joined = " | ".join(problems)
    assert "allowed_modes: expected a non-empty list of modes" in joined
    assert "max_cvpl_lr: expected a number between 0 and 1" in joined


@pytest.mark.parametrize("config", ["examples/party.toml", "docker/config/party.toml"])
def test_shipped_configs_carry_the_default_policy(config: str) -> None:
    raw = tomllib.loads((ROOT / config).read_text(encoding="utf-8"))
    table = raw["audit"]["policy"]
    assert AuditPolicy.from_mapping(table) == AuditPolicy.from_mapping(DEFAULT_POLICY)
