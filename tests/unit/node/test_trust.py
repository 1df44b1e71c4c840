"""party/node/trust.py and [trust] peers: a party sends run data only to identities it agreed to."""

from __future__ import annotations

import pathlib

import grpc
import pytest

from party.config import ConfigError, load_party_config
from party.node.keyconfirm import key_confirmation, peer_confirmation
from party.node.trust import UntrustedRecipient, check_recipients

TRUSTED = frozenset({"party-b", "party-c"})


def check(parties: list[str], trusted: frozenset[str] = TRUSTED) -> None:
    check_recipients(parties, own_name="party-a", coordinator_name="coordinator", trusted=trusted)


def test_trusted_co_parties_pass_and_the_own_name_is_ignored() -> None:
    check(["party-a", "party-b", "party-c"])
    check(["party-c", "party-a"])


@pytest.mark.parametrize(
    ("parties", "trusted", "words"),
    [
        (["party-a", "coordinator"], TRUSTED | {"coordinator"}, "coordinator's identity"),
        (["party-a", "party-d"], TRUSTED, "party-d as a party, which is not in party-a's"),
        (["party-a", "Evil\nname" * 500], TRUSTED, "a malformed name"),
        (["party-a", "party-b"], frozenset(), "no trusted peers configured"),
    ],
)
def test_untrusted_recipients_are_refused_with_a_short_message(
    parties: list[str], trusted: frozenset[str], words: str
) -> None:
    with pytest.raises(UntrustedRecipient, match=words) as info:
        check(parties, trusted)
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert len(str(info.value)) < 200 and "\n" not in str(info.value)


CONFIG = """
[node]
name = "party-a"
listen = "127.0.0.1:0"
coordinator = "127.0.0.1:50060"
[data]
csv = "a.csv"
secret_file = "s"
results = "r"
"""


def test_peers_from_toml_and_env(tmp_path: pathlib.Path) -> None:
    cfg_path = tmp_path / "p.toml"
    cfg_path.write_text(CONFIG + '[trust]\npeers = ["party-b", "party-a"]\n')
    cfg = load_party_config(cfg_path, env={}, require_tls=False, check_files=False)
    assert cfg.trusted_peers == {"party-a", "party-b"}
    env = {"PPRL_TRUST_PEERS": " party-c , party-d ,"}
    cfg = load_party_config(cfg_path, env=env, require_tls=False, check_files=False)
    assert cfg.trusted_peers == {"party-c", "party-d"}
    cfg_path.write_text(CONFIG)
    assert not load_party_config(
        cfg_path, env={}, require_tls=False, check_files=False
    ).trusted_peers


@pytest.mark.parametrize(
    ("peers", "words"),
    [('["coordinator"]', "must not name the coordinator"), ('"party-b"', "expected a list")],
)
def test_bad_peers_are_config_errors(tmp_path: pathlib.Path, peers: str, words: str) -> None:
    cfg_path = tmp_path / "p.toml"
    cfg_path.write_text(CONFIG + f"[trust]\npeers = {peers}\n")
    with pytest.raises(ConfigError, match=words):
        load_party_config(cfg_path, env={}, require_tls=False, check_files=False)


def test_peer_confirmation_is_directional_and_differs_from_the_coordinators_value() -> None:
    secret = bytes(range(32))
    run, digest = "ab" * 16, "cd" * 32
    a_to_b = peer_confirmation(secret, run, digest, "party-a", "party-b")
    assert a_to_b == peer_confirmation(secret, run, digest, "party-a", "party-b")
    assert a_to_b != peer_confirmation(secret, run, digest, "party-b", "party-a")
    assert a_to_b != peer_confirmation(secret, run, digest, "party-a", "party-c")
    assert a_to_b != key_confirmation(secret, run, digest)
    assert a_to_b != peer_confirmation(bytes(32), run, digest, "party-a", "party-b")
