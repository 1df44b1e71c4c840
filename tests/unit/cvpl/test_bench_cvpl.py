"""scripts/bench_cvpl.py compares like for like: library and numpy baseline over the same records."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_bench_compares_the_same_surface_over_all_records(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("_bench_cvpl", ROOT / "scripts" / "bench_cvpl.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules["_bench_cvpl"] = bench
    spec.loader.exec_module(bench)
    assert bench.main(["--small", "400", "--skip-large", "--repeat", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    # one ratio, between two timings over all 400 records of this run, and the surfaces agree
    line = re.search(
        r"existence surface, all 400 records, same run.*?cells differing: (\d+) of", out
    )
    assert line, out
    assert line.group(1) == "0"
    assert "extrapolat" not in out and "sampled" not in out
