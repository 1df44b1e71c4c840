"""Policy parsing errors, gate decisions (allow, decline with reasons, fail closed), row alignment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from party.audit.gate import GateError, aligned_rows, check_before_join, evaluate_policy
from party.audit.policy import AuditPolicy, PolicyError
from party.audit.run import AuditOptions
from party.encoding.encoder import Encoder
from party.encoding.schema import parse_schema
from party.synthetic import generate

SECRET = b"gate-test-secret-0123456789abcdef"
FAST = AuditOptions(cvpl=False, suggestions=False)


def test_policy_parses_and_reports_every_problem() -> None:
    p = AuditPolicy.from_mapping(
        {
            "max_insider_reidentification": 0.05,
            "max_insider_one_to_one": {"surname": 0.01},
            "max_dr_mark": 0,
            "conservative": True,
            "insider_max_targets": 0,
        }
    )
    assert p.max_insider_reidentification == 0.05 and p.max_dr_mark == 0.0
    assert p.field_limit("surname") == 0.01 and p.field_limit("dob") == 0.05
    assert p.insider_max_targets is None and p.conservative
    assert AuditPolicy.from_mapping({"max_insider_one_to_one": 0.2}).field_limit("x") == 0.2
    with pytest.raises(PolicyError) as err:
        AuditPolicy.from_mapping(
            {
                "max_insider_reidentfication": 0.1,
                "max_dr_mark": 1.5,
                "max_alone_in_block": "low",
                "conservative": "yes",
                "insider_max_targets": -1,
                "max_insider_one_to_one": {"surname": True},
            }
        )
    msg = str(err.value)
    assert "unknown key(s) max_insider_reidentfication" in msg
    assert "max_dr_mark: expected a number between 0 and 1" in msg
    assert "max_alone_in_block: expected a number" in msg
    assert "conservative: expected true or false" in msg
    assert "insider_max_targets" in msg and "max_insider_one_to_one.surname" in msg
    assert len(err.value.problems) == 6
    with pytest.raises(PolicyError, match="expected a table"):
        AuditPolicy.from_mapping(["max_dr_mark"])  # type: ignore[arg-type]
    assert AuditPolicy.from_mapping(None).empty


def _schema(l_bits: int = 600, **hardening: Any) -> Any:
    return parse_schema(
        {
            "version": 1,
            "l": l_bits,
            "hashing": {"k": 20},
            "hardening": {"xorFold": False, "balance": False, "blip": None, **hardening},
            "features": [
                {"identifier": "given_name"},
                {"identifier": "surname"},
                {"identifier": "dob", "comparison": {"type": "ngram", "n": 2, "padding": False}},
            ],
            "blocking": [
                {"name": "sx", "parts": [{"field": "surname", "function": "soundex"}]},
            ],
        }
    )


@pytest.fixture(scope="module")
def party_rows() -> list[dict[str, str]]:
    return list(generate(2, 300, corruption=0.0, seed=9).tables[0].rows())


def test_gate_declines_unhardened_segments_and_allows_loose_policy(
    party_rows: list[dict[str, str]],
) -> None:
    schema = _schema()
    enc = Encoder(schema, SECRET)
    records = enc.encode_rows(party_rows)
    strict = check_before_join(
        records,
        enc,
        schema,
        3,
        {"max_insider_reidentification": 0.05, "max_alone_in_block": 0.99},
        rows=party_rows,
        self_index=0,
        options=FAST,
    )
    assert not strict.allowed
    assert any(
        r.startswith("insider one-to-one re-identification of surname") for r in strict.reasons
    )
    assert all("limit 0.0500" in r for r in strict.reasons)
    # reasons never carry values: no name of the data appears in them
    names = {r["surname"] for r in party_rows} | {r["given_name"] for r in party_rows}
    assert not any(n and n in " ".join(strict.reasons).split() for n in names)
    assert strict.report is not None and strict.report.decision is not None
    assert strict.report.receiving_segments == [1, 2]
    loose = check_before_join(
        records,
        enc,
        schema,
        3,
        {"max_insider_reidentification": 1.0},
        rows=party_rows,
        options=FAST,
    )
    assert loose.allowed and loose.reasons == []
    nopolicy = check_before_join(records, enc, schema, 3, None, rows=party_rows, options=FAST)
    assert nopolicy.allowed


def test_gate_fails_closed_without_plaintext(party_rows: list[dict[str, str]]) -> None:
    schema = _schema()
    enc = Encoder(schema, SECRET)
    records = enc.encode_rows(party_rows)
    d = check_before_join(
        records, enc, schema, 3, {"max_insider_reidentification": 0.5}, options=FAST
    )
    assert not d.allowed
    assert "insider attack: not measured" in d.reasons[0]
    # a plaintext-free limit is still evaluated
    ok = check_before_join(records, enc, schema, 3, {"max_alone_in_block": 1.0}, options=FAST)
    assert ok.allowed


def test_gate_accepts_plain_rows_and_protocol_parameters(party_rows: list[dict[str, str]]) -> None:
    from party.protocol.params import ProtocolParameters

    schema = _schema()
    enc = Encoder(schema, SECRET)
    params = ProtocolParameters(("a", "b", "c"), schema.output_bits, 0.8, 0.7, target="all")
    d = check_before_join(
        party_rows, enc, schema, params, {"max_unique_segment": 1.0}, options=FAST
    )
    assert d.allowed and d.report is not None and d.report.meta["parties"] == 3
    assert d.report.insider is not None  # rows given as records: plaintext measures ran


def test_conservative_uses_the_upper_bound(party_rows: list[dict[str, str]]) -> None:
    schema = _schema()
    enc = Encoder(schema, SECRET)
    records = enc.encode_rows(party_rows)
    d = check_before_join(records, enc, schema, 3, None, rows=party_rows, options=FAST)
    assert d.report is not None
    alone = d.report.blocking.alone_in_some_block
    limit = alone.value + 1e-6
    assert evaluate_policy(d.report, AuditPolicy.from_mapping({"max_alone_in_block": limit})) == []
    tight = AuditPolicy.from_mapping({"max_alone_in_block": limit, "conservative": True})
    reasons = evaluate_policy(d.report, tight)
    assert len(reasons) == 1 and "upper 95% bound" in reasons[0]


def test_hardening_lowers_the_insider_risk(party_rows: list[dict[str, str]]) -> None:
    schema = _schema(xorFold=True)
    enc = Encoder(schema, SECRET)
    records = enc.encode_rows(party_rows)
    d = check_before_join(
        records,
        enc,
        schema,
        3,
        {"max_insider_reidentification": 0.05},
        rows=party_rows,
        options=FAST,
    )
    assert d.allowed, d.reasons
    assert d.report is not None and any("lower bound" in n for n in d.report.meta["notes"])


def test_report_serialises(party_rows: list[dict[str, str]]) -> None:
    schema = _schema()
    enc = Encoder(schema, SECRET)
    records = enc.encode_rows(party_rows)
    d = check_before_join(
        records,
        enc,
        schema,
        3,
        {"max_insider_reidentification": 0.05},
        rows=party_rows,
        options=AuditOptions(cvpl=True, suggestions=True, cvpl_settings=False),
    )
    assert d.report is not None
    doc = json.loads(d.report.to_json())
    assert doc["format"] == "pprl-audit-report" and doc["decision"]["allowed"] is False
    assert doc["insider"]["segments"][0]["fields"]["surname"]["one_to_one"]["ci95"]
    assert doc["cvpl"] and doc["cvpl"][0]["linkage_rate"][0]["total"] > 0
    assert d.report.suggestions  # what would pass
    page = d.report.to_html()
    assert page.count("data:image/png") >= 4 and "DECLINED" in page
    text = json.dumps(doc) + page
    for r in party_rows[:50]:
        assert f'"{r["surname"]}"' not in text


def test_aligned_rows(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("id,name\nb,2\n\na,1\n", encoding="utf-8")
    assert aligned_rows(p, "id", ["a", "b"]) == [{"id": "a", "name": "1"}, {"id": "b", "name": "2"}]
    # without an id column ids are 1-based data row numbers, blank lines counted
    assert aligned_rows(p, None, ["3"]) == [{"id": "a", "name": "1"}]
    with pytest.raises(GateError, match="1 encoded record id"):
        aligned_rows(p, "id", ["a", "zz"])
    with pytest.raises(GateError, match="no id column"):
        aligned_rows(p, "nope", ["a"])
    with pytest.raises(GateError, match="cannot read"):
        aligned_rows(tmp_path / "missing.csv", None, ["1"])


def test_gate_rejects_misaligned_rows(party_rows: list[dict[str, str]]) -> None:
    schema = _schema()
    enc = Encoder(schema, SECRET)
    records = enc.encode_rows(party_rows)
    with pytest.raises(GateError, match="plaintext rows given"):
        check_before_join(records, enc, schema, 3, None, rows=party_rows[:-1], options=FAST)
    from party.protocol.params import ProtocolParameters

    wrong = ProtocolParameters(("a", "b", "c"), 3 * 100, 0.8, 0.7, target="all")
    with pytest.raises(GateError, match="filter_bits=300"):
        check_before_join(records, enc, schema, wrong, None, rows=party_rows, options=FAST)
    with pytest.raises(GateError, match="number of parties"):
        check_before_join(records, enc, schema, object(), None, rows=party_rows, options=FAST)
    assert np.all(records.popcounts > 0)
