"""Corruptor: every operator does what it says, determinism, guarantees and errors."""

import datetime as dt

import pytest

from party.synthetic import OPERATORS, CorruptionError, Corruptor, generate
from party.synthetic.corrupt import KEYBOARD_NEIGHBOURS, OCR_CONFUSIONS

RECORD = {
    "rec_id": "r1",
    "given_name": "catherine",
    "surname": "philipson",
    "sex": "f",
    "dob": "1975-03-08",
    "street_address": "12 church street",
    "suburb": "blacktown",
    "postcode": "2148",
    "state": "nsw",
}


def _diff_positions(a: str, b: str) -> list[int]:
    return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]


@pytest.mark.parametrize("seed", range(20))
def test_character_edits(seed):
    c = Corruptor(seed)
    v = RECORD["surname"]
    ins = c.apply("insert", RECORD, "surname")["surname"]
    assert len(ins) == len(v) + 1
    assert any(ins[:i] + ins[i + 1 :] == v for i in range(len(ins)))
    dele = c.apply("delete", RECORD, "surname")["surname"]
    assert len(dele) == len(v) - 1
    assert any(v[:i] + v[i + 1 :] == dele for i in range(len(v)))
    sub = c.apply("substitute", RECORD, "surname")["surname"]
    assert len(sub) == len(v) and len(_diff_positions(v, sub)) == 1
    tr = c.apply("transpose", RECORD, "surname")["surname"]
    pos = _diff_positions(v, tr)
    assert len(pos) == 2 and pos[1] == pos[0] + 1 and sorted(tr) == sorted(v)
    kb = c.apply("keyboard", RECORD, "surname")["surname"]
    (i,) = _diff_positions(v, kb)
    assert kb[i] in KEYBOARD_NEIGHBOURS[v[i]]


@pytest.mark.parametrize("seed", range(10))
def test_ocr_and_phonetic(seed):
    c = Corruptor(seed)
    ocr = c.apply("ocr", RECORD, "suburb")["suburb"]
    assert ocr != RECORD["suburb"]
    assert any(
        ocr == RECORD["suburb"][:i] + rep + RECORD["suburb"][i + len(pat) :]
        for pat, rep in OCR_CONFUSIONS
        for i in range(len(RECORD["suburb"]))
        if RECORD["suburb"].startswith(pat, i)
    )
    ph = c.apply("phonetic", RECORD, "given_name")["given_name"]
    assert ph != "catherine" and ph[0] in "ck"
    ph2 = c.apply("phonetic", RECORD, "surname")["surname"]
    assert ph2 != "philipson"


def test_missing_swap_and_postcode():
    c = Corruptor(1)
    assert c.apply("missing", RECORD, "suburb")["suburb"] == ""
    swapped = c.apply("swap_names", RECORD, "given_name")
    assert (swapped["given_name"], swapped["surname"]) == ("philipson", "catherine")
    for seed in range(20):
        pc = Corruptor(seed).apply("keyboard", RECORD, "postcode")["postcode"]
        assert pc.isdigit() and len(pc) == 4 and pc != "2148"
        pc = Corruptor(seed).apply("substitute", RECORD, "postcode")["postcode"]
        assert pc.isdigit() and len(pc) == 4 and pc != "2148"


@pytest.mark.parametrize("seed", range(30))
def test_date_typos_are_valid_dates(seed):
    out = Corruptor(seed).apply("date", RECORD, "dob")["dob"]
    d = dt.date.fromisoformat(out)
    assert out != RECORD["dob"] and len(out) == 10
    assert d != dt.date(1975, 3, 8)


def test_deterministic_per_seed():
    recs = [r for t in generate(2, 50, corruption=0, seed=4).tables for r in t.rows()]
    a = [Corruptor(9).corrupt(r, 2) for r in recs]
    b = [Corruptor(9).corrupt(r, 2) for r in recs]
    assert a == b
    c1, c2 = Corruptor(9), Corruptor(9)
    assert [c1.corrupt(r) for r in recs] == [c2.corrupt(r) for r in recs]


def test_every_error_changes_the_record_and_never_the_id():
    recs = [r for t in generate(2, 300, corruption=0, seed=4).tables for r in t.rows()]
    c = Corruptor(0)
    used = set()
    for r in recs:
        out = c.corrupt(r, 1)
        assert out != r and out["rec_id"] == r["rec_id"]
        assert set(out) == set(r)
        changed = [k for k in r if r[k] != out[k]]
        assert 1 <= len(changed) <= 2  # two only for a name swap
        used.update(changed)
    assert {"given_name", "surname", "dob", "street_address", "suburb", "postcode"} <= used
    assert c.corrupt(RECORD, 0) == RECORD


def test_restricted_operators_and_weights():
    c = Corruptor(3, operators=["missing"], field_weights={"surname": 1.0})
    for _ in range(20):
        out = c.corrupt(RECORD)
        (changed,) = [k for k in RECORD if RECORD[k] != out[k]]
        assert out[changed] == ""
    only_dob = Corruptor(3, operators=["date"])
    for _ in range(10):
        out = only_dob.corrupt(RECORD)
        assert [k for k in RECORD if RECORD[k] != out[k]] == ["dob"]


def test_nothing_to_corrupt_returns_copy():
    rec = {"rec_id": "1", "given_name": "", "surname": ""}
    assert Corruptor(0).corrupt(rec, 3) == rec


def test_errors():
    with pytest.raises(CorruptionError, match="unknown corruption operator"):
        Corruptor(0, operators=["explode"])
    with pytest.raises(CorruptionError, match="n_errors"):
        Corruptor(0).corrupt(RECORD, -1)
    with pytest.raises(CorruptionError, match="no field 'nope'"):
        Corruptor(0).apply("insert", RECORD, "nope")
    with pytest.raises(CorruptionError, match="field weight"):
        Corruptor(0, field_weights={"surname": -1})
    assert "date" in OPERATORS
