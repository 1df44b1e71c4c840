"""The `pprl-party uniqueness` and `pprl-party audit` commands: outputs, exit codes, error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from party.cli import main
from party.synthetic import generate


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join(r[c] for c in cols) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_uniqueness_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv_path = tmp_path / "t.csv"
    rows = [{"id": str(i), "sex": "fm"[i % 2], "zip": str(i % 7)} for i in range(60)]
    write_csv(csv_path, rows)
    out = tmp_path / "u.json"
    rc = main(
        [
            "uniqueness",
            "--csv",
            str(csv_path),
            "--columns",
            "sex,zip",
            "--k",
            "5",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    doc = json.loads(out.read_text())
    # 14 (sex, zip) cells over 60 rows -> every crowd is 4 or 5: nobody alone
    assert doc["alone"]["count"] == 0 and doc["records"] == 60
    assert [s["column"] for s in doc["climb"]] == ["sex", "zip"]
    assert "alone" in capsys.readouterr().out
    crowds = tmp_path / "c.csv"
    rc = main(
        [
            "uniqueness",
            "--csv",
            str(csv_path),
            "--columns",
            "zip,id",
            "--greedy",
            "--crowds",
            str(crowds),
        ]
    )
    assert rc == 0
    lines = crowds.read_text().splitlines()
    assert lines[0] == "row,crowd" and lines[1] == "1,1" and len(lines) == 61


def test_uniqueness_bad_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv_path = tmp_path / "t.csv"
    write_csv(csv_path, [{"a": "1", "b": "2"}])
    rc = main(["uniqueness", "--csv", str(csv_path), "--columns", "a,nope"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "unknown column(s) nope; available: a, b" in err and "Traceback" not in err


def test_audit_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = list(generate(2, 200, corruption=0.0, seed=4).tables[0].rows())
    write_csv(tmp_path / "party.csv", rows)
    (tmp_path / "secret.key").write_bytes(bytes(range(100, 132)))
    schema = {
        "version": 1,
        "l": 1020,
        "features": [
            {"identifier": "given_name"},
            {"identifier": "surname"},
            {"identifier": "dob", "comparison": {"type": "ngram", "n": 2, "padding": False}},
        ],
        "blocking": [{"name": "sx", "parts": [{"field": "surname", "function": "soundex"}]}],
    }
    (tmp_path / "params.json").write_text(
        json.dumps({"version": 1, "parties": ["p-a", "p-b", "p-c"], "schema": schema})
    )
    config = tmp_path / "party.toml"
    config.write_text(
        '[node]\nname = "p-b"\nlisten = "127.0.0.1:0"\ncoordinator = "127.0.0.1:1"\n'
        '[data]\ncsv = "party.csv"\nid_column = "rec_id"\nsecret_file = "secret.key"\n'
        'results = "res"\n[audit.policy]\nmax_insider_reidentification = 0.05\n',
        encoding="utf-8",
    )
    out = tmp_path / "report"
    args = ["audit", "--config", str(config), "--parameters", str(tmp_path / "params.json")]
    names = tmp_path / "names.txt"
    names.write_text("zzyzx\nqwerty\n", encoding="utf-8")
    rc = main(
        [*args, "--out", str(out), "--no-cvpl", "--no-suggestions"]
        + ["--dictionary", f"given_name={names}"]
    )
    assert rc == 1  # the policy declines unhardened segments
    doc = json.loads((out / "audit.json").read_text())
    assert doc["meta"]["self_index"] == 1 and doc["meta"]["receiving_segments"] == [0, 2]
    assert doc["decision"]["allowed"] is False
    assert doc["decision"]["policy"]["external_dictionaries"] == {"given_name": str(names)}
    assert (out / "audit.html").read_text().startswith("<!doctype html>")
    printed = capsys.readouterr().out
    assert "DECLINED" in printed
    rc = main([*args, "--dictionary", "nofield=x.txt"])
    assert rc == 2 and "not in the schema" in capsys.readouterr().err
    # fallback flags, and a clear error without parameters
    rc = main(
        ["audit", "--config", str(config), "--out", str(out), "--no-cvpl", "--no-suggestions"]
    )
    assert rc == 2
    assert "give --parameters FILE" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"parties": "three", "schema": {}}')
    rc = main(["audit", "--config", str(config), "--parameters", str(tmp_path / "bad.json")])
    assert rc == 2
    assert "key 'parties'" in capsys.readouterr().err
