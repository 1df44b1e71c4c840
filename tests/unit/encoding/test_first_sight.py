"""First-sight entries computed by one encoder and installed in another change nothing but speed."""

import csv
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from party.encoding import encoder as encoder_module
from party.encoding.encoder import Encoder, _Batch, _Column
from party.encoding.first_sight import (
    SeenValues,
    SightPlanner,
    compute_entries,
    install_entries,
    sight_units,
)
from party.encoding.parallel import encode_csv_parallel, start_lanes
from party.encoding.schema import parse_schema
from party.synthetic.generator import generate

SECRET = bytes(range(90, 122))
SHIPPED = Path(__file__).resolve().parents[3] / "party" / "synthetic" / "data" / "schema.json"


def _schema():  # type: ignore[no-untyped-def]
    return parse_schema(json.loads(SHIPPED.read_text()))


def _people(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "people.csv"
    generate(2, n, seed=4).tables[0].write_csv(path)
    return path


def _values(path: Path, columns: tuple[str, ...]) -> dict[str, list[bytes]]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    return {c: list(dict.fromkeys(r[c].encode() for r in rows)) for c in columns}


def test_installed_entries_give_identical_records_without_first_sight(tmp_path, monkeypatch):
    path = _people(tmp_path, 600)
    schema = _schema()
    ref, _ = Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")
    producer = Encoder(schema, SECRET)
    units = sight_units(producer)
    assert set(units.values()) >= {"given_name", "surname", "dob", "street_address", "postcode"}
    shares = SightPlanner(units, 3).shares(_values(path, tuple(set(units.values()))))
    # entries travel pickled, as between processes
    entries = [pickle.loads(pickle.dumps(compute_entries(producer, s))) for s in shares]
    consumer = Encoder(schema, SECRET)
    for e in entries:
        install_entries(consumer, e)

    def no_first_sight(*args, **kwargs):
        raise AssertionError("a value was computed although its entry was installed")

    for codec in consumer._codecs.values():  # every filter and every part block is a memo hit
        monkeypatch.setattr(codec, "_classify", no_first_sight)
    monkeypatch.setattr("party.encoding.blocking.part_block", no_first_sight)
    got, _ = consumer.encode_csv(path, id_column="rec_id")
    assert got.record_ids == ref.record_ids
    assert np.array_equal(got.filters, ref.filters)
    assert np.array_equal(got.block_digests, ref.block_digests)


def test_shares_do_every_unit_value_once_and_balance_by_measured_cost():
    units = {("filter", "a"): "a", ("part", 0): "a", ("part", 1): "b", ("filter", "c"): "c"}
    new = {"a": [str(i).encode() for i in range(100)], "b": [b"x", b"y"]}
    planner = SightPlanner(units, 2)

    def check(shares: list[dict]) -> list[float]:
        assert len(shares) == 2
        for unit, column in units.items():
            done = sorted(v for s in shares for v in s.get(unit, []))
            assert done == sorted(new.get(column, []))  # every value once, none made up
        return [sum(planner.per_value[u] * len(v) for u, v in s.items()) for s in shares]

    loads = check(planner.shares(new))
    assert max(loads) <= 1.05 * sum(loads) / 2
    # measured: filters of "a" cost 100x a part value; the filter unit is cut across both lanes
    planner.learn({("filter", "a"): (100, 1e-2), ("part", 0): (100, 1e-4)})
    shares = planner.shares(new)
    loads = check(shares)
    assert all(("filter", "a") in s for s in shares)
    assert max(loads) <= 1.05 * sum(loads) / 2
    # a column's units go together (each value normalised once), and a column that fits in a
    # lane's share stays whole (a feature's q-gram streams on one lane)
    two = {("filter", "a"): "a", ("part", 0): "a", ("filter", "b"): "b", ("part", 1): "b"}
    both = {"a": new["a"], "b": [str(i).encode() for i in range(100, 200)]}
    shares = SightPlanner(two, 2).shares(both)
    for s in shares:
        assert s.get(("filter", "a")) == s.get(("part", 0))
        assert s.get(("filter", "b")) == s.get(("part", 1))
    assert [("filter", "a") in s for s in shares].count(True) == 1
    assert [("filter", "b") in s for s in shares].count(True) == 1
    assert sorted(v for s in shares for v in s.get(("part", 1), [])) == both["b"]
    assert SightPlanner(units, 3).shares({}) == [{}, {}, {}]


def test_seen_values_hand_out_new_values_once_and_stay_bounded():
    seen = SeenValues(("name",), cap=5)

    def batch(values: list[str]) -> _Batch:
        return _Batch(len(values), 1, {"name": _Column.from_values(values)})

    assert seen.new_values(batch(["a", "b", "a"])) == {"name": [b"a", b"b"]}
    assert seen.new_values(batch(["b", "c"])) == {"name": [b"c"]}
    assert seen.new_values(batch(["a", "c"])) == {}
    # past the cap the set is forgotten: values are handed out again (only a cost, never wrong)
    assert seen.new_values(batch(["d", "e", "f"])) == {"name": [b"d", b"e", b"f"]}
    assert seen.new_values(batch(["a", "\udcff"])) == {"name": [b"a", b"\xff"]}


def test_seen_values_of_a_parsed_batch_by_hash_hand_out_new_values_once():
    import pyarrow as pa

    seen = SeenValues(("name",))

    def parsed(values: list[bytes]) -> _Batch:
        rb = pa.record_batch([pa.array(values, pa.binary())], names=["c0"])
        return _Batch(len(values), 1, {}, arrow=rb, arrow_names={"name": "c0"})

    def new(values: list[bytes]) -> list[bytes]:
        got = seen.new_of(parsed(values))
        return sorted(got["name"].to_pylist()) if "name" in got else []

    assert new([b"a", b"b", b"a", b""]) == [b"", b"a", b"b"]
    assert new([b"b", b"c", b"\xff"]) == [b"c", b"\xff"]
    assert new([b"a", b"c", b"", b"\xff"]) == []
    # a batch the csv module read (no arrow record batch): the set path, same answer
    assert seen.new_of(_Batch(2, 1, {"name": _Column.from_values(["d", "d"])})) == {"name": [b"d"]}


def test_invalid_utf8_in_a_blocking_column_is_reported_as_by_one_process(tmp_path, monkeypatch):
    monkeypatch.setattr(encoder_module, "CSV_BLOCK_BYTES", 8 * 1024)
    path = _people(tmp_path, 900)
    raw = path.read_bytes().split(b"\n")
    row = 700
    cells = raw[row].split(b",")
    cells[6] = b"ry\xffde"  # suburb: a feature and a soundex blocking part
    raw[row] = b",".join(cells)
    path.write_bytes(b"\n".join(raw))
    schema = _schema()
    with pytest.raises(encoder_module.EncodeDataError) as serial:
        Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")
    with pytest.raises(encoder_module.EncodeDataError) as parallel:
        encode_csv_parallel(Encoder(schema, SECRET), path, id_column="rec_id", lanes=start_lanes(2))
    assert str(parallel.value) == str(serial.value)
    assert f"row {row}" in str(serial.value) and "\\xff" not in str(serial.value)


def _polynomial_hash(value: bytes) -> int:
    """The definition of ``value_hashes``, one value in plain Python (not the code under test):
    sum of byte j times base^(2 + j % 4096) mod 2^64, then mixed with the length."""
    mask, base = (1 << 64) - 1, 0x100000001B3
    h = 0
    for j, byte in enumerate(value):
        h = (h + byte * pow(base, 2 + j % 4096, 1 << 64)) & mask
    h ^= (len(value) * 0x9E3779B97F4A7C15) & mask
    h = (h * 0xBF58476D1CE4E5B9) & mask
    return h ^ (h >> 31)


def test_value_hashes_follow_their_definition_on_slices_empty_and_long_values():
    import pyarrow as pa

    from party.encoding.first_sight import value_hashes

    rng = np.random.default_rng(5)
    values = [b"", b"a", "Zoë".encode(), b"\x00\xff" * 3, bytes(rng.integers(0, 256, 4100))]
    values += [bytes(rng.integers(0, 256, int(k))) for k in rng.integers(0, 40, 200)]
    array = pa.array(values, type=pa.binary())
    for part in (array, array.slice(3, 150), array.slice(0, 0), pa.array([b"", b""])):
        want = np.array([_polynomial_hash(v) for v in part.to_pylist()], dtype=np.uint64)
        assert np.array_equal(value_hashes(part), want)
    assert value_hashes(pa.array([b"smith"])) != value_hashes(pa.array([b"smiht"]))
