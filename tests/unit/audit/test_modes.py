"""The audit and the gate per protocol mode: what each mode reveals, the default policy, mode sources."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from party.audit.gate import GateError, check_before_join
from party.audit.modes import NOT_RUN_IN_MPC3, SEGMENT_MEASURES
from party.audit.policy import DEFAULT_POLICY, AuditPolicy, PolicyError
from party.audit.run import AuditOptions
from party.encoding.encoder import Encoder
from party.encoding.schema import parse_schema
from party.protocol.params import ProtocolParameters
from party.synthetic import generate

ROOT = Path(__file__).resolve().parents[3]
SECRET = b"mode-test-secret-0123456789abcdef"
FAST = AuditOptions(cvpl=False, suggestions=False)


@pytest.fixture(scope="module")
def party() -> SimpleNamespace:
    """Party 0 of a generated data set, encoded with the example parameters (P = 3, l = 1023)."""
    params = json.loads((ROOT / "examples" / "parameters.json").read_text(encoding="utf-8"))
    schema = parse_schema(params["schema"])
    rows = list(generate(3, 400, corruption=0.2, seed=12).tables[0].rows())
    enc = Encoder(schema, SECRET)
    records = enc.encode_rows(rows, id_column="rec_id")
    by_id = {r["rec_id"]: r for r in rows}
    aligned = [by_id[i] for i in records.record_ids]
    return SimpleNamespace(schema=schema, enc=enc, records=records, rows=aligned, names=by_id)


def gate(party: SimpleNamespace, params: Any, policy: Any, **kw: Any) -> Any:
    return check_before_join(
        party.records,
        party.enc,
        party.schema,
        params,
        policy,
        rows=kw.pop("rows", party.rows),
        self_index=0,
        options=kw.pop("options", FAST),
        **kw,
    )


def test_default_policy_declines_the_segments_run_and_allows_mpc3(party: SimpleNamespace) -> None:
    seg = gate(party, 3, DEFAULT_POLICY, options=AuditOptions(suggestions=False))
    assert not seg.allowed
    assert len(seg.reasons) == 2, seg.reasons
    insider, cvpl = seg.reasons
    assert insider.startswith("insider one-to-one re-identification of whole records (segment ")
    assert cvpl.startswith("CVPL-LR at tau=0.9 (segment ")
    assert all(r.endswith("exceeds limit 0.0500") for r in seg.reasons)
    ins = seg.report.insider
    worst = max(s.record.one_to_one.value for s in ins.segments if s.segment != 0)
    assert worst > 0.9  # unhardened filters: nearly every record re-identified
    mpc = gate(party, 3, DEFAULT_POLICY, mode="mpc3", options=AuditOptions(suggestions=False))
    assert mpc.allowed and mpc.reasons == []
    assert mpc.report.cvpl is None  # not run: nothing to link
    assert sorted(mpc.report.decision["not_applicable"]) == sorted(DEFAULT_POLICY)
    assert seg.report.decision["not_applicable"] == []


def test_mode_comes_from_the_parameters_unless_given(party: SimpleNamespace) -> None:
    as_object = ProtocolParameters(("a", "b", "c"), 1023, 0.8, 0.0, mode="mpc3")
    assert gate(party, as_object, DEFAULT_POLICY).report.mode == "mpc3"
    assert gate(party, {"parties": 3, "mode": "mpc3"}, DEFAULT_POLICY).allowed
    # an explicit mode wins over the parameters'; no mode anywhere means segments
    assert not gate(party, as_object, DEFAULT_POLICY, mode="segments").allowed
    assert gate(party, {"parties": 3}, None).report.mode == "segments"
    with pytest.raises(GateError, match="unknown protocol mode 'mpc4'; expected one of"):
        gate(party, 3, None, mode="mpc4")
    with pytest.raises(GateError, match="protocol parameters: mode: unknown protocol mode"):
        gate(party, {"parties": 3, "mode": 3}, None)


def test_mpc3_report_states_what_is_revealed_and_skips_the_segment_measures(
    party: SimpleNamespace,
) -> None:
    report = gate(party, 3, DEFAULT_POLICY, mode="mpc3").report
    doc = json.loads(report.to_json())
    meta = doc["meta"]
    assert meta["mode"] == "mpc3" and meta["receiving_segments"] == []
    said = " ".join(meta["revealed"])
    for phrase in (
        "Blocking-key digests",
        "three compute parties",
        "block structure",
        "match bit of every candidate set",
        "for matched sets only, their common 1-bit count and total 1-bit count",
        "No counts and no Dice of non-matching sets are opened",
        "Two colluding compute parties could reconstruct every input",
    ):
        assert phrase in said, phrase
    assert set(meta["not_run"]) == set(SEGMENT_MEASURES)
    assert "insider segment attack: not run in mode mpc3" in meta["not_run"]["insider"]
    # the measures that do not apply were not run, the ones on what is revealed were
    assert doc["insider"] is None and doc["segments"] is None and doc["cvpl"] is None
    assert doc["frequency"] == {} and doc["sensitivity"] == []
    assert doc["blocking"]["alone_in_some_block"]["total"] == len(party.rows)
    assert doc["uniqueness"] is not None
    page = report.to_html()
    assert "What this run reveals (mode mpc3)" in page
    assert "insider segment attack: not run in mode mpc3" in page
    assert "Uniqueness of revealed bit patterns" not in page
    rows = dict(report.summary_rows())
    assert rows["protocol mode"] == "mpc3"
    assert rows["insider segment attack"] == "not run (mode mpc3: no segments sent)"
    assert rows["decision"] == "ALLOWED"


def test_segments_report_states_what_is_revealed_and_runs_every_measure(
    party: SimpleNamespace,
) -> None:
    report = gate(party, 3, None).report
    doc = json.loads(report.to_json())
    meta = doc["meta"]
    assert meta["mode"] == "segments" and meta["not_run"] == {}
    assert meta["receiving_segments"] == [1, 2]
    said = " ".join(meta["revealed"])
    assert "Segment j of each such record's filter (1/3 of its bits) to party j" in said
    assert "for j in {1, 2}" in said and "insider attack" in said
    assert doc["insider"] is not None and doc["segments"] is not None and doc["frequency"]
    page = report.to_html()
    assert "What this run reveals (mode segments)" in page and "Measures not run" not in page
    assert "insider segment attack" not in dict(report.summary_rows())
    # the reasons a measure is skipped in mpc3 never appear in a segments report
    assert not any(reason in page for reason in NOT_RUN_IN_MPC3.values())


def test_segment_limits_are_moot_in_mpc3_but_fail_closed_in_segments(
    party: SimpleNamespace,
) -> None:
    strict = {
        "max_insider_reidentification": 0.0,
        "max_insider_one_to_one": {"surname": 0.0},
        "max_insider_top1": 0.0,
        "max_dr_mark": 0.0,
        "max_dr_mean": 0.0,
        "max_unique_segment": 0.0,
        "max_cvpl_lr": 0.0,
    }
    # no plaintext: segments mode cannot run the insider/frequency attacks and declines
    blind = gate(party, 3, strict, rows=None)
    assert not blind.allowed
    assert any(r.startswith("insider attack: not measured") for r in blind.reasons)
    assert any(r.startswith("frequency attack: not measured") for r in blind.reasons)
    moot = gate(party, 3, strict, rows=None, mode="mpc3")
    assert moot.allowed, moot.reasons
    assert sorted(moot.report.decision["not_applicable"]) == sorted(strict)
    # what mpc3 does reveal in the clear (blocking digests) is still limited
    blocks = gate(party, 3, {"max_alone_in_block": 0.0}, mode="mpc3")
    assert not blocks.allowed
    assert blocks.reasons[0].startswith("records alone in their block: rate ")


def test_allowed_modes(party: SimpleNamespace) -> None:
    only_mpc3 = {"allowed_modes": ["mpc3"]}
    seg = gate(party, 3, only_mpc3)
    assert seg.reasons == ["protocol mode segments: not among the policy's allowed_modes (mpc3)"]
    assert gate(party, 3, only_mpc3, mode="mpc3").allowed
    assert AuditPolicy.from_mapping({}).allowed_modes == ("segments", "mpc3")
    assert not AuditPolicy.from_mapping(only_mpc3).empty
    for bad in ("mpc3", [], ["mpc3", "yolo"], [3]):
        with pytest.raises(PolicyError, match="allowed_modes: expected a non-empty list of modes"):
            AuditPolicy.from_mapping({"allowed_modes": bad})


def test_audit_command_takes_the_mode_from_the_parameters_and_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from party.cli import main

    rows = list(generate(2, 150, corruption=0.0, seed=5).tables[0].rows())
    cols = list(rows[0])
    lines = [",".join(cols)] + [",".join(r[c] for c in cols) for r in rows]
    (tmp_path / "party.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "secret.key").write_bytes(bytes(range(100, 132)))
    params = json.loads((ROOT / "examples" / "parameters.json").read_text(encoding="utf-8"))
    segments = {**params, "mode": "segments", "segment_threshold": 0.7}
    (tmp_path / "segments.json").write_text(json.dumps(segments))
    (tmp_path / "mpc3.json").write_text(json.dumps({**params, "mode": "mpc3"}))
    (tmp_path / "bad.json").write_text(json.dumps({**params, "mode": "segmentz"}))
    config = tmp_path / "party.toml"  # no [audit.policy]: the default policy applies
    config.write_text(
        '[node]\nname = "party-b"\nlisten = "127.0.0.1:0"\ncoordinator = "127.0.0.1:1"\n'
        '[data]\ncsv = "party.csv"\nid_column = "rec_id"\nsecret_file = "secret.key"\n'
        'results = "res"\n',
        encoding="utf-8",
    )

    def audit(params_file: str, *extra: str) -> tuple[int, dict[str, Any], str]:
        out = tmp_path / f"report-{params_file}-{len(extra)}"
        rc = main(
            ["audit", "--config", str(config), "--parameters", str(tmp_path / params_file)]
            + ["--out", str(out), "--no-cvpl", "--no-suggestions", *extra]
        )
        printed = " ".join(capsys.readouterr().out.split())
        doc = json.loads((out / "audit.json").read_text()) if rc != 2 else {}
        return rc, doc, printed

    rc, doc, printed = audit("segments.json")
    assert rc == 1 and doc["meta"]["mode"] == "segments"
    assert doc["decision"]["policy"]["max_insider_record_one_to_one"] == 0.05
    assert "policy (default policy): DECLINED" in printed
    assert "insider one-to-one re-identification of whole records" in printed
    rc, doc, printed = audit("mpc3.json")
    assert rc == 0 and doc["meta"]["mode"] == "mpc3" and doc["insider"] is None
    assert "what this run reveals (mode mpc3)" in printed
    assert "insider segment attack: not run in mode mpc3" in printed
    assert "policy (default policy): ALLOWED" in printed
    # --mode overrides the file's mode, both ways
    assert audit("mpc3.json", "--mode", "segments")[0] == 1
    rc, doc, _ = audit("segments.json", "--mode", "mpc3")
    assert rc == 0 and doc["meta"]["mode"] == "mpc3"
    rc = main(["audit", "--config", str(config), "--parameters", str(tmp_path / "bad.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "bad.json: key 'mode': unknown protocol mode 'segmentz'" in err
    assert "Traceback" not in err


def test_mpc_doc_has_the_threat_model_sections() -> None:
    text = (ROOT / "docs" / "mpc.md").read_text(encoding="utf-8")
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    for section in ("Threat model", "What is revealed", "How to choose a mode", "Cost model"):
        assert any(h.startswith(section) for h in headings), (section, headings)
    for statement in (
        "Any two colluding compute parties learn every input",
        "Honest majority among the three compute parties",
        "Semi-honest parties",
        "A data party that is not a compute party",
    ):
        assert statement in text, statement
