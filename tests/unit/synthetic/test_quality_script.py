"""scripts/quality.py: "ours" runs the default linkage target of ProtocolParameters, the other beside."""

import importlib.util
import json
from dataclasses import fields
from pathlib import Path
from types import ModuleType

from party.protocol.params import ProtocolParameters

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "quality.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("quality_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ours_is_the_default_target_and_the_other_target_is_beside_it(tmp_path):
    quality = _script()
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
    quality = _script()
    args = quality.build_parser().parse_args(["--out", str(tmp_path), "--scale-bits", "0.5"])
    shipped = quality.febrl4_schema_path()
    got = quality.scaled(shipped, "febrl4", args)
    assert got == tmp_path / "schemas" / "febrl4.json"
    want = [f["strategy"]["bitsPerFeature"] for f in json.loads(shipped.read_text())["features"]]
    have = [f["strategy"]["bitsPerFeature"] for f in json.loads(got.read_text())["features"]]
    assert have == [max(1, round(b * 0.5)) for b in want] and have != want
    same = quality.build_parser().parse_args(["--out", str(tmp_path)])
    assert quality.scaled(shipped, "febrl4", same) == shipped
