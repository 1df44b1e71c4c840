"""`pprl-party encode` / `suggest-k` handlers, driven through their own argparse registration."""

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from party.encoding import cli
from party.encoding.encoder import Encoder
from party.encoding.schema import load_schema
from party.encoding.store import load_encodings
from party.errors import PprlError

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = ROOT / "examples" / "schema.json"
CSV_TEXT = (
    "id,given_name,surname,dob,postcode\n"
    "p1,Anna,Müller,1987-05-03,AB1 2CD\n"
    "p2,Ben,Smith,,XY1 1AA\n"
    "p3,Zoë,Ng,1990-12-01,AB1 2CD\n"
)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    cli.register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


@pytest.fixture
def files(tmp_path):
    data = tmp_path / "people.csv"
    data.write_text(CSV_TEXT, encoding="utf-8")
    secret = tmp_path / "secret"
    secret.write_bytes(bytes(range(32)))
    return data, secret, tmp_path / "out.enc"


def test_encode_writes_file_and_summary(files, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # no wrapping in the captured table
    data, secret, out = files
    rc = _run(
        [
            "encode",
            "--schema",
            str(SCHEMA),
            "--secret",
            str(secret),
            "--input",
            str(data),
            "--output",
            str(out),
            "--id-column",
            "id",
            "--quiet",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    for label in (
        "records encoded",
        "rows skipped",
        "fill (mean / min / max)",
        "k per field",
        "time",
    ):
        assert label in text
    assert "missing value in field 'dob'" in text  # dob policy is skip
    assert "Müller" not in text and "Anna" not in text
    records, digest = load_encodings(out)
    schema = load_schema(SCHEMA)
    assert digest == schema.digest()
    assert records.record_ids == ("p1", "p3")
    expected, _ = Encoder(schema, bytes(range(32))).encode_csv(data, id_column="id")
    assert np.array_equal(records.filters, expected.filters)


def test_encode_errors_are_pprl_errors(files):
    data, secret, out = files
    short = secret.parent / "short"
    short.write_bytes(b"x")
    with pytest.raises(PprlError, match="at least 32 random bytes"):
        _run(
            [
                "encode",
                "--schema",
                str(SCHEMA),
                "--secret",
                str(short),
                "--input",
                str(data),
                "--output",
                str(out),
            ]
        )
    bad = secret.parent / "bad.json"
    bad.write_text(json.dumps({"version": 9}))
    with pytest.raises(PprlError, match="invalid linkage schema"):
        _run(
            [
                "encode",
                "--schema",
                str(bad),
                "--secret",
                str(secret),
                "--input",
                str(data),
                "--output",
                str(out),
            ]
        )
    assert not out.exists()


def test_suggest_k_prints_table(files, capsys):
    data, _secret, _out = files
    assert _run(["suggest-k", "--schema", str(SCHEMA), "--input", str(data)]) == 0
    text = capsys.readouterr().out
    assert "suggested k" in text and "given_name" in text and "surname" in text


def test_encode_accepts_a_schema_without_blocking_keys(files, tmp_path):
    """All pairs: `pprl-party encode` writes one digest column, the same for every record."""
    data, secret, out = files
    raw = json.loads(SCHEMA.read_text(encoding="utf-8"))
    raw["blocking"] = []
    schema_path = tmp_path / "all-pairs.json"
    schema_path.write_text(json.dumps(raw), encoding="utf-8")
    rc = _run(
        [
            "encode",
            "--schema",
            str(schema_path),
            "--secret",
            str(secret),
            "--input",
            str(data),
            "--output",
            str(out),
            "--id-column",
            "id",
            "--quiet",
        ]
    )
    assert rc == 0
    records, _ = load_encodings(out)
    assert records.block_digests.shape == (2, 1)
    assert len(set(records.block_digests[:, 0].tolist()) - {0}) == 1
