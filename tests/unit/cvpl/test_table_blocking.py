"""CVPL inputs and B_lambda: CSV reading, typing, role checks, block keys, nesting, sub-blocking."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from party.audit.cvpl.blocking import (
    BlockingLevel,
    Rule,
    adapt_levels,
    block_keys,
    check_nested,
    default_levels,
    parse_levels,
    subblock,
)
from party.audit.cvpl.errors import CvplError
from party.audit.cvpl.table import (
    Table,
    check_roles,
    read_csv,
    truth_from_ids,
    typed_columns,
)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_read_csv_and_typing(tmp_path):
    d = read_csv(write(tmp_path, "d.csv", "id,age,region\n1,30,AB1\n2,*,AB2\n3,41,C\n"))
    r = read_csv(write(tmp_path, "r.csv", "\ufeffid,age,region\n3,40-44,C\n1,30-34,AB\n2,,*\n"))
    cols = {c.name: c for c in typed_columns(d, r, ["age", "region"], harmonise=False)}
    assert cols["age"].kind == "numeric"
    np.testing.assert_array_equal(cols["age"].source, [30.0, np.nan, 41.0])
    np.testing.assert_array_equal(cols["age"].target, [42.0, 32.0, np.nan])
    assert cols["region"].kind == "categorical"
    assert cols["region"].target.tolist() == ["C", "AB", ""]
    assert truth_from_ids(d, r, "id").tolist() == [1, 2, 0]
    # harmonised: original ages read at the release's granularity (midpoints of its ranges)
    age = typed_columns(d, r, ["age"])[0]
    np.testing.assert_array_equal(age.source, [32.0, np.nan, 42.0])
    assert "ranges" in age.harmonised
    forced = typed_columns(d, r, ["age"], categorical=["age"])[0]
    assert forced.kind == "categorical" and "declared" in forced.why_categorical


def test_harmonise_generalised_codes():
    d = Table.from_arrays("D", {"region": ["C37", "C31", "A12", "B20"]})
    r = Table.from_arrays("R", {"region": ["C3", "A1", "*", "C3"]})
    col = typed_columns(d, r, ["region"])[0]
    assert col.source.tolist() == ["C3", "C3", "A1", "B2"]
    assert "prefix length 2" in col.harmonised
    same = typed_columns(d, d, ["region"])[0]
    assert same.source.tolist() == ["C37", "C31", "A12", "B20"] and not same.harmonised


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "empty"),
        ("a,a\n1,2\n", "duplicate column"),
        ("a,b\n1,2\n3\n", "row 3 has 1 fields"),
        ("a,b\n", "no records"),
        ("a,,c\n1,2,3\n", "empty column name"),
    ],
)
def test_read_csv_errors_name_file_and_row(tmp_path, text, needle):
    p = write(tmp_path, "bad.csv", text)
    with pytest.raises(CvplError, match=needle) as info:
        read_csv(p)
    assert "bad.csv" in str(info.value)


def test_read_csv_missing_file(tmp_path):
    with pytest.raises(CvplError, match="cannot read"):
        read_csv(tmp_path / "nope.csv")


def test_check_roles_errors():
    d = Table.from_arrays("D.csv", {"id": ["1", "2"], "age": [1, 2], "sex": ["F", "M"]})
    r = Table.from_arrays("R.csv", {"id": ["1", "1"], "age": [1, 2]})
    with pytest.raises(CvplError, match=r"R.csv: quasi-identifier column 'sex' not found"):
        check_roles(d, r, ["age", "sex"], [], [], None)
    with pytest.raises(CvplError, match="both as qi and as attrs"):
        check_roles(d, d, ["age"], ["age"], [], None)
    with pytest.raises(CvplError, match="R.csv: id column 'id' has duplicate ids"):
        check_roles(d, r, ["age"], [], [], "id")
    with pytest.raises(CvplError, match="at least one quasi-identifier"):
        check_roles(d, d, [], ["age"], [], None)


def test_parse_levels():
    levels = parse_levels("age+sex ; age:band10+region:prefix2 ; none")
    assert [lv.name for lv in levels] == ["age+sex", "age:band10+region:prefix2", "none"]
    assert levels[1].rules[0] == Rule("age", "band", 10.0)
    for bad in ("age:band0", "age:prefix1.5", "age:foo3", " ; "):
        with pytest.raises(CvplError, match="levels"):
            parse_levels(bad)


def _cols(age_s, age_t, reg_s, reg_t):
    d = Table.from_arrays("D", {"age": age_s, "region": reg_s})
    r = Table.from_arrays("R", {"age": age_t, "region": reg_t})
    return typed_columns(d, r, ["age", "region"])


def test_block_keys_hand_checked():
    cols = _cols([31, 34, 36, 52], [33, 51], ["AB1", "AB2", "AC1", "AB1"], ["AB9", "AB1"])
    s, t = block_keys(BlockingLevel((Rule("age", "band", 5.0),)), cols, 4)
    # bands: 31,34,33 -> 6; 36 -> 7; 52,51 -> 10
    assert s[0] == s[1] == t[0] and s[2] != s[0] and s[3] == t[1]
    s, t = block_keys(BlockingLevel((Rule("region", "prefix", 2.0),)), cols, 4)
    assert s[0] == s[1] == s[3] == t[0] == t[1] and s[2] != s[0]
    s, t = block_keys(BlockingLevel((Rule("age"), Rule("region"))), cols, 4)
    assert len(set(s.tolist()) | set(t.tolist())) == 6
    s, t = block_keys(BlockingLevel(()), cols, 4)
    assert set(s.tolist()) == set(t.tolist()) == {0}
    with pytest.raises(CvplError, match="band needs a numeric column; column 'region'"):
        block_keys(BlockingLevel((Rule("region", "band", 5.0),)), cols, 4)
    with pytest.raises(CvplError, match="prefix needs a categorical column"):
        block_keys(BlockingLevel((Rule("age", "prefix", 1.0),)), cols, 4)


def test_default_levels_are_nested():
    rng = np.random.default_rng(0)
    cols = _cols(
        rng.integers(18, 90, 300),
        rng.integers(18, 90, 200),
        rng.choice(["A1", "A2", "B1"], 300),
        rng.choice(["A1", "A2", "B1"], 200),
    )
    levels = default_levels(cols)
    assert [lv.name for lv in levels] == [
        "age+region",
        "age:band5+region",
        "age:band10+region",
        "age:band20+region",
        "region",
        "none",
    ]
    keys = [block_keys(lv, cols, 300) for lv in levels]
    assert check_nested(keys)
    assert not check_nested(keys[::-1])


def test_adapt_levels_drops_suppressed_columns():
    cols = _cols([30, 40], [30, 40], ["A", "B"], ["*", "*"])
    levels, dropped = adapt_levels(parse_levels("age+region;age:band10+region;region;none"), cols)
    assert dropped == ["region"]
    assert [lv.name for lv in levels] == ["age", "age:band10", "none"]


def test_subblock_splits_only_oversized_blocks():
    skeys = np.array([0] * 60 + list(range(1, 41)))
    tkeys = np.array([0] * 60 + list(range(1, 41)))
    score_s = np.arange(100, dtype=float)
    score_t = np.arange(100, dtype=float)
    s, t, split = subblock(skeys, tkeys, score_s, score_t, quantile=0.95, min_size=8)
    assert split == 1
    # block 0 (120 records) is cut into slices of consecutive scores; small blocks untouched
    assert len(np.unique(s[:60])) > 1
    assert np.all(np.diff(s[:60]) >= 0)
    sizes = np.bincount(np.concatenate([s, t]))
    assert sizes.max() == 8  # cap = max(p95 of sizes = 2, min_size = 8); 120 records -> 15 x 8
    assert len(np.unique(s[60:])) == 40 and np.array_equal(s[60:] != s[0], np.ones(40, bool))
