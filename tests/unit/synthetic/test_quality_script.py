"""scripts/quality.py: "ours" runs the default linkage target of ProtocolParameters, the other beside."""

import json
from dataclasses import fields

import numpy as np

from party.protocol.params import ProtocolParameters
from tests.scripts import load_script


def test_ours_is_the_default_target_and_the_other_target_is_beside_it(tmp_path):
    quality = load_script("quality")
    default = next(f.default for f in fields(ProtocolParameters) if f.name == "target")
    assert default == quality.DEFAULT_TARGET
    assert {quality.DEFAULT_TARGET, quality.OTHER_TARGET} == {"all", "any"}
    argv = ["--out", str(tmp_path), "--sets", "p3", "--records", "60", "--thresholds", "0.8"]
    assert quality.main([*argv, "--no-reference"]) == 0
    got = json.loads((tmp_path / "quality.json").read_text())["p3"]["ours"]
    assert got["default_target"] == default
    for scores in (got["quality"]["0.8"], got["other_target"]["0.8"]):
        assert scores["true_sets"] == 30 and 0.0 < scores["f1"] <= 1.0
    assert got["blocking"]["candidate_pairs"] >= got["blocking"]["true_sets_kept"]
    table = (tmp_path / "quality.md").read_text()
    assert f"ours (target {default})" in table and "candidate pairs" in table
    assert quality.main([*argv, "--no-reference", "--no-other-target"]) == 0
    alone = json.loads((tmp_path / "quality.json").read_text())["p3"]["ours"]
    assert alone["other_target"] == {} and alone["quality"] == got["quality"]


def test_scale_bits_writes_a_scaled_copy_and_leaves_the_schema_alone(tmp_path):
    quality = load_script("quality")
    args = quality.build_parser().parse_args(["--out", str(tmp_path), "--scale-bits", "0.5"])
    shipped = quality.febrl4_schema_path()
    got = quality.scaled(shipped, "febrl4", args)
    assert got == tmp_path / "schemas" / "febrl4.json"
    want = [f["strategy"]["bitsPerFeature"] for f in json.loads(shipped.read_text())["features"]]
    have = [f["strategy"]["bitsPerFeature"] for f in json.loads(got.read_text())["features"]]
    assert have == [max(1, round(b * 0.5)) for b in want] and have != want
    same = quality.build_parser().parse_args(["--out", str(tmp_path)])
    assert quality.scaled(shipped, "febrl4", same) == shipped


def test_febrl4_schema_lsh_keys_block_a_pair_that_only_shares_its_address():
    """Two FEBRL4 records differing in names and date of birth but not in address: no phonetic
    pass of the shipped FEBRL4 schema puts them in one block, every band of its address LSH key
    does (the same sub-filter gives the same bits), and the names' key has its own bands."""
    from party.encoding.encoder import Encoder
    from party.encoding.schema import parse_schema

    schema = parse_schema(json.loads(load_script("quality").febrl4_schema_path().read_text()))
    lsh = {b.name: b.lsh for b in schema.blocking if b.lsh is not None}
    assert set(lsh) == {"lsh_address", "lsh_names"}
    address = {
        "street_number": "12",
        "address_1": "ocean street",
        "address_2": "",
        "suburb": "brighton",
    }
    address |= {"postcode": "3186", "state": "vic"}
    rows = [
        {"rec_id": "a", "given_name": "jane", "surname": "smith", "date_of_birth": "19800101"},
        {"rec_id": "b", "given_name": "maria", "surname": "jones", "date_of_birth": "19751231"},
    ]
    enc = Encoder(schema, b"s" * 32).encode_rows([r | address for r in rows], id_column="rec_id")
    phonetic = sum(1 for b in schema.blocking if b.lsh is None)
    bands = [b.lsh.bands for b in schema.blocking if b.lsh is not None]
    d = enc.block_digests
    assert d.shape[1] == phonetic + sum(bands)
    assert not np.any(d[0, :phonetic] == d[1, :phonetic])
    start = phonetic + (0 if schema.blocking[phonetic].name == "lsh_address" else bands[0])
    address_bands = slice(start, start + lsh["lsh_address"].bands)
    assert np.all(d[0, address_bands] == d[1, address_bands]) and np.all(d[:, address_bands] != 0)
