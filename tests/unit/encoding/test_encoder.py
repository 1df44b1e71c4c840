"""Encoder behaviour: normalisation, q-grams, hardening, BLIP, blocking, k choice, chunking, workers."""

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from party.encoding import bits, encoder
from party.encoding.blocking import year_of
from party.encoding.encoder import Encoder, blip_epsilon, choose_k, fill_stats
from party.encoding.normalise import normalise, qgrams
from party.encoding.schema import NormalisationSpec, parse_schema
from party.encoding.tuning import suggest_k, suggest_k_for_counts
from party.errors import PprlError

SECRET = bytes(range(100, 132))
NAMES = ["anna", "bob", "carla", "dmitri", "eve", "françois", "gül", "hans", "ines", "jo"]


def _schema(**top: Any) -> Any:
    base: dict[str, Any] = {
        "version": 1,
        "l": 512,
        "features": [{"identifier": "first"}, {"identifier": "last"}],
    }
    base.update(top)
    return parse_schema(base)


def _rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    rng = np.random.default_rng(seed)
    return [
        {"first": str(rng.choice(NAMES)), "last": str(rng.choice(NAMES)) + str(rng.integers(100))}
        for _ in range(n)
    ]


def test_normalisation_steps():
    d = NormalisationSpec()
    assert normalise("  ＪＯＨＮ  O'Brien-Smith ", d) == "john obriensmith"
    assert normalise("Straße", d) == "strasse"  # casefold
    assert normalise("ﬁnn", d) == "finn"  # NFKC
    assert normalise("Zoë", NormalisationSpec(strip_accents=True)) == "zoe"
    assert normalise("Zoë", d) == "zoë"
    assert normalise("a-b", NormalisationSpec(punctuation="space")) == "a b"
    assert normalise("a - b", NormalisationSpec(whitespace="remove")) == "ab"
    assert normalise(" A b ", NormalisationSpec(whitespace="keep", case="none")) == " A b "
    assert normalise("Ab", NormalisationSpec(case="upper")) == "AB"
    assert normalise("Ab", NormalisationSpec(case="lower")) == "ab"
    rep = NormalisationSpec(replacements=(("ph", "f"), ("fa", "v")))  # applied in order
    assert normalise("Raphael", rep) == "ravel"
    assert normalise("ﬁ", NormalisationSpec(nfkc=False, case="none")) == "ﬁ"


def test_qgrams():
    assert qgrams("ab", 2) == ["_a", "ab", "b_"]
    assert qgrams("ab", 2, padding=False) == ["ab"]
    assert qgrams("a", 3, padding=False) == ["a"]
    assert qgrams("aaa", 2, padding=False) == ["aa"]
    assert qgrams("abc", 3) == ["__a", "_ab", "abc", "bc_", "c__"]
    assert qgrams("ab", 1) == ["a", "b"]
    assert qgrams("ab", 2, padding=False, positional=True) == ["0:ab"]
    assert qgrams("", 2) == []


def test_salted_field_depends_on_salt_value():
    s = parse_schema(
        {
            "version": 1,
            "l": 256,
            "features": [{"identifier": "name", "salt": {"field": "yob"}}],
        }
    )
    enc = Encoder(s, SECRET)
    assert enc.field_qgrams("name", "Al", {"yob": "1980"}) == [
        "_a\x1f1980",
        "al\x1f1980",
        "l_\x1f1980",
    ]
    rec = enc.encode_rows(
        [
            {"name": "Al", "yob": "1980"},
            {"name": "Al", "yob": "1981"},
            {"name": "Al", "yob": "1980"},
        ]
    )
    assert not np.array_equal(rec.filters[0], rec.filters[1])
    assert np.array_equal(rec.filters[0], rec.filters[2])


def test_hash_schemes_differ_and_keys_are_per_field_and_secret():
    rows = [{"first": "anna", "last": "anna"}]
    outs = {}
    for scheme in ("hmac-sha256-random", "hmac-sha256-double", "mmh3-double"):
        rec = Encoder(_schema(hashing={"scheme": scheme}), SECRET).encode_rows(rows)
        outs[scheme] = bits.row_to_hex(rec.filters[0])
        enc = Encoder(_schema(hashing={"scheme": scheme}), SECRET)
        assert not np.array_equal(
            enc.value_positions("first", "anna"), enc.value_positions("last", "anna")
        )
        other = Encoder(_schema(hashing={"scheme": scheme}), SECRET[::-1])
        assert not np.array_equal(
            enc.value_positions("first", "anna"), other.value_positions("first", "anna")
        )
    assert len(set(outs.values())) == 3


def test_xor_fold_and_balance():
    rows = _rows(20)
    plain = Encoder(_schema(), SECRET)
    raw = plain.encode_rows(rows).filters
    folded = Encoder(_schema(hardening={"xorFold": True}), SECRET).encode_rows(rows)
    assert folded.filter_bits == 256
    expect = bits.slice_bits(raw, 0, 256) ^ bits.slice_bits(raw, 256, 512)
    assert np.array_equal(folded.filters, expect)
    bal = Encoder(_schema(hardening={"balance": True}), SECRET)
    rec = bal.encode_rows(rows)
    assert rec.filter_bits == 1024
    assert (rec.popcounts == 512).all()  # a balanced filter has exactly l ones
    # the permutation is keyed: another secret gives other filters of the same weight
    other = Encoder(_schema(hardening={"balance": True}), SECRET[::-1]).encode_rows(rows)
    assert not np.array_equal(other.filters, rec.filters)
    # undoing the permutation recovers filter + complement
    u = bits.unpack_rows(rec.filters, 1024)
    assert bal._perm is not None
    inv = np.empty_like(u)
    inv[:, bal._perm] = u
    raw_b = bits.unpack_rows(Encoder(_schema(), SECRET).encode_rows(rows).filters, 512)
    assert np.array_equal(inv[:, :512], raw_b) and np.array_equal(inv[:, 512:], 1 - raw_b)
    with pytest.raises(bits.BitLayoutError):
        bal.harden(np.zeros((1, 3), dtype=np.uint64))


def test_blip_flip_rate_epsilon_and_fresh_noise():
    rows = _rows(200)
    f = 0.1
    s = _schema(hardening={"blip": {"flipProbability": f}})
    plain = Encoder(_schema(), SECRET).encode_rows(rows).filters
    a = Encoder(s, SECRET, blip_rng=np.random.default_rng(5)).encode_rows(rows).filters
    b = Encoder(s, SECRET, blip_rng=np.random.default_rng(5)).encode_rows(rows).filters
    assert np.array_equal(a, b)  # injected generator: reproducible
    rate = bits.popcount_rows(a ^ plain).sum() / (200 * 512)
    assert abs(rate - f) < 0.01  # 102,400 bits: sd 0.001
    c = Encoder(s, SECRET).encode_rows(rows).filters  # os.urandom
    d = Encoder(s, SECRET).encode_rows(rows).filters
    assert not np.array_equal(c, d)
    rate_c = bits.popcount_rows(c ^ plain).sum() / (200 * 512)
    assert abs(rate_c - f) < 0.01
    assert blip_epsilon(s) == pytest.approx(2 * 20 * math.log(9))
    sb = _schema(hardening={"blip": {"flipProbability": f}, "balance": True})
    assert blip_epsilon(sb) == pytest.approx(4 * 20 * math.log(9))
    assert blip_epsilon(_schema()) is None
    assert Encoder(s, SECRET).blip_epsilon == blip_epsilon(s)


def test_blocking_functions():
    s = parse_schema(
        {
            "version": 1,
            "l": 64,
            "features": [{"identifier": "last"}],
            "blocking": [
                {"name": "sx", "parts": [{"field": "last", "function": "soundex"}]},
                {"name": "ny", "parts": [{"field": "last", "function": "nysiis"}]},
                {"name": "mp", "parts": [{"field": "last", "function": "metaphone"}]},
                {"name": "ex", "parts": [{"field": "last", "function": "exact"}]},
                {"name": "pre", "parts": [{"field": "last", "function": "prefix", "length": 3}]},
                {
                    "name": "combo",
                    "parts": [
                        {"field": "dob", "function": "year"},
                        {"field": "pc", "function": "postcode_prefix", "length": 3},
                    ],
                },
            ],
        }
    )
    enc = Encoder(s, SECRET)
    rec = enc.encode_rows(
        [
            {"last": "Robert", "dob": "1987-05-03", "pc": "ab1 2cd"},
            {"last": "Rupert", "dob": "03/05/1987", "pc": "AB12CD"},
            {"last": "ROBERT ", "dob": "19870503", "pc": "AB1"},
            {"last": "", "dob": "unknown", "pc": ""},
        ]
    )
    d = rec.block_digests
    assert d[0, 0] == d[1, 0]  # soundex R163 for both
    assert d[0, 3] == d[2, 3] != d[1, 3]  # exact after normalisation
    assert d[0, 4] == d[2, 4]  # prefix "rob"
    assert d[0, 5] == d[1, 5] == d[2, 5]  # year 1987 + AB1
    assert (d[3] == 0).all()  # no values -> 0 everywhere
    assert (d[:3] != 0).all()
    assert len(set(d[0].tolist())) == 6  # key names separate equal values
    assert year_of("1987-05-03") == year_of("3.5.1987") == year_of("19870503") == "1987"
    assert year_of("87-05-03") == "" and year_of("123456") == ""


def test_choose_k_and_suggest_k():
    assert choose_k(1024, 20) == round(1024 / 20 * math.log(2))
    assert choose_k(1000, 10, 0.3) == round(-100 * math.log(0.7))
    assert choose_k(10, 1000) == 1
    for bits_, avg, target in [(0, 10.0, 0.5), (1024, 0.0, 0.5), (1024, 10.0, 1.0)]:
        with pytest.raises(PprlError, match="choose_k needs"):
            choose_k(bits_, avg, target)
    s = _schema(hashing={"k": 10})
    rows = _rows(300)
    result = suggest_k(s, rows, target_fill=0.5)
    assert set(result) == {"first", "last"}
    tuned = parse_schema(
        {
            "version": 1,
            "l": 512,
            "features": [
                {"identifier": n, "strategy": {"bitsPerToken": result[n][1]}} for n in result
            ],
        }
    )
    fill = fill_stats(Encoder(tuned, SECRET).encode_rows(rows).filters, 512).mean
    assert 0.44 < fill < 0.56
    assert suggest_k_for_counts(s, {"first": 5.0, "last": 5.0}) == {
        "first": round(512 * math.log(2) / 100 * 10),
        "last": round(512 * math.log(2) / 100 * 10),
    }
    with pytest.raises(PprlError, match="no q-grams"):
        suggest_k_for_counts(s, {"first": 0.0, "last": 0.0})
    with pytest.raises(PprlError, match="target fill"):
        suggest_k_for_counts(s, {"first": 1.0}, 1.5)
    with pytest.raises(PprlError, match="no rows"):
        suggest_k(s, [])


def test_suggest_k_from_csv(tmp_path):
    p = tmp_path / "in.csv"
    _write_csv(p, _rows(50))
    got = suggest_k(_schema(), p, sample=20)
    assert got == suggest_k(_schema(), _rows(50)[:20])
    with pytest.raises(PprlError, match="header lacks column"):
        suggest_k(parse_schema({"version": 1, "l": 64, "features": [{"identifier": "x"}]}), p)
    with pytest.raises(PprlError, match="file not found"):
        suggest_k(_schema(), tmp_path / "none.csv")


def _write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=["rid", *rows[0].keys()])
        w.writeheader()
        for i, r in enumerate(rows):
            w.writerow({"rid": f"r{i}", **r})


def test_batching_and_memo_trim_give_identical_results(tmp_path, monkeypatch):
    rows = _rows(700, seed=3)
    rows[10]["first"] = ""  # missing -> empty
    p = tmp_path / "in.csv"
    _write_csv(p, rows)
    s = _schema(
        blocking=[
            {"name": "sx", "parts": [{"field": "last", "function": "soundex"}]},
            {
                "name": "two",
                "parts": [
                    {"field": "first", "function": "prefix", "length": 1},
                    {"field": "last", "function": "prefix", "length": 2},
                ],
            },
        ]
    )
    ref, rep_ref = Encoder(s, SECRET).encode_csv(p, id_column="rid")
    monkeypatch.setattr(encoder, "CSV_BLOCK_BYTES", 600)
    monkeypatch.setattr(encoder, "CHUNK_ROWS", 64)
    monkeypatch.setattr(encoder._FieldCodec, "MAX_VALUES", 50)
    ticks: list[int] = []
    small, rep = Encoder(s, SECRET).encode_csv(p, id_column="rid", progress=ticks.append)
    assert sum(ticks) == 700 and len(ticks) > 10
    assert small.record_ids == ref.record_ids
    assert np.array_equal(small.filters, ref.filters)
    assert np.array_equal(small.block_digests, ref.block_digests)
    assert rep.encoded == rep_ref.encoded == 700
    assert rep_ref.k_per_field == {"first": 20, "last": 20}
    assert 0 < rep_ref.fill_min <= rep_ref.fill_mean <= rep_ref.fill_max < 1
    lines = p.read_text(encoding="utf-8").splitlines(keepends=True)
    blanks = tmp_path / "blanks.csv"  # the same rows with blank lines: the csv-module path
    blanks.write_text("".join(lines[:300] + ["\n"] + lines[300:] + ["\n"]), encoding="utf-8")
    with_blanks, rep_b = Encoder(s, SECRET).encode_csv(blanks, id_column="rid")
    assert rep_b.skipped == {"blank line": 2} and rep_b.rows_read == 702
    assert with_blanks.record_ids == ref.record_ids
    assert np.array_equal(with_blanks.filters, ref.filters)
    assert np.array_equal(with_blanks.block_digests, ref.block_digests)
    rows_rec = Encoder(s, SECRET).encode_rows(rows)  # 11 batches of 64 rows
    assert np.array_equal(rows_rec.filters, ref.filters)
    assert np.array_equal(rows_rec.block_digests, ref.block_digests)
    assert rows_rec.record_ids == tuple(str(i) for i in range(1, 701))


def test_error_in_a_later_batch_names_its_row(tmp_path, monkeypatch):
    monkeypatch.setattr(encoder, "CSV_BLOCK_BYTES", 300)
    rows = _rows(100)
    rows[70]["first"] = "x" * 50
    p = tmp_path / "in.csv"
    _write_csv(p, rows)
    s = parse_schema(
        {
            "version": 1,
            "l": 64,
            "features": [
                {"identifier": "first", "validation": {"maxLength": 20}},
                {"identifier": "last"},
            ],
        }
    )
    with pytest.raises(PprlError, match=r"row 71, field 'first': value longer than maxLength 20"):
        Encoder(s, SECRET).encode_csv(p)


def test_empty_input_gives_empty_records(tmp_path):
    p = tmp_path / "in.csv"
    p.write_text("first,last\n")
    rec, report = Encoder(_schema(), SECRET).encode_csv(p)
    assert len(rec) == 0 and rec.filters.shape == (0, 8) and report.encoded == 0
    assert report.fill_mean == 0.0
    assert Encoder(_schema(), SECRET).encode_rows([]).filters.shape == (0, 8)


@pytest.mark.parametrize(
    "data",
    [
        b'a,b\n"x""y","p, q"\nz,\n',
        b'\xef\xbb\xbfa,b\r\n"x""y","p, q"\r\nz,\r\n',  # BOM, CRLF
        b'a,b\n"x""y","p, q"\nz,',  # no final newline
        b'a,b\r\n"x""y","p, q"\r\n\r\nz,\r\n',  # blank line: csv-module path
    ],
)
def test_csv_dialect_variants_encode_alike(tmp_path, data):
    s = parse_schema(
        {"version": 1, "l": 64, "features": [{"identifier": "a"}, {"identifier": "b"}]}
    )
    enc = Encoder(s, SECRET)
    ref = enc.encode_rows([{"a": 'x"y', "b": "p, q"}, {"a": "z", "b": ""}])
    p = tmp_path / "in.csv"
    p.write_bytes(data)
    rec, _ = enc.encode_csv(p)
    assert np.array_equal(rec.filters, ref.filters)
    assert rec.record_ids[0] == "1" and len(rec) == 2


def test_header_without_newline_is_an_empty_input(tmp_path):
    s = parse_schema({"version": 1, "l": 64, "features": [{"identifier": "a"}]})
    p = tmp_path / "in.csv"
    p.write_bytes(b"a")
    rec, report = Encoder(s, SECRET).encode_csv(p)
    assert len(rec) == 0 and report.rows_read == 0
