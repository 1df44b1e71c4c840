"""First sight planned per wave (``party.cluster_waves``): each value two lanes hold is given to
exactly one of them, once; records, reports and errors are those of one process."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from party.cluster_waves import WaveLanes
from party.encoding import encoder as encoder_module
from party.encoding.encoder import Encoder
from party.encoding.first_sight import value_hashes
from party.encoding.parallel import EncoderSpec, ParallelStats, encode_csv_parallel, start_lanes
from tests.unit.encoding.test_parallel import (
    SECRET,
    _first_error,
    _people_csv,
    _same,
    _same_report,
    _shipped_schema,
)


@pytest.fixture
def lanes():
    return start_lanes(2)


@pytest.fixture
def small_ranges(monkeypatch):
    """Ranges of about 16 KiB: a few thousand rows make several waves on two lanes."""
    monkeypatch.setattr(encoder_module, "CSV_BLOCK_BYTES", 16 * 1024)
    monkeypatch.setattr(WaveLanes, "RANGE_BLOCKS", 1)


def _waves(path: Any, lanes: Any, stats: ParallelStats | None = None, **kw: Any) -> Any:
    return encode_csv_parallel(
        Encoder(_shipped_schema(), SECRET),
        path,
        workers=len(lanes),
        lanes=lanes,
        stats=stats,
        lanes_read_file=True,
        range_lanes=WaveLanes,
        **kw,
    )


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_waves_encode_like_one_process(tmp_path, small_ranges, lanes, newline):
    raw = _people_csv(tmp_path, 3000, seed=5).read_text().splitlines()
    path = tmp_path / "waves.csv"
    path.write_bytes((newline.join(raw) + newline).encode())
    ref = Encoder(_shipped_schema(), SECRET).encode_csv(path, id_column="rec_id")
    stats = ParallelStats()
    ticks: list[int] = []
    got = _waves(path, lanes, stats, id_column="rec_id", progress=ticks.append)
    _same(ref[0], got[0])
    _same_report(ref[1], got[1])
    assert stats.ranges >= 3 * 2 * WaveLanes.RANGES_PER_LANE - 1  # three waves or more
    assert stats.first_sight_seconds > 0 and len(stats.cpu_by_worker) == 2
    assert sum(ticks) == 3000


def test_a_range_takes_several_csv_blocks(tmp_path, small_ranges, lanes, monkeypatch):
    """``RANGE_BLOCKS`` CSV blocks per range (parsed whole): fewer ranges, the same records."""
    path = _people_csv(tmp_path, 3000, seed=6)
    ref = Encoder(_shipped_schema(), SECRET).encode_csv(path, id_column="rec_id")
    ranges = []
    for blocks in (1, 4):
        monkeypatch.setattr(WaveLanes, "RANGE_BLOCKS", blocks)
        stats = ParallelStats()
        got = _waves(path, lanes, stats, id_column="rec_id")
        _same(ref[0], got[0])
        _same_report(ref[1], got[1])
        ranges.append(stats.ranges)
    assert ranges[0] >= 3 * ranges[1] >= 3 * len(lanes)


def _lanes_for_plan(k: int) -> WaveLanes:
    """A driver for planning only: ``k`` lanes that are never called."""
    schema = _shipped_schema()
    lanes: Any = [None] * k
    layout: Any = None
    return WaveLanes(
        lanes,
        Encoder(schema, SECRET),
        EncoderSpec(schema, SECRET, "plan"),
        "people.csv",
        None,
        None,
        path="people.csv",
        layout=layout,
        out_dir=None,
    )


def _scan(values: list[bytes]) -> tuple[Any, np.ndarray]:
    array = pa.array(values, type=pa.binary())
    return array, value_hashes(array)


def _given(driver: WaveLanes, shares: list[dict[Any, Any]]) -> dict[str, dict[int, list[bytes]]]:
    """column -> lane -> the values of that column in the lane's share; every unit of a
    column a lane gets carries the same values (one decoding in the lane)."""
    out: dict[str, dict[int, list[bytes]]] = {}
    for lane, share in enumerate(shares):
        for column, units in driver.planner.column_units.items():
            got = [share[u].to_pylist() for u in units if u in share]
            if got:
                assert len(got) == len(units) and all(g == got[0] for g in got)
                out.setdefault(column, {})[lane] = sorted(got[0])
    return out


def test_a_value_two_lanes_hold_goes_to_one_of_them_once():
    driver = _lanes_for_plan(3)
    wave = [  # (range, lane, rows, distinct values of each column)
        (0, 0, 2, {"surname": _scan([b"smith", b"jones"])}),
        (1, 1, 2, {"surname": _scan([b"smith", b"brown"])}),
        (2, 0, 2, {"surname": _scan([b"jones", b"smith"])}),  # lane 0 again: one holder
        (3, 2, 2, {"surname": _scan([b"smith", b"white"]), "suburb": _scan([b"bondi"])}),
    ]
    given = _given(driver, driver.plan(wave))
    # smith (lanes 0, 1 and 2) goes to exactly one lane; jones (lane 0 only), brown, white
    # and bondi (one lane each) stay with their lane, which computes them while encoding
    assert list(given) == ["surname"] and sum(given["surname"].values(), []) == [b"smith"]
    # the next wave: smith was handed out already; jones, which lane 0 computed alone, is
    # now held by lanes 1 and 2: lane 0 (whose memo has it) computes it for them
    later = [
        (4, 1, 1, {"surname": _scan([b"smith", b"jones"])}),
        (5, 2, 1, {"surname": _scan([b"jones"])}),
    ]
    assert _given(driver, driver.plan(later)) == {"surname": {0: [b"jones"]}}
    assert _given(driver, driver.plan(later)) == {}  # handed out once
    # brown again at lane 1 only: nothing to share; white (lane 2's) now at lane 0: from lane 2
    last = [(6, 1, 1, {"surname": _scan([b"brown"])}), (7, 0, 1, {"surname": _scan([b"white"])})]
    assert _given(driver, driver.plan(last)) == {"surname": {2: [b"white"]}}


def _sent(driver: WaveLanes, shares: list[dict[Any, Any]], column: str) -> dict[bytes, set[int]]:
    """value -> the lanes its entry is sent to (the owner's share, its destination bits)."""
    out: dict[bytes, set[int]] = {}
    for lane, share in enumerate(shares):
        unit = driver.planner.column_units[column][0]
        if unit in share:
            masks = driver.dests[lane][column].tolist()
            for value, mask in zip(share[unit].to_pylist(), masks, strict=True):
                out[value] = {d for d in range(len(shares)) if mask >> d & 1}
    return out


def test_entries_go_only_to_the_holders_that_lack_them():
    driver = _lanes_for_plan(4)
    wave = [
        (0, 0, 2, {"surname": _scan([b"smith", b"jones"])}),
        (1, 1, 2, {"surname": _scan([b"smith", b"brown"])}),
        (2, 2, 2, {"surname": _scan([b"jones", b"lee"])}),
        (3, 3, 2, {"surname": _scan([b"smith", b"jones", b"white"])}),
    ]
    shares = driver.plan(wave)
    sent = _sent(driver, shares, "surname")
    owners = {v: w for w, values in _given(driver, shares)["surname"].items() for v in values}
    assert sorted(sent) == [b"jones", b"smith"]  # brown, lee, white: one lane each
    assert sent[b"smith"] == {0, 1, 3} - {owners[b"smith"]}  # not lane 2, which lacks smith
    assert sent[b"jones"] == {0, 2, 3} - {owners[b"jones"]}
    # later: lane 2 meets smith (lanes 0, 1, 3 have it: the first of them sends it), lane 0
    # meets brown (lane 1's); lane 1 meets jones again and lane 3 white: nothing to send
    later = [
        (4, 2, 1, {"surname": _scan([b"smith"])}),
        (5, 0, 1, {"surname": _scan([b"brown", b"jones"])}),
        (6, 3, 1, {"surname": _scan([b"white"])}),
    ]
    shares = driver.plan(later)
    assert _given(driver, shares) == {"surname": {0: [b"smith"], 1: [b"brown"]}}
    assert _sent(driver, shares, "surname") == {b"smith": {2}, b"brown": {0}}


def test_owners_are_spread_over_the_holders():
    driver = _lanes_for_plan(4)
    names = [f"name{i}".encode() for i in range(400)]
    given = _given(driver, driver.plan([(w, w, 400, {"surname": _scan(names)}) for w in range(4)]))
    counts = [len(given["surname"].get(w, [])) for w in range(4)]
    assert sorted(sum(given["surname"].values(), [])) == sorted(names)  # each value once
    assert min(counts) > 60, counts  # and every lane a share


@pytest.mark.parametrize(
    "bad",
    [
        b"p0r9999,only,three",  # too few columns
        b"p0r9999,a,b,c,d,e,f,g,h,i,j",  # too many
    ],
)
def test_a_bad_row_in_a_late_wave_is_named_as_by_one_process(tmp_path, small_ranges, lanes, bad):
    raw = _people_csv(tmp_path, 3000, seed=10).read_bytes().split(b"\n")
    raw[2600] = bad
    path = tmp_path / "bad_row.csv"
    path.write_bytes(b"\n".join(raw))
    msg = _first_error(
        lambda: Encoder(_shipped_schema(), SECRET).encode_csv(path, id_column="rec_id")
    )
    assert _first_error(lambda: _waves(path, lanes, id_column="rec_id")) == msg
    assert str(path) in msg and "row 2600" in msg


def test_quotes_late_in_the_file_start_again_the_exact_way(tmp_path, small_ranges, lanes):
    raw = _people_csv(tmp_path, 3000, seed=9).read_text().splitlines()
    cells = raw[2800].split(",")
    cells[5] = '"12 long\nroad, north"'
    raw[2800] = ",".join(cells)
    path = tmp_path / "quoted.csv"
    path.write_text("\n".join(raw) + "\n")
    ref = Encoder(_shipped_schema(), SECRET).encode_csv(path, id_column="rec_id")
    ticks: list[int] = []
    got = _waves(path, lanes, id_column="rec_id", progress=ticks.append)
    _same(ref[0], got[0])
    assert sum(ticks) == 3000
