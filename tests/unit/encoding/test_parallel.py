"""Encoding on worker processes gives exactly what one process gives: records, report, errors."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from party.encoding import encoder as encoder_module
from party.encoding.encoder import EncodeDataError, Encoder
from party.encoding.parallel import (
    EncoderSpec,
    ParallelStats,
    encode_csv_parallel,
    forget_task,
    resolve_workers,
    start_lanes,
    start_lanes_for,
)
from party.encoding.schema import parse_schema
from party.synthetic.generator import generate

SECRET = bytes(range(7, 39))
SHIPPED = Path(__file__).resolve().parents[3] / "party" / "synthetic" / "data" / "schema.json"


@pytest.fixture
def pool():
    return start_lanes(2)  # the persistent lanes (replaced if a process died)


@pytest.fixture
def small_batches(monkeypatch):
    """Many small batches, so that a few thousand rows spread over every worker."""
    monkeypatch.setattr(encoder_module, "CSV_BLOCK_BYTES", 16 * 1024)
    monkeypatch.setattr(encoder_module, "CHUNK_ROWS", 97)


def _shipped_schema(**changes: Any) -> Any:
    raw = json.loads(SHIPPED.read_text())
    raw.update(changes)
    return parse_schema(raw)


def _people_csv(tmp_path: Path, n: int, seed: int = 3) -> Path:
    ds = generate(2, n, seed=seed)
    path = tmp_path / "people.csv"
    ds.tables[0].write_csv(path)
    return path


def _held_tokens() -> list[str]:
    from party.encoding import parallel

    return list(parallel._WORKER_ENCODERS)


def _same(a: Any, b: Any) -> None:
    assert a.record_ids == b.record_ids
    assert a.filter_bits == b.filter_bits
    assert np.array_equal(a.filters, b.filters)
    assert np.array_equal(a.block_digests, b.block_digests)


MODES: dict[str, dict[str, Any]] = {  # how the lanes get their rows
    "parent-reads": {"own_ranges": False},
    "routed": {"routed_sight": True},  # the default on the local lanes (own ranges, routed)
    "own-ranges": {"own_ranges": True, "routed_sight": False},  # each lane computes its own
    "peers": {"peer_sight": True},  # own ranges, first sight shared among the lanes
}


def _on_pool(schema: Any, path: Path, pool: Any, mode: str, **kw: Any) -> Any:
    """Encode on the 2-lane pool, the lanes getting their rows the way ``mode`` names."""
    return encode_csv_parallel(
        Encoder(schema, SECRET), path, workers=2, lanes=pool, **MODES[mode], **kw
    )


def _same_report(a: Any, b: Any) -> None:
    for name in ("rows_read", "encoded", "skipped", "fill_mean", "fill_std", "fill_min"):
        assert getattr(a, name) == getattr(b, name), name
    assert list(a.skipped) == list(b.skipped)  # same order of reasons


def test_generated_people_identical_to_one_process(tmp_path, small_batches, pool):
    path = _people_csv(tmp_path, 3000)
    schema = _shipped_schema()
    ref, ref_report = Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")
    ticks: list[int] = []
    stats = ParallelStats()
    got, report = encode_csv_parallel(
        Encoder(schema, SECRET),
        path,
        id_column="rec_id",
        workers=2,
        lanes=pool,
        progress=ticks.append,
        stats=stats,
    )
    _same(ref, got)
    _same_report(ref_report, report)
    assert len(ref) == 3000 and ref.block_digests.shape[1] == schema.digest_width
    assert sum(ticks) == 3000 and len(ticks) > 4  # many batches went through the pool
    assert stats.batches == len(ticks) and stats.cpu_seconds > 0
    # the job's encoders were dropped on every lane when it ended
    assert [lane.submit(forget_task, "any").result() for lane in pool] == [False, False]
    assert not any(lane.submit(_held_tokens).result() for lane in pool)
    # the default row-number ids too, with a pool the function starts itself
    ref2, _ = Encoder(schema, SECRET).encode_csv(path)
    got2, _ = encode_csv_parallel(Encoder(schema, SECRET), path, workers=2)
    _same(ref2, got2)


@pytest.mark.parametrize("mode", list(MODES))
def test_hardened_and_salted_identical(tmp_path, small_batches, pool, mode):
    path = _people_csv(tmp_path, 1500, seed=5)
    raw = json.loads(SHIPPED.read_text())
    raw["hardening"] = {"xorFold": True, "balance": True, "blip": None}
    raw["features"][0]["salt"] = {"field": "suburb"}
    schema = parse_schema(raw)
    ref, _ = Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")
    got, _ = _on_pool(schema, path, pool, mode, id_column="rec_id")
    _same(ref, got)


@pytest.mark.parametrize("blank", [True, False])
@pytest.mark.parametrize("mode", list(MODES))
def test_skips_and_blank_lines_identical(tmp_path, small_batches, pool, mode, blank):
    schema = parse_schema(
        {
            "version": 1,
            "l": 256,
            "features": [
                {
                    "identifier": "name",
                    "missingValue": {"sentinels": ["", "NA"], "policy": "skip"},
                },
                {"identifier": "city", "validation": {"maxLength": 6, "onInvalid": "skip"}},
            ],
            "blocking": [{"name": "sx", "parts": [{"field": "name", "function": "soundex"}]}],
        }
    )
    rng = np.random.default_rng(0)
    names = ["anna", "bob", "NA", "", "carla", "dmitri"]
    cities = ["rome", "paris", "wellington", "oslo"]
    lines = ["id,name,city"]
    for i in range(1200):
        lines.append(f"r{i},{rng.choice(names)},{rng.choice(cities)}")
        if blank and i % 250 == 7:
            lines.append("")  # blank lines: the exact csv-module reader, counted row numbers
    path = tmp_path / "blank.csv"
    path.write_text("\n".join(lines) + "\n")
    ref, ref_report = Encoder(schema, SECRET).encode_csv(path, id_column="id")
    got, report = _on_pool(schema, path, pool, mode, id_column="id")
    _same(ref, got)
    _same_report(ref_report, report)
    assert report.skipped.get("blank line", 0) == (5 if blank else 0)
    assert len(report.skipped) == (3 if blank else 2)


def _first_error(fn: Any) -> str:
    with pytest.raises(EncodeDataError) as info:
        fn()
    return str(info.value)


@pytest.mark.parametrize("mode", list(MODES))
def test_first_error_in_input_order_is_the_same(tmp_path, small_batches, pool, mode):
    schema = parse_schema(
        {
            "version": 1,
            "l": 128,
            "features": [
                {"identifier": "name", "missingValue": {"policy": "error"}},
                {"identifier": "city"},
            ],
        }
    )
    rows = [f"r{i},name{i},town{i % 7}" for i in range(2000)]
    rows[100] = "r5,dup,town"  # a duplicate id (of row 6) in the first batch ...
    rows[1900] = "r1900,,town"  # ... comes before a missing value in the last one
    path = tmp_path / "bad.csv"
    path.write_text("id,name,city\n" + "\n".join(rows) + "\n")

    def serial() -> Any:
        return Encoder(schema, SECRET).encode_csv(path, id_column="id")

    def parallel() -> Any:
        return _on_pool(schema, path, pool, mode, id_column="id")

    msg = _first_error(serial)
    assert "row 101" in msg and "duplicate record id" in msg
    assert _first_error(parallel) == msg
    rows[100] = "r100,dup,town"
    path.write_text("id,name,city\n" + "\n".join(rows) + "\n")
    msg = _first_error(serial)
    assert "row 1901" in msg and "missing value" in msg
    assert _first_error(parallel) == msg


def test_seeded_blip_encodes_in_one_process(tmp_path, small_batches):
    path = _people_csv(tmp_path, 400)
    schema = _shipped_schema(hardening={"blip": {"flipProbability": 0.05}})

    def seeded() -> Encoder:
        return Encoder(schema, SECRET, blip_rng=np.random.default_rng(11))

    ref, _ = seeded().encode_csv(path, id_column="rec_id")
    got, _ = encode_csv_parallel(seeded(), path, id_column="rec_id", workers=2)
    _same(ref, got)


def test_workers_setting_and_secret_not_shown():
    assert resolve_workers(None) >= 1 and resolve_workers(0) == resolve_workers(None)
    assert resolve_workers(3) == 3
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            resolve_workers(bad)  # type: ignore[arg-type]
    spec = EncoderSpec(_shipped_schema(), SECRET, "t")
    assert SECRET.hex() not in repr(spec) and str(SECRET) not in repr(spec)


def test_lanes_started_ahead_only_where_an_encoding_would_use_them(tmp_path, monkeypatch):
    from party.encoding import parallel

    started: list[int] = []

    def start_lanes(n: int) -> list[None]:
        started.append(n)
        return [None] * n

    monkeypatch.setattr(parallel, "start_lanes", start_lanes)
    block = encoder_module.CSV_BLOCK_BYTES
    small, large = tmp_path / "small.csv", tmp_path / "large.csv"
    small.write_bytes(b"x" * block)  # one CSV block: encoded in the calling process
    with open(large, "wb") as fh:
        fh.truncate(block + 1)
    assert start_lanes_for(small, 2) == 0
    assert start_lanes_for(tmp_path / "missing.csv", 2) == 0  # one process reports it
    assert start_lanes_for(large, 1) == 0
    assert started == []
    assert start_lanes_for(large, 2) == 2 and started == [2]
    every = resolve_workers(0)  # 0: every core, as the encoding
    assert start_lanes_for(large, 0) == (every if every > 1 else 0)


def test_a_lane_whose_process_died_is_replaced(tmp_path, small_batches):
    import os
    from concurrent.futures.process import BrokenProcessPool

    lanes = start_lanes(2)
    with pytest.raises(BrokenProcessPool):
        lanes[1].submit(os._exit, 3).result()  # the lane's process dies
    path = _people_csv(tmp_path, 600)
    schema = _shipped_schema()
    ref, _ = Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")
    got, _ = encode_csv_parallel(Encoder(schema, SECRET), path, id_column="rec_id", workers=2)
    _same(ref, got)
    assert start_lanes(2)[1] is not lanes[1]


@pytest.fixture(params=["parent-shares", "routed", "own-ranges", "peers"])
def ranged(request):
    """How lanes that read their own ranges get first sight: shared out by the parent
    (``lanes_read_file``), routed per wave of ranges and written in place (``routed_sight``,
    the default), computed by each lane itself (``own_ranges``) or shared among the lanes
    (``peer_sight``)."""
    if request.param == "parent-shares":
        return {"lanes_read_file": True}
    return MODES[request.param]


def _mapped(array: Any) -> bool:
    """True if the array is a view of a file mapping (the job's output on tmpfs)."""
    import mmap

    while array is not None and not isinstance(array, mmap.mmap):
        array = (
            getattr(array, "base", None)
            if isinstance(array, np.ndarray)
            else getattr(array, "obj", None)
        )
    return array is not None


def _encode_both(
    path: Path, schema: Any, pool: Any, ranged: dict[str, Any], **kw: Any
) -> tuple[Any, Any, ParallelStats]:
    ref = Encoder(schema, SECRET).encode_csv(path, **kw)
    stats = ParallelStats()
    got = encode_csv_parallel(
        Encoder(schema, SECRET), path, workers=2, lanes=pool, stats=stats, **ranged, **kw
    )
    return ref, got, stats


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("final_newline", [True, False])
def test_lanes_read_their_own_ranges_identical(
    tmp_path, small_batches, pool, ranged, newline, final_newline
):
    raw = _people_csv(tmp_path, 2500, seed=8).read_text().splitlines()
    path = tmp_path / "ranges.csv"
    path.write_bytes((newline.join(raw) + (newline if final_newline else "")).encode())
    ticks: list[int] = []
    ref, got, stats = _encode_both(path, _shipped_schema(), pool, ranged, id_column="rec_id")
    _same(ref[0], got[0])
    _same_report(ref[1], got[1])
    assert stats.ranges > 4 and stats.reading_seconds > 0  # the lanes parsed the rows
    if "peer_sight" in ranged:  # each lane installed entries the other computed
        assert stats.shared_values > 0 and len(stats.cpu_by_worker) == 2
    if "lanes_read_file" not in ranged:  # the lanes wrote the arrays into a shared file
        assert _mapped(got[0].filters) and _mapped(got[0].block_digests)
    # default ids (row numbers) and progress: every row once
    got2, _ = encode_csv_parallel(
        Encoder(_shipped_schema(), SECRET),
        path,
        workers=2,
        lanes=pool,
        progress=ticks.append,
        **ranged,
    )
    _same(Encoder(_shipped_schema(), SECRET).encode_csv(path)[0], got2)
    assert sum(ticks) == 2500


def test_quotes_late_in_the_file_start_again_the_exact_way(tmp_path, small_batches, pool, ranged):
    raw = _people_csv(tmp_path, 2500, seed=9).read_text().splitlines()
    cells = raw[2300].split(",")
    cells[5] = '"12 long\nroad, north"'  # a quoted newline and comma in the last range
    raw[2300] = ",".join(cells)
    path = tmp_path / "quoted.csv"
    path.write_text("\n".join(raw) + "\n")
    ticks: list[int] = []
    ref, _ = Encoder(_shipped_schema(), SECRET).encode_csv(path, id_column="rec_id")
    stats = ParallelStats()
    got, _ = encode_csv_parallel(
        Encoder(_shipped_schema(), SECRET),
        path,
        id_column="rec_id",
        workers=2,
        lanes=pool,
        stats=stats,
        progress=ticks.append,
        **ranged,
    )
    _same(ref, got)
    assert stats.ranges > 0  # the lanes started on ranges, then found the quote
    assert sum(ticks) == 2500  # rows counted once although the encoding started again


@pytest.mark.parametrize(
    "bad",
    [
        b"p0r9999,only,three",  # too few columns
        b"p0r9999,a,b,c,d,e,f,g,h,i,j",  # too many
        b"p0r9999,lone\rreturn,x,m,1990-01-01,1 a st,town,2000,nsw",  # a lone carriage return
    ],
)
def test_a_bad_row_in_a_late_range_is_named_as_by_one_process(
    tmp_path, small_batches, pool, ranged, bad
):
    raw = _people_csv(tmp_path, 2500, seed=10).read_bytes().split(b"\n")
    raw[2200] = bad
    path = tmp_path / "bad_row.csv"
    path.write_bytes(b"\n".join(raw))
    schema = _shipped_schema()

    def serial() -> Any:
        return Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")

    def parallel() -> Any:
        return encode_csv_parallel(
            Encoder(schema, SECRET),
            path,
            id_column="rec_id",
            workers=2,
            lanes=pool,
            **ranged,
        )

    try:
        expected = serial()
    except EncodeDataError as exc:
        msg = str(exc)
        assert _first_error(parallel) == msg
        assert str(path) in msg and ("row 2200" in msg or "row 2201" in msg)
    else:  # a lone carriage return may be a line end to the parser: the same records then
        _same(expected[0], parallel()[0])


def test_without_room_on_tmpfs_results_come_back_pickled(
    tmp_path, small_batches, pool, ranged, monkeypatch
):
    import contextlib

    from party.encoding import parallel

    monkeypatch.setattr(parallel, "scratch_folder", lambda need: contextlib.nullcontext(None))
    path = _people_csv(tmp_path, 1500, seed=12)
    ref, got, stats = _encode_both(path, _shipped_schema(), pool, ranged, id_column="rec_id")
    _same(ref[0], got[0])
    assert stats.ranges > 2
    if "peer_sight" in ranged:  # no folder: nothing exchanged (routed entries come pickled)
        assert stats.shared_values == 0
    with parallel.scratch_folder(1 << 62) as out:  # the real one: no tmpfs has that much room
        assert out is None


@pytest.mark.parametrize("mode", ["routed", "own-ranges", "parent-reads"])
def test_a_duplicate_id_ranges_apart_is_found(tmp_path, small_batches, pool, mode):
    """Lanes hash their ranges' ids and the parent compares the hashes at the end: a duplicate
    far from its first occurrence, with no other error, is still the error one process raises."""
    schema = parse_schema({"version": 1, "l": 128, "features": [{"identifier": "name"}]})
    rows = [f"r{i},name{i}" for i in range(3000)]
    rows[2800] = "r7,late"  # the id of row 8
    path = tmp_path / "dup.csv"
    path.write_text("id,name\n" + "\n".join(rows) + "\n")
    msg = _first_error(lambda: Encoder(schema, SECRET).encode_csv(path, id_column="id"))
    assert "row 2801" in msg and "duplicate record id" in msg
    assert _first_error(lambda: _on_pool(schema, path, pool, mode, id_column="id")) == msg


def test_cpu_entries_name_the_encoding_steps(tmp_path, small_batches, pool):
    """The node's ``cpu.audited.encoding.<step>`` entries: the lanes' step CPU is part of
    their task CPU; in one process the encoder itself counts every step."""
    path = _people_csv(tmp_path, 2500, seed=8)
    one = Encoder(_shipped_schema(), SECRET)
    one.encode_csv(path, id_column="rec_id")
    assert set(one.step_cpu) == set(encoder_module.STEPS)
    assert all(v > 0 for v in one.step_cpu.values())
    parent = Encoder(_shipped_schema(), SECRET)
    stats = ParallelStats()
    encode_csv_parallel(  # the default (routed first sight); own ranges count steps alike
        parent, path, id_column="rec_id", workers=2, lanes=pool, own_ranges=True, stats=stats
    )
    assert not any(parent.step_cpu.values())  # the lanes encoded every range
    entries = stats.stage_entries(parent, 1.5)
    pre = "cpu.audited.encoding."
    assert entries[pre + "node"] == 1.5
    # the lanes decode the columns while reading their ranges: no "columns" entry
    assert set(entries) == {pre + s for s in ("node", "lanes", "lanes.reading", *STEPS_IN_LANES)}
    steps = sum(entries[pre + s] for s in STEPS_IN_LANES)
    assert 0 < steps <= entries[pre + "lanes"] - entries[pre + "lanes.reading"]
    assert stats.steps["fields"] > 0 and stats.steps["blocking"] > 0


STEPS_IN_LANES = ("fields", "blocking", "ids")


def test_a_lane_gets_its_next_range_when_one_of_its_own_is_done(tmp_path, small_batches):
    """The first range's lane is held until the other lane has finished three ranges: lanes
    get ranges as their own finish, not only as results are taken in input order (which
    would wait for the held first range and leave the other lane idle after two); the output
    is still one process's. (Lanes are threads here, sharing the job's encoder.)"""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from party.encoding.parallel import peer_range_task

    path = _people_csv(tmp_path, 4000, seed=5)
    schema = _shipped_schema()
    ref, _ = Encoder(schema, SECRET).encode_csv(path, id_column="rec_id")
    gate = threading.Event()
    lock = threading.Lock()
    finished = {"other lane": 0}
    opened: list[bool] = []  # per held task: the gate opened (False: the wait timed out)

    class Held(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            def run():  # type: ignore[no-untyped-def]
                opened.append(gate.wait(60))  # only a failing run waits this long
                return fn(*args, **kwargs)

            return super().submit(run)

    class Counted(ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
            def run():  # type: ignore[no-untyped-def]
                out = fn(*args, **kwargs)
                if fn is peer_range_task:
                    with lock:
                        finished["other lane"] += 1
                        if finished["other lane"] == 3:
                            gate.set()
                return out

            return super().submit(run)

    lanes = [Held(1), Counted(1)]
    stats = ParallelStats()
    try:
        got, _ = encode_csv_parallel(
            Encoder(schema, SECRET),
            path,
            id_column="rec_id",
            workers=2,
            lanes=lanes,
            own_ranges=True,
            routed_sight=False,
            stats=stats,
        )
    finally:
        gate.set()
        for lane in lanes:
            lane.shutdown()
    _same(ref, got)
    assert stats.ranges >= 5
    assert opened and opened[0]  # the first held range waited for three others, no timeout


def test_the_local_lanes_forget_a_job_without_the_caller_waiting(tmp_path, small_batches, pool):
    """The forget is queued on this process's lanes, not waited for: a lane still busy with
    another task does not hold the caller up, and the lane forgets before its next task."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from party.encoding import parallel

    gate = threading.Event()
    lane = ThreadPoolExecutor(1)
    try:
        busy = lane.submit(gate.wait)
        spec = EncoderSpec(_shipped_schema(), SECRET, "t-forget")
        lane.submit(parallel._worker_encoder, spec)  # the job's encoder, held by the lane
        parallel._forget_everywhere([lane], spec.token, wait=False)  # returns: the lane is busy
        assert not busy.done()
        gate.set()
        assert lane.submit(forget_task, spec.token).result() is False  # forgotten before
    finally:
        gate.set()
        lane.shutdown()
    # an encoding on the local lanes returns with the forget queued; lanes given are waited on
    calls: list[bool] = []
    real = parallel._forget_everywhere

    def recorded(lanes: Any, token: str, wait: bool = True) -> None:
        calls.append(wait)
        real(lanes, token, wait)

    path = _people_csv(tmp_path, 600)
    ref, _ = Encoder(_shipped_schema(), SECRET).encode_csv(path, id_column="rec_id")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parallel, "_forget_everywhere", recorded)
        got, _ = encode_csv_parallel(
            Encoder(_shipped_schema(), SECRET), path, id_column="rec_id", workers=2
        )
        _same(ref, got)
        got, _ = encode_csv_parallel(
            Encoder(_shipped_schema(), SECRET), path, id_column="rec_id", lanes=pool
        )
        _same(ref, got)
    assert calls == [False, True]
    assert [lane.submit(forget_task, "any").result() for lane in pool] == [False, False]
    assert not any(lane.submit(_held_tokens).result() for lane in pool)


def test_a_lane_sends_the_kept_rows_as_a_range_when_every_row_was_kept():
    from collections import Counter

    from party.encoding.encoder import _BatchResult
    from party.encoding.parallel import _compact

    def result(n: int, kept: list[int]) -> _BatchResult:
        empty = np.zeros((len(kept), 1), dtype=np.uint64)
        return _BatchResult(n, 1, None, 0, kept, empty, empty, None, Counter())

    assert _compact(result(3, [0, 1, 2])) == range(3)
    assert _compact(result(0, [])) == range(0)
    assert _compact(result(3, [0, 2])) == [0, 2]  # a row skipped: the offsets themselves
