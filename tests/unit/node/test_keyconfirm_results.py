"""Key confirmation values and atomic result files."""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from party.node.keyconfirm import key_confirmation
from party.node.results import remove_run, write_matches
from party.protocol.classify import MatchRow

RUN = "0123456789abcdef" * 2


def test_key_confirmation_binds_secret_run_and_digest() -> None:
    base = key_confirmation(b"s" * 32, RUN, "d" * 64)
    assert len(base) == 32
    assert key_confirmation(b"s" * 32, RUN, "d" * 64) == base
    assert key_confirmation(b"t" * 32, RUN, "d" * 64) != base
    assert key_confirmation(b"s" * 32, "f" * 32, "d" * 64) != base
    assert key_confirmation(b"s" * 32, RUN, "e" * 64) != base
    assert b"s" * 8 not in base


def test_matches_written_atomically_and_removed(tmp_path: pathlib.Path) -> None:
    rows = [MatchRow("L00000001", 0.8123456789012345, "rec-1"), MatchRow("L00000002", 1.0, "r,2")]
    path, n = write_matches(tmp_path, RUN, rows)
    assert n == 2 and path == tmp_path / RUN / "matches.csv"
    lines = path.read_text().splitlines()
    assert lines == [
        "linkage_id,similarity,record_id",
        "L00000001,0.8123456789012345,rec-1",
        'L00000002,1.0,"r,2"',
    ]
    assert sorted(p.name for p in (tmp_path / RUN).iterdir()) == ["matches.csv"]
    remove_run(tmp_path, RUN)
    assert not (tmp_path / RUN).exists()


def test_results_are_private_whatever_the_umask(tmp_path: pathlib.Path) -> None:
    results = tmp_path / "deep" / "results"
    old = os.umask(0o000)
    try:
        path, _ = write_matches(results, RUN, [MatchRow("L1", 0.9, "r")])
        (results / RUN / ".matches.csv.tmp").write_text("stale")  # a crash left a temp file
        os.chmod(results / RUN / ".matches.csv.tmp", 0o666)
        os.chmod(results / RUN, 0o777)
        path, _ = write_matches(results, RUN, [MatchRow("L1", 0.9, "r")])
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((results / RUN).stat().st_mode) == 0o700
    assert stat.S_IMODE(results.stat().st_mode) == 0o700


def test_run_id_must_be_hex(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError):
        write_matches(tmp_path, "../escape", [])
    remove_run(tmp_path, "../escape")  # silently ignored, nothing outside removed
    assert tmp_path.exists()
