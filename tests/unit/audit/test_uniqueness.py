"""Uniqueness: exact counts against brute force, the analytic expectation, the climb and CSV errors."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from party.audit.uniqueness import (
    UniquenessError,
    factorize,
    read_csv_columns,
    row_uniqueness,
    uniqueness,
)


def brute_crowds(table: dict[str, list[object]], columns: list[str]) -> list[int]:
    keys = list(zip(*(table[c] for c in columns), strict=True))
    counts = Counter(keys)
    return [counts[k] for k in keys]


@pytest.mark.parametrize("seed", range(5))
def test_equals_brute_force_on_random_tables(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    cards = rng.integers(1, 12, size=4)
    table: dict[str, list[object]] = {
        "a": [f"x{v}" for v in rng.integers(0, cards[0], n)],
        "b": rng.integers(0, cards[1], n).tolist(),
        "c": [("" if v == 0 else str(v)) for v in rng.integers(0, cards[2], n)],
        "d": [float(v) / 2 for v in rng.integers(0, cards[3], n)],
    }
    cols = ["a", "b", "c", "d"]
    for k in (2, 3, 5):
        res = uniqueness(table, cols, k=k)
        crowds = brute_crowds(table, cols)
        assert res.crowd.tolist() == crowds
        assert res.alone.count == sum(1 for c in crowds if c == 1)
        assert res.below_k.count == sum(1 for c in crowds if c < k)
        assert res.groups == len(set(zip(*(table[c] for c in cols), strict=True)))
        for i, step in enumerate(res.climb):
            prefix = cols[: i + 1]
            cr = brute_crowds(table, prefix)
            assert step.column == cols[i]
            assert step.alone.count == sum(1 for c in cr if c == 1)
            assert step.below_k.count == sum(1 for c in cr if c < k)
            assert step.groups == len(set(zip(*(table[c] for c in prefix), strict=True)))
        greedy = uniqueness(table, cols, k=k, greedy=True)
        assert greedy.crowd.tolist() == crowds
        for i, step in enumerate(greedy.climb):
            prefix = list(greedy.columns[: i + 1])
            cr = brute_crowds(table, prefix)
            assert step.alone.count == sum(1 for c in cr if c == 1)
            assert step.below_k.count == sum(1 for c in cr if c < k)
            # the greedy choice leaves at least as many alone as any other column would
            if i + 1 < len(cols):
                rest = [c for c in cols if c not in greedy.columns[:i]]
                best = max(
                    sum(1 for c in brute_crowds(table, [*greedy.columns[:i], r]) if c == 1)
                    for r in rest
                )
                assert step.alone.count == best


def test_numpy_columns_equal_lists() -> None:
    rng = np.random.default_rng(7)
    a = rng.integers(0, 50, 1000)
    b = rng.integers(0, 30, 1000)
    r1 = uniqueness({"a": a, "b": b}, ["a", "b"])
    r2 = uniqueness({"a": a.tolist(), "b": [str(x) for x in b]}, ["a", "b"])
    assert r1.crowd.tolist() == r2.crowd.tolist()


def test_analytic_expectation_for_independent_uniform_columns() -> None:
    # n records, cells C = product of cardinalities: P(alone) = (1 - 1/C)^(n-1),
    # P(crowd < k) = P(Binomial(n-1, 1/C) <= k-2).
    rng = np.random.default_rng(11)
    n, cards = 40_000, (10, 20, 40, 5)
    table = {f"c{i}": rng.integers(0, c, n) for i, c in enumerate(cards)}
    cells = math.prod(cards)
    p = 1 / cells
    res = uniqueness(table, list(table), k=3)
    expect_alone = (1 - p) ** (n - 1)
    expect_below = sum(math.comb(n - 1, j) * p**j * (1 - p) ** (n - 1 - j) for j in range(2))
    assert res.alone.value == pytest.approx(expect_alone, abs=0.015)
    assert res.below_k.value == pytest.approx(expect_below, abs=0.015)
    lo, hi = res.alone.interval
    assert lo <= res.alone.value <= hi


def test_greedy_picks_most_identifying_first() -> None:
    rng = np.random.default_rng(3)
    n = 2000
    table = {
        "sex": rng.integers(0, 2, n),
        "id": np.arange(n),  # unique: singles everyone out
        "region": rng.integers(0, 10, n),
    }
    res = uniqueness(table, ["sex", "region", "id"], greedy=True)
    assert res.columns[0] == "id"
    assert res.climb[0].alone.count == n
    ordered = uniqueness(table, ["sex", "region", "id"])
    assert ordered.columns == ("sex", "region", "id")
    assert ordered.climb[0].alone.count == 0
    # the final measure does not depend on the order
    assert ordered.alone == res.alone and ordered.below_k == res.below_k


def test_errors_name_the_problem() -> None:
    with pytest.raises(UniquenessError, match="unknown column.*zz.*available: a"):
        uniqueness({"a": [1, 2]}, ["zz"])
    with pytest.raises(UniquenessError, match="k must be"):
        uniqueness({"a": [1, 2]}, ["a"], k=1)
    with pytest.raises(UniquenessError, match="at least one column"):
        uniqueness({"a": [1, 2]}, [])
    with pytest.raises(UniquenessError, match="listed twice"):
        uniqueness({"a": [1, 2]}, ["a", "a"])


def test_row_uniqueness_of_bit_rows() -> None:
    rows = np.array([[1, 2], [1, 2], [1, 3], [0, 2], [5, 5], [5, 5], [5, 5]], dtype=np.uint64)
    res = row_uniqueness(rows, k=3)
    assert res.crowd.tolist() == [2, 2, 1, 1, 3, 3, 3]
    assert res.alone.count == 2 and res.below_k.count == 4 and res.groups == 4


def test_factorize_is_dense() -> None:
    codes = factorize(["b", "a", "b", "c"])
    assert codes.codes.tolist() == [0, 1, 0, 2] and codes.card == 3


def test_read_csv_columns(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("id,name,zip\n1,ann,2000\n2,bob,2001\n\n3,cy,2000\n", encoding="utf-8")
    cols = read_csv_columns(p, ["zip", "name"])
    assert cols == {"zip": ["2000", "2001", "2000"], "name": ["ann", "bob", "cy"]}
    with pytest.raises(UniquenessError, match=r"unknown column\(s\) nme; available: id, name, zip"):
        read_csv_columns(p, ["nme"])
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3\n", encoding="utf-8")
    with pytest.raises(UniquenessError, match="row 3 has 1 fields"):
        read_csv_columns(bad, ["a"])
    with pytest.raises(UniquenessError, match="cannot open"):
        read_csv_columns(tmp_path / "missing.csv", ["a"])
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(UniquenessError, match="empty file"):
        read_csv_columns(empty, ["a"])
