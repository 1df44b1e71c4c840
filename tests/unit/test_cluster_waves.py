"""First sight planned per wave (``party.cluster_waves``): each value two lanes hold is given to
exactly one of them, once; records, reports and errors are those of one process."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from party.cluster_waves import (
    PlacedWaveLanes,
    WaveLanes,
    _entries_for,
    _entries_of,
    _picked,
    routed_sight_task,
)
from party.encoding import encoder as encoder_module
from party.encoding.encoder import Encoder
from party.encoding.first_sight import compute_entries, sight_units, value_hashes
from party.encoding.parallel import (
    EncoderSpec,
    ParallelStats,
    encode_csv_parallel,
    forget_task,
    start_lanes,
)
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


def test_a_picked_owner_is_a_holder_and_holders_are_picked_alike():
    rng = np.random.default_rng(3)
    h = rng.integers(0, 2**62, 8000, dtype=np.uint64)
    holders = rng.integers(1, 16, 8000).astype(np.uint64)
    picked = _picked(h, holders)
    assert (((holders >> picked.astype(np.uint64)) & np.uint64(1)) == 1).all()
    assert (picked[holders == 0b0100] == 2).all()  # one holder: that lane
    two = picked[holders == 0b1010]  # lanes 1 and 3: about half each
    assert set(two.tolist()) == {1, 3} and 0.35 < (two == 1).mean() < 0.65
    assert _picked(h[:0], holders[:0]).size == 0


class _Recorded:
    """A lane that records the names of the tasks submitted to it, in order."""

    def __init__(self, lane: Any) -> None:
        self.lane = lane
        self.names: list[str] = []

    def submit(self, fn: Any, *args: Any, **kw: Any) -> Any:
        self.names.append(fn.__name__)
        return self.lane.submit(fn, *args, **kw)


def test_the_local_lanes_route_first_sight_in_place_by_default(tmp_path, lanes, monkeypatch):
    """``encode_csv_parallel`` on this machine's lanes: ranges read by the lanes, first sight
    routed per wave (``PlacedWaveLanes``), arrays written into the job's file on tmpfs; the
    first wave's ranges and one range each of the second go to the lanes before the parent counts
    the lines; a wave's first sight reaches each lane before the next wave's ranges (a lane done
    with its share parses while the other finishes) and before the lane's last range of the wave
    before (``HOLD_LAST``); the last range of each lane is cut into pieces given to the lanes as
    they are free; and the records are one process's."""
    from party.encoding import parallel

    monkeypatch.setattr(encoder_module, "CSV_BLOCK_BYTES", 16 * 1024)
    monkeypatch.setattr(PlacedWaveLanes, "RANGE_BLOCKS", 1)
    path = _people_csv(tmp_path, 3000, seed=4)
    ref = Encoder(_shipped_schema(), SECRET).encode_csv(path, id_column="rec_id")
    recorded = [_Recorded(lane) for lane in lanes]
    monkeypatch.setattr(parallel, "start_lanes", lambda n: recorded)
    given: list[list[str]] = []  # per lane: its tasks when the parent counts the lines
    count = parallel.line_counts

    def counted(*args: Any) -> Any:
        given.extend(list(lane.names) for lane in recorded)
        return count(*args)

    monkeypatch.setattr(parallel, "line_counts", counted)
    stats = ParallelStats()
    got = encode_csv_parallel(
        Encoder(_shipped_schema(), SECRET), path, workers=2, id_column="rec_id", stats=stats
    )
    _same(ref[0], got[0])
    _same_report(ref[1], got[1])
    assert stats.first_sight_seconds > 0 and stats.ranges >= 3 * 2 * 2
    assert stats.shared_values > 0  # entries one lane computed, installed by the other
    assert not got[0].filters.flags.owndata  # a view of the job's output file
    per = PlacedWaveLanes.RANGES_PER_LANE
    # the first wave's ranges, and one range each of the second, are given to the lanes
    # before the lines are counted
    assert given == [["scan_range_task"] * (per + 1)] * 2
    for lane in recorded:
        names = lane.names
        assert "placed_wave_task" in names and "encode_held_task" not in names
        scans = [i for i, n in enumerate(names) if n == "scan_range_task"]
        # one range of the second wave is parsed while the first is planned, the other after
        # the first wave's share of first sight
        assert scans[per] < names.index("routed_sight_task") < scans[per + 1]
        # the lane's last range of the first wave is encoded after the second wave's share
        encodes = [i for i, n in enumerate(names) if n == "placed_wave_task"]
        sights = [i for i, n in enumerate(names) if n == "routed_sight_task"]
        assert encodes[0] < sights[1] < encodes[1]
    # the last range of each lane, cut into pieces, is taken by the lanes as they are free
    tails = [lane.names.count("tail_range_task") for lane in recorded]
    assert sum(tails) > 2
    for lane, n in zip(recorded, tails, strict=True):  # after every range of the waves
        tasks = [t for t in lane.names if t != "forget_task"]
        assert tasks[len(tasks) - n :] == ["tail_range_task"] * n


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


def _share(encoder: Encoder, values: dict[str, list[bytes]]) -> tuple[dict[Any, Any], Any]:
    """A first-sight share of every unit of the given columns (one array per column, as
    ``WaveLanes.plan`` makes them), and the units' columns."""
    units = sight_units(encoder)
    arrays = {c: pa.array(v, type=pa.binary()) for c, v in values.items()}
    work = {u: arrays[c] for u, c in units.items() if c in values}
    return work, units


def test_entries_cut_per_lane_share_one_list_per_column():
    """Each destination gets the entries of exactly the values whose mask has its bit (checked
    against the entries computed whole), and a column's units share one list of values."""
    schema = _shipped_schema()
    encoder = Encoder(schema, SECRET)
    names = [b"smith", b"jones", b"brown", b"", b"lee"]
    streets = [b"1 high st", b"22 low rd", b"3 mid ave"]
    work, units = _share(encoder, {"surname": names, "street_address": streets})
    whole = compute_entries(Encoder(schema, SECRET), work)
    dests = {
        "surname": np.array([0b011, 0b100, 0, 0b110, 0b001], dtype=np.uint64),
        "street_address": np.array([0b100, 0b100, 0b010], dtype=np.uint64),
    }
    for d in range(3):
        part = _entries_for(whole, dests, units, np.uint64(1 << d))
        lists: dict[str, set[int]] = {}
        for name, (vals, codes, rows) in whole.filters.items():
            column = units[("filter", name)]
            keep = [i for i, m in enumerate(dests[column].tolist()) if m >> d & 1]
            if not keep:
                assert name not in part.filters
                continue
            got_vals, got_codes, got_rows = part.filters[name]
            assert got_vals == [vals[i] for i in keep]
            assert got_codes.tolist() == [codes[i] for i in keep]
            with_rows = [i for i in keep if codes[i] > 0]
            expect = rows[[int((codes[: i + 1] > 0).sum()) - 1 for i in with_rows]]
            assert np.array_equal(got_rows, expect.reshape(-1, rows.shape[1]))
            lists.setdefault(column, set()).add(id(got_vals))
        for m, (vals, blocks) in whole.parts.items():
            column = units[("part", m)]
            keep = [i for i, mask in enumerate(dests[column].tolist()) if mask >> d & 1]
            if not keep:
                assert m not in part.parts
                continue
            got_vals, got_blocks = part.parts[m]
            assert got_vals == [vals[i] for i in keep]
            assert np.array_equal(got_blocks, blocks[keep])
            lists.setdefault(column, set()).add(id(got_vals))
        assert all(len(ids) == 1 for ids in lists.values()), lists  # one list per column
        assert set(lists) == {c for c, mask in dests.items() if (mask >> np.uint64(d) & 1).any()}


def test_entries_go_from_lane_to_lane_in_files(tmp_path):
    """With a path prefix the routed entries are written to files (one per destination), read
    back and removed by the encoding lane; the same bytes as when they travel as messages.
    Where the file cannot be written, the bytes themselves."""
    schema = _shipped_schema()
    spec = EncoderSpec(schema, SECRET, "files")
    work, units = _share(Encoder(schema, SECRET), {"surname": [b"smith", b"jones", b"lee"]})
    dests = {"surname": np.array([0b10, 0b110, 0b100], dtype=np.uint64)}
    try:
        sent, _, _, _ = routed_sight_task(work, dests, spec, units)
        forget_task(spec.token)
        filed, _, _, _ = routed_sight_task(work, dests, spec, units, str(tmp_path / "s1.0"))
        forget_task(spec.token)
        failed, _, _, _ = routed_sight_task(work, dests, spec, units, str(tmp_path / "no/s1.0"))
    finally:
        forget_task(spec.token)
    assert sorted(sent) == sorted(filed) == sorted(failed) == [1, 2]
    assert filed == {d: str(tmp_path / f"s1.0.{d}") for d in (1, 2)}
    assert failed == sent  # no such folder: the bytes instead
    got = _entries_of([filed[1], str(tmp_path / "gone"), filed[2], sent[1]])
    assert got == [sent[1], sent[2], sent[1]]  # a file that cannot be read is left out
    assert not list(tmp_path.iterdir())  # read files are removed
