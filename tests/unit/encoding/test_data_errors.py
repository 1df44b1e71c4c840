"""Every data, secret and file error path: the message names file/row/field and never the value."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from party.encoding import bits
from party.encoding.encoder import EncodeDataError, Encoder
from party.encoding.hashing import SecretError, check_secret, load_secret
from party.encoding.records import EncodedRecords
from party.encoding.schema import parse_schema
from party.encoding.store import EncodingsFileError, load_encodings, save_encodings
from party.errors import PprlError

SECRET = b"k" * 32
SENSITIVE = "Zebedee"  # a value that must never appear in a message


def _schema(**field_opts: Any) -> Any:
    return parse_schema(
        {
            "version": 1,
            "l": 128,
            "features": [{"identifier": "name", **field_opts}, {"identifier": "city"}],
            "blocking": [{"name": "sx", "parts": [{"field": "town", "function": "soundex"}]}],
        }
    )


def _csv(tmp_path: Path, text: str | bytes, name: str = "in.csv") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, encoding="utf-8")
    return p


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(PprlError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert SENSITIVE not in msg and SENSITIVE.lower() not in msg
    return msg


HEADER = "id,name,city,town\n"


def test_csv_structure_errors(tmp_path):
    enc = Encoder(_schema(), SECRET)
    assert (
        _error(enc.encode_csv, tmp_path / "missing.csv")
        == f"{tmp_path / 'missing.csv'}: file not found"
    )
    assert "cannot read" in _error(enc.encode_csv, tmp_path)
    assert "empty file (no header row)" in _error(enc.encode_csv, _csv(tmp_path, ""))
    assert "header: malformed CSV" in _error(enc.encode_csv, _csv(tmp_path, 'id,"name'))
    msg = _error(enc.encode_csv, _csv(tmp_path, "id,name\n1,x\n"))
    assert "header lacks column(s) ['city', 'town'] required by the schema" in msg
    msg = _error(enc.encode_csv, _csv(tmp_path, HEADER), id_column="pid")
    assert "header lacks column(s) ['pid']" in msg and "--id-column" in msg
    msg = _error(enc.encode_csv, _csv(tmp_path, "id,name,name,city,town\n"))
    assert "duplicate column name(s) in header: ['name']" in msg
    p = _csv(tmp_path, HEADER + f"1,{SENSITIVE},a,b\n2,{SENSITIVE},a\n")
    assert _error(enc.encode_csv, p) == f"{p}, row 2: has 3 column(s), the header has 4"
    p = _csv(tmp_path, HEADER + f'1,"{SENSITIVE},a,b\n')
    assert "malformed CSV" in _error(enc.encode_csv, p)


def test_invalid_utf8_names_row_and_field(tmp_path):
    enc = Encoder(_schema(), SECRET)
    p = _csv(tmp_path, (HEADER + "1,ok,x,y\n2,Zebed\xe9e,x,y\n").encode("latin-1"))
    assert _error(enc.encode_csv, p) == f"{p}, row 2, field 'name': not valid UTF-8"
    p = _csv(tmp_path, (HEADER + "1,ok,x,Zebed\xe9e\n").encode("latin-1"))
    assert _error(enc.encode_csv, p) == f"{p}, row 1, field 'town': not valid UTF-8"
    p = _csv(tmp_path, ("id,name,city,town\nZebed\xe9e,ok,x,y\n").encode("latin-1"))
    assert _error(enc.encode_csv, p, id_column="id") == f"{p}, row 1, field 'id': not valid UTF-8"
    skip = Encoder(_schema(validation={"onInvalid": "skip"}), SECRET)
    p = _csv(tmp_path, (HEADER + "1,ok,x,y\n2,Zebed\xe9e,x,y\n").encode("latin-1"))
    rec, report = skip.encode_csv(p)
    assert rec.record_ids == ("1",)
    assert report.skipped == {"invalid value in field 'name' (not valid UTF-8)": 1}


def test_missing_value_policies(tmp_path):
    text = HEADER + f"1,{SENSITIVE},a,b\n2,NA,a,b\n3, ,a,b\n"
    p = _csv(tmp_path, text)
    sentinels = ["", "NA"]
    empty = Encoder(_schema(missingValue={"sentinels": sentinels, "policy": "empty"}), SECRET)
    rec, report = empty.encode_csv(p)
    assert report.encoded == 3 and report.skipped == {}
    # a missing name contributes nothing: same filter as the city alone
    city_only = Encoder(_schema(), SECRET).encode_rows([{"name": "", "city": "a", "town": "b"}])
    assert np.array_equal(rec.filters[1], city_only.filters[0])
    assert np.array_equal(rec.filters[2], city_only.filters[0])

    skip = Encoder(_schema(missingValue={"sentinels": sentinels, "policy": "skip"}), SECRET)
    rec, report = skip.encode_csv(p)
    assert rec.record_ids == ("1",)
    assert report.rows_read == 3 and report.encoded == 1 and report.skipped_total == 2
    assert report.skipped == {"missing value in field 'name'": 2}

    error = Encoder(_schema(missingValue={"sentinels": sentinels, "policy": "error"}), SECRET)
    assert _error(error.encode_csv, p) == (
        f"{p}, row 2, field 'name': missing value (missingValue policy is 'error')"
    )


def test_validation_policies(tmp_path):
    p = _csv(tmp_path, HEADER + f"1,{SENSITIVE},a,b\n2,Bo,a,b\n3,Al1,a,b\n")
    long_err = Encoder(_schema(validation={"maxLength": 3}), SECRET)
    assert _error(long_err.encode_csv, p) == (
        f"{p}, row 1, field 'name': value longer than maxLength 3"
    )
    pattern_err = Encoder(_schema(validation={"pattern": "[A-Za-z]+"}), SECRET)
    assert _error(pattern_err.encode_csv, p) == (
        f"{p}, row 3, field 'name': value does not match the validation pattern"
    )
    both_skip = Encoder(
        _schema(validation={"pattern": "[A-Za-z]+", "maxLength": 3, "onInvalid": "skip"}), SECRET
    )
    rec, report = both_skip.encode_csv(p)
    assert rec.record_ids == ("2",)
    assert report.skipped == {
        "invalid value in field 'name' (value longer than maxLength 3)": 1,
        "invalid value in field 'name' (value does not match the validation pattern)": 1,
    }


def test_record_id_errors_and_blank_lines(tmp_path):
    enc = Encoder(_schema(), SECRET)
    p = _csv(tmp_path, HEADER + "a,x,y,z\n,x,y,z\n")
    assert _error(enc.encode_csv, p, id_column="id") == f"{p}, row 2, field 'id': empty record id"
    p = _csv(tmp_path, HEADER + "a,x,y,z\nb,x,y,z\na,x,y,z\n")
    assert (
        _error(enc.encode_csv, p, id_column="id") == f"{p}, row 3, field 'id': duplicate record id"
    )
    p = _csv(tmp_path, HEADER + "a,x,y,z\n\nb,x,y,z\n\n")
    rec, report = enc.encode_csv(p, id_column="id")
    assert rec.record_ids == ("a", "b")
    assert report.skipped == {"blank line": 2} and report.rows_read == 4
    rec, _ = enc.encode_csv(p)
    assert rec.record_ids == ("1", "3")  # row numbers count blank lines
    p = _csv(tmp_path, HEADER + '"a\nb",x,y,z\n\nc,x,y,z\nd,x,y\n')
    assert _error(enc.encode_csv, p) == f"{p}, row 4: has 3 column(s), the header has 4"
    p = _csv(tmp_path, HEADER + '"a\nb",x,y,z\nc,x,y,z\nd,x,y\n')  # fast path, same numbering
    assert _error(enc.encode_csv, p) == f"{p}, row 3: has 3 column(s), the header has 4"
    p = _csv(tmp_path, HEADER + "a,Zebed\xe9e,y,z\n\nb,x,y,z\n".replace("\xe9", "\u00e9"))
    assert enc.encode_csv(p)[0].record_ids == ("1", "3")


def test_blank_line_path_reports_errors_like_the_fast_path(tmp_path):
    enc = Encoder(_schema(validation={"maxLength": 3}), SECRET)
    for blank in ("", "\n"):
        p = _csv(tmp_path, HEADER + f"1,ab,x,y\n{blank}2,{SENSITIVE},x,y\n")
        row = 3 if blank else 2
        assert (
            _error(enc.encode_csv, p)
            == f"{p}, row {row}, field 'name': value longer than maxLength 3"
        )
        p = _csv(tmp_path, (HEADER + f"1,ab,x,y\n{blank}2,ab,x,Zebed\xe9e\n").encode("latin-1"))
        assert _error(enc.encode_csv, p) == f"{p}, row {row}, field 'town': not valid UTF-8"
    p = _csv(tmp_path, HEADER + f'1,ab,x,y\n\n2,"{SENSITIVE},x,y\n')
    assert "malformed CSV" in _error(enc.encode_csv, p)


def test_encode_rows_errors():
    enc = Encoder(_schema(), SECRET)
    msg = _error(enc.encode_rows, [{"name": SENSITIVE, "city": "x", "town": "y"}, {"name": "x"}])
    assert msg == "<rows>, row 2: no column 'city'"
    msg = _error(enc.encode_rows, [{"name": 5, "city": "x", "town": "y"}])
    assert msg == "<rows>, row 1, field 'name': value must be a string, got int"
    msg = _error(enc.encode_rows, [{"name": "a", "city": "x", "town": "y"}], id_column="id")
    assert msg == "<rows>, row 1: no column 'id'"
    with pytest.raises(EncodeDataError):  # the data errors are EncodeDataError (a PprlError)
        enc.encode_rows([{"name": "a"}])
    with pytest.raises(PprlError, match="field 'nope' is not in the linkage schema"):
        enc.qgram_positions("nope", "ab")


def test_secret_errors(tmp_path):
    with pytest.raises(SecretError, match="the shared secret is empty"):
        Encoder(_schema(), b"")
    with pytest.raises(SecretError, match="has 15 bytes; at least 16 are required"):
        Encoder(_schema(), b"x" * 15)
    with pytest.raises(SecretError, match="must be bytes"):
        check_secret("text" * 8)  # type: ignore[arg-type]
    with pytest.raises(SecretError, match="not found"):
        load_secret(tmp_path / "nope")
    with pytest.raises(SecretError, match="cannot read"):
        load_secret(tmp_path)
    short = tmp_path / "short"
    short.write_bytes(b"SECRET-xyz")
    with pytest.raises(SecretError) as info:
        load_secret(short)
    assert "SECRET-xyz" not in str(info.value) and str(short) in str(info.value)
    ok = tmp_path / "ok"
    ok.write_bytes(bytes(range(200, 232)))
    assert load_secret(ok) == bytes(range(200, 232))


def _records(n: int = 3, nbits: int = 100, nblock: int = 2) -> EncodedRecords:
    rng = np.random.default_rng(1)
    positions = [rng.choice(nbits, 10, replace=False) for _ in range(n)]
    return EncodedRecords(
        tuple(f"id{i}" for i in range(n)),
        bits.rows_from_positions(positions, nbits),
        nbits,
        rng.integers(0, 2**63, size=(n, nblock), dtype=np.uint64),
    )


def test_store_round_trip_and_empty(tmp_path):
    for rec in (_records(), _records(0, 64, 0), _records(5, 1000, 0)):
        p = tmp_path / "enc.bin"
        save_encodings(p, rec, "ab" * 32)
        got, digest = load_encodings(p)
        assert digest == "ab" * 32 and got.record_ids == rec.record_ids
        assert np.array_equal(got.filters, rec.filters)
        assert np.array_equal(got.block_digests, rec.block_digests)
        assert got.filter_bits == rec.filter_bits
    assert not [q for q in tmp_path.iterdir() if q.name.endswith(".tmp")]


def test_store_corruption_errors(tmp_path):
    p = tmp_path / "enc.bin"
    save_encodings(p, _records(), "cd" * 32)
    data = p.read_bytes()

    def load_bytes(b: bytes) -> str:
        q = tmp_path / "bad.bin"
        q.write_bytes(b)
        with pytest.raises(EncodingsFileError) as info:
            load_encodings(q)
        assert str(q) in str(info.value)
        return str(info.value)

    assert "not found" in _error(load_encodings, tmp_path / "none.bin")
    assert "cannot read" in _error(load_encodings, tmp_path)
    assert "bad magic or too short" in load_bytes(b"")
    assert "bad magic or too short" in load_bytes(b"X" + data[1:])
    assert "checksum mismatch" in load_bytes(data[:-1])
    flipped = bytearray(data)
    flipped[60] ^= 1
    assert "checksum mismatch" in load_bytes(bytes(flipped))

    def rebuild(header: dict[str, Any] | bytes, rest: bytes | None = None) -> bytes:
        import hashlib

        hlen = int.from_bytes(data[8:12], "little")
        h = header if isinstance(header, bytes) else json.dumps(header).encode()
        body = (
            data[:8]
            + len(h).to_bytes(4, "little")
            + h
            + (data[12 + hlen : -32] if rest is None else rest)
        )
        return body + hashlib.sha256(body).digest()

    header = json.loads(data[12 : 12 + int.from_bytes(data[8:12], "little")])
    assert "malformed header" in load_bytes(rebuild(b"{not json"))
    assert "malformed header" in load_bytes(rebuild({"format": 1}))
    assert "unsupported format version 2" in load_bytes(rebuild({**header, "format": 2}))
    assert "inconsistent header" in load_bytes(rebuild({**header, "words": 9}))
    assert "section lengths do not match" in load_bytes(rebuild({**header, "records": 4}))
    assert "record-id section is not valid JSON" in load_bytes(
        rebuild(
            {**header, "ids_bytes": header["ids_bytes"]},
            data[12 + int.from_bytes(data[8:12], "little") : -32 - header["ids_bytes"]]
            + b"x" * header["ids_bytes"],
        )
    )
    ids = json.dumps([1, 2, 3]).encode()
    hlen = int.from_bytes(data[8:12], "little")
    tail = data[12 + hlen : -32 - header["ids_bytes"]] + ids
    assert "must be an array of 3 strings" in load_bytes(
        rebuild({**header, "ids_bytes": len(ids)}, tail)
    )
    # a bit set beyond l in a filter
    rec = _records()
    words = bytearray(bits.rows_to_bytes(rec.filters))
    words[15] |= 0x80  # bit 127 of row 0 (l = 100)
    body_rest = bytes(words) + data[12 + hlen + len(words) : -32]
    assert "filter section invalid" in load_bytes(rebuild(header, body_rest))


def test_save_to_missing_directory_is_clear(tmp_path):
    msg = _error(save_encodings, tmp_path / "no" / "such" / "enc.bin", _records(), "ab" * 32)
    assert "cannot create a file in" in msg


def test_records_validation_and_segments():
    rec = _records(3, 100, 1)
    with pytest.raises(bits.BitLayoutError, match="not divisible by the number of parties P=3"):
        rec.segments(3)
    assert [s.shape for s in rec.segments(4)] == [(3, 1)] * 4
    sub = rec.subset([2, 0])
    assert sub.record_ids == ("id2", "id0") and np.array_equal(sub.filters, rec.filters[[2, 0]])
    assert rec.subset(np.array([True, False, True])).record_ids == ("id0", "id2")
    assert rec.subset(slice(1, None)).record_ids == ("id1", "id2")
    with pytest.raises(bits.BitLayoutError, match="3 filters for 2 record ids"):
        EncodedRecords(("a", "b"), rec.filters, 100, rec.block_digests[:2])
    with pytest.raises(bits.BitLayoutError, match="block_digests must be an"):
        EncodedRecords(rec.record_ids, rec.filters, 100, rec.block_digests.astype(np.int64))


def test_duplicate_id_across_chunks(tmp_path, monkeypatch):
    from party.encoding import encoder

    monkeypatch.setattr(encoder, "CSV_BLOCK_BYTES", 24)
    enc = Encoder(_schema(), SECRET)
    p = _csv(tmp_path, HEADER + "a,x,y,z\nb,x,y,z\nc,x,y,z\nb,x,y,z\n")
    assert (
        _error(enc.encode_csv, p, id_column="id") == f"{p}, row 4, field 'id': duplicate record id"
    )
    p = _csv(tmp_path, HEADER + "ä,x,y,z\nb,x,y,z\nc,x,y,z\nä,x,y,z\n")
    assert (
        _error(enc.encode_csv, p, id_column="id") == f"{p}, row 4, field 'id': duplicate record id"
    )
    p = _csv(tmp_path, HEADER + "ä,x,y,z\nb,x,y,z\nc,x,y,z\nd,x,y,z\n")
    assert enc.encode_csv(p, id_column="id")[0].record_ids == ("ä", "b", "c", "d")
