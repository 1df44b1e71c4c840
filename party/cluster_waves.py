"""First sight planned per wave of CSV ranges: a value two workers meet is computed once, by one.

Lanes that read their own ranges of a CSV (``parallel._RangeLanes``: the embedded Dask cluster's
workers) meet the same names, dates of birth and towns, but most street addresses only once.
``WaveLanes`` takes the ranges a wave at a time (``RANGES_PER_LANE`` per lane, lanes chosen by
the CSV bytes they were given so far, so every lane gets the same share):

1. every lane parses its ranges of the wave and reports each column's distinct raw values with
   their ``first_sight.value_hashes`` (``parallel.scan_range_task``);
2. the parent records, per column and value hash, which lanes' memo tables have the value
   (a bit per lane). A value that lanes hold in this wave and whose memo lacks it goes, once,
   to one owner: a lane whose memo has it already, or (a new value two or more lanes hold)
   one of its holders picked by its hash (so the shares are even). The owners compute the
   memo entries (``routed_sight_task``) and send each holder lacking them just its part,
   which it installs with its next range: a lane gets only the entries of values it meets
   (in a file of the job's tmpfs folder, so they never pass through Dask and the node; a
   column's units share one list of values: pickled once, looked up once). A
   new value only one lane holds is computed by that lane while it encodes and never travels,
   unless another lane meets it in a later wave;
3. every lane encodes its ranges of the wave (``parallel.encode_held_task``) and hands the
   arrays over in files on tmpfs; meanwhile the lanes parse the next wave. The node takes the
   last wave's results once all of them are encoded (``SETTLE_LAST_WAVE``).

``PlacedWaveLanes`` is the same on this machine's lanes (the default of
``encode_csv_parallel``): the lanes hash the record ids and write their arrays into the job's
output file in place, and a wave's first sight is queued on each lane before the next wave's
ranges (``SIGHT_FIRST``), so a lane done with its share parses while the other finishes, and
before the lane's last range of the wave before (``HOLD_LAST``), so that a lane starting the
next wave finds the other lanes' shares done instead of waiting for their last ranges. The
lanes start at once: the first wave's ranges, and one range each of the second, are given to
them before the parent counts the lines and reserves the output file (``begin``,
``PARSE_WHILE_FIRST_PLAN``), so they parse instead of waiting. The last range of each lane is
not in a wave (``tail``): cut into shrinking pieces (``csv_ranges.cut_tail``), each is given to
the lane with the fewest encodings unfinished and parsed, encoded and placed there on its own
(``tail_range_task``), so the lanes end together.

Entries are a pure function of the value and a lane that lacks one computes it itself, so the
records are those of one process, bit for bit (``tests/unit/test_cluster_waves.py``). Results are
consumed in input order by ``Encoder.encode_results`` as for ``_RangeLanes`` (row numbers,
record-id checks, the first error); at most two waves of ranges are held or in flight.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import time
from collections import deque
from collections.abc import Generator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any, cast

import numpy as np
import pyarrow as pa

from party.encoding.csv_ranges import CsvRange, read_range
from party.encoding.encoder import EncodeDataError, _BatchResult
from party.encoding.first_sight import (
    RawValues,
    SightEntries,
    Unit,
    compute_entries,
    install_entries,
)
from party.encoding.parallel import (
    _HELD,
    _WORKER_LOCK,
    EncoderSpec,
    RangeJob,
    _hash_ids,
    _place,
    _Placed,
    _RangeLanes,
    _worker_encoder,
    _worker_name,
    encode_held_task,
    peer_range_task,
    stop_tasks,
)

_Scanned = tuple[int, int, int, dict[str, tuple[Any, np.ndarray]]]  # key, lane, rows, distinct
_NO_HASHES = np.zeros(0, dtype=np.uint64)


def routed_sight_task(
    work: dict[Unit, RawValues],
    dests: dict[str, np.ndarray],
    spec: EncoderSpec,
    column_of: Any,
    files: str | None = None,
) -> tuple[dict[int, bytes | str], dict[Unit, tuple[int, float]], str, float]:
    """Runs in a lane: the memo entries of one share of first-sight work (``compute_entries``:
    left in this lane's memo tables too), cut per destination lane (bit d of ``dests[column]``,
    aligned with the column's values in ``work``: lane d gets the value) and pickled once per
    lane; also the CPU seconds per unit, the lane's name and the task's CPU seconds. With
    ``files`` (a path prefix on tmpfs: the lanes share this machine) each lane's part is
    written to the file ``files.<lane>`` and its path returned instead of the bytes, so the
    entries never travel through Dask (``_entries_file``). Entries are only a speed-up: if
    computing them fails, none are sent and each lane's batch reports the problem in input
    order."""
    c0 = time.process_time()
    blobs: dict[int, bytes | str] = {}
    with _WORKER_LOCK:
        try:
            entries = compute_entries(_worker_encoder(spec), work)
        except Exception:  # noqa: BLE001 - the batch step raises the same problem in input order
            entries = SightEntries()
        lanes = np.bitwise_or.reduce(np.concatenate([np.zeros(1, np.uint64), *dests.values()]))
        for d in range(int(lanes).bit_length()):
            part = _entries_for(entries, dests, column_of, np.uint64(1 << d))
            if len(part):
                blob = pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
                blobs[d] = blob if files is None else _entries_file(blob, f"{files}.{d}")
    return blobs, entries.seconds, _worker_name(), time.process_time() - c0


def _entries_file(blob: bytes, path: str) -> bytes | str:
    """In a lane: ``blob`` written to the new file ``path`` (tmpfs), and the path; the blob
    itself if the file cannot be written (tmpfs full)."""
    try:
        with open(path, "xb") as fh:
            fh.write(blob)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return blob
    return path


def _entries_of(entries: list[bytes | str]) -> list[bytes]:
    """In a lane: the pickled entries, those handed over in files (``_entries_file``) read and
    the files removed; a file that cannot be read is left out (its entries are computed again
    where they are needed: the same records)."""
    out: list[bytes] = []
    for blob in entries:
        if isinstance(blob, bytes):
            out.append(blob)
            continue
        with contextlib.suppress(OSError):
            with open(blob, "rb") as fh:
                out.append(fh.read())
            os.unlink(blob)
    return out


def wave_encode_task(
    spec: EncoderSpec,
    key: int,
    first_row: int,
    entries: list[bytes | str],
    source: str,
    id_column: str | None,
    out_dir: str | None,
) -> tuple[Any, str, float]:
    """Runs in a lane: ``parallel.encode_held_task`` with the entries handed over in files read
    first (``_entries_of``); its CPU seconds include the reading."""
    c0 = time.process_time()
    result, worker, _ = encode_held_task(
        spec, key, first_row, _entries_of(entries), source, id_column, out_dir
    )
    return result, worker, time.process_time() - c0


def _entries_for(
    entries: SightEntries, dests: dict[str, np.ndarray], column_of: Any, bit: np.uint64
) -> SightEntries:
    """The entries of the values whose destination mask has ``bit``. A part memo's entry whose
    values are not aligned with its column's (invalid UTF-8 left out) goes whole to every
    destination of the column: an extra entry is identical to the one it replaces. The units
    of a column that share one list of values (``compute_entries``) share one list of the
    values picked: pickled once, and looked up once where they are installed
    (``blocking._ColumnIds.of`` reuses the ids of the list it was last given)."""
    out = SightEntries()
    cut: dict[tuple[str, int], tuple[np.ndarray, list[str]]] = {}

    def pick(column: str, vals: list[str]) -> tuple[np.ndarray, list[str]]:
        got = cut.get((column, id(vals)))
        if got is None:
            sel = (dests[column] & bit) != 0
            mine = [v for v, keep in zip(vals, sel.tolist(), strict=True) if keep]
            got = cut[(column, id(vals))] = (sel, mine)
        return got

    for name, (vals, codes, rows) in entries.filters.items():
        sel, mine = pick(column_of[("filter", name)], vals)
        if mine:
            out.filters[name] = (mine, codes[sel], rows[sel[codes > 0]])
    for m, (vals, blocks) in entries.parts.items():
        column = column_of[("part", m)]
        mask = dests[column]
        if len(vals) != mask.size:  # some values left out: all of it, to every destination
            if (np.bitwise_or.reduce(mask) & bit) != 0:
                out.parts[m] = (vals, blocks)
            continue
        sel, mine = pick(column, vals)
        if mine:
            out.parts[m] = (mine, blocks[sel])
    return out


def _picked(h: np.ndarray, holders: np.ndarray) -> np.ndarray:
    """For each value hash, one of its holder lanes (bit masks), picked by the hash: the
    ``h % holders``-th set bit, so that every holder is picked about equally often."""
    nth = h % np.bitwise_count(holders).astype(np.uint64)
    picked = np.zeros(h.size, dtype=np.int64)
    before = np.zeros(h.size, dtype=np.uint64)  # holders below lane d
    for d in range(int(np.bitwise_or.reduce(holders)).bit_length()):
        has = (holders >> np.uint64(d)) & np.uint64(1)
        picked[(has == 1) & (before == nth)] = d
        before += has
    return picked


class WaveLanes(_RangeLanes):
    """``_RangeLanes`` with first sight planned per wave (module docstring)."""

    RANGES_PER_LANE = 2  # per wave
    # ranges of up to 8 CSV blocks (32 MiB): at 1M records (72 MB) on 4 workers, same cluster,
    # alternated, two runs each (mean busiest worker in its tasks): 4 MiB (20 ranges, three
    # waves) 3.46 CPU-s, 16 MiB (8 ranges, one wave) 3.00 (load 8-10); 16 MiB 3.59, 32 MiB (4
    # ranges) 3.30 (load 12-17). Peak RSS per worker ~0.6 GiB (16 MiB), ~0.7 GiB (32 MiB)
    RANGE_BLOCKS = 8
    MAX_LANES = 64  # a bit per lane in a uint64 (more lanes: ``_RangeLanes``)
    HANDED_CAP = 1 << 21  # values per column remembered (then forgotten: a cost, not an error)
    # the node takes (reads, checks, places) the last wave's results once all are encoded: taken
    # while the last workers encode, the node's assembly shares the cores with them
    SETTLE_LAST_WAVE = True
    # a wave's first sight goes to the lanes before the next wave's ranges: a lane done with
    # its share parses while the others finish theirs (else it waits for them)
    SIGHT_FIRST = False
    # one range per lane of the second wave goes to the lanes before the first wave's plan
    # (the lanes parse it while the parent plans, instead of waiting for it), the others
    # after the first wave's first sight (as without): with ``SIGHT_FIRST`` only
    PARSE_WHILE_FIRST_PLAN = False
    # each lane's last range of a wave (of two or more on it) is given after the next wave's
    # first sight, so the share runs between its ranges: a lane's encoding of the next wave
    # then finds the other lanes' shares done (else it waits for the other lane's last range)
    HOLD_LAST = False

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        # column -> sorted hashes of the values some lane's memo has, and for each the lanes
        # whose memo has it (bit d: lane d)
        self.known: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # per lane of the last plan: column -> destination lanes (bits) of its share's values
        self.dests: list[dict[str, np.ndarray]] = []
        self.ranges: list[CsvRange] = []
        # per lane: entries not yet sent to it, pickled (bytes) or in a file on tmpfs (path)
        self.handed: list[list[bytes | str]] = [[] for _ in self.lanes]
        self.waves = 0  # waves whose first sight was computed (names the entries' files)
        self.early: list[tuple[int, int, Future[Any]]] = []  # ``begin``: (range, lane, scan)
        self.begun: list[Future[Any]] = []  # their scans, until ``run_ranges`` takes them
        self.tail = 0  # the last ranges, not in waves (``PlacedWaveLanes``: given as lanes free)

    def begin(self, ranges: list[CsvRange]) -> None:
        """Give the lanes the first wave of ``ranges`` to parse now (``run_ranges`` of the
        same ranges takes them): the parent counts lines and reserves the output meanwhile;
        with ``PARSE_WHILE_FIRST_PLAN`` one range each of the second wave too (parsed while
        the parent waits for the other lanes' first wave and plans it)."""
        size = len(self.lanes) * self.RANGES_PER_LANE
        ahead = len(self.lanes) if self.PARSE_WHILE_FIRST_PLAN else 0
        first = list(enumerate(ranges[: len(ranges) - self.tail]))[: size + ahead]
        self.early = [self._scan(*kp) for kp in first]
        self.begun = [fut for _, _, fut in self.early]

    def _scanned(
        self, scans: list[tuple[int, int, Future[Any]]], row: int
    ) -> tuple[list[_Scanned], Future[Any] | None]:
        """The wave's parsed ranges in input order (empty ones left out), and a failed future
        in place of the first range with a bad row (found again here with its true row
        numbers; the ranges after it are dropped)."""
        done: list[_Scanned] = []
        for key, w, fut in scans:
            try:
                n, distinct, worker, cpu = fut.result()
            except EncodeDataError:  # named rows from 1: find it again with the true rows
                failed: Future[Any] = Future()
                try:
                    part = self.ranges[key]
                    read_range(self.path, part, self.layout, self.source, row)
                    raise AssertionError("a range failed in a lane, not here")
                except EncodeDataError as exc:
                    failed.set_exception(exc)
                for _, _, later in scans:
                    later.cancel()
                return done, failed
            if self.stats is not None:
                self.stats.add(worker, cpu, reading=True)
            if n:
                done.append((key, w, n, distinct))
                row += n
        return done, None

    def _owners(self, column: str, h: np.ndarray, holders: np.ndarray, pick: np.ndarray) -> Any:
        """For a wave's distinct hashes ``h`` (sorted), held by the lanes of bit mask
        ``holders``, the one a hash picks among them being lane ``pick``: which to share, with
        which owner and to which lanes (bit masks, the owner left out). Shared: a value some
        holder's memo lacks, unless it is new and held by one lane only (that lane computes
        it); its owner is the first lane whose memo has it, or else the picked holder."""
        known, have = self.known.get(column, (_NO_HASHES, _NO_HASHES))
        if known.size + h.size > self.HANDED_CAP:  # forgotten: values may be computed again
            known, have = _NO_HASHES, _NO_HASHES
        at = np.minimum(np.searchsorted(known, h), max(known.size - 1, 0))
        now = np.zeros(h.size, dtype=np.uint64)
        if known.size:
            hit = known[at] == h
            now[hit] = have[at[hit]]
        else:
            hit = np.zeros(h.size, dtype=bool)
        need = holders & ~now
        alone = (now == 0) & (np.bitwise_count(holders) == 1)
        share = (need != 0) & ~alone
        lowest = now & (~now + np.uint64(1))  # the lowest lane whose memo has it (0: none)
        first = np.where(lowest != 0, np.log2(np.maximum(lowest, 1)).astype(np.int64), pick)
        owner = first[share]
        dest = need[share] & ~(np.uint64(1) << owner.astype(np.uint64))
        if known.size:
            have = have.copy()
            have[at[hit]] |= holders[hit]
        fresh = ~hit  # sorted, as ``h``: merged into the sorted table in one pass
        at = np.searchsorted(known, h[fresh])
        self.known[column] = (np.insert(known, at, h[fresh]), np.insert(have, at, holders[fresh]))
        return share, owner, dest

    def plan(self, done: list[_Scanned]) -> list[dict[Unit, RawValues]]:
        """One first-sight share per lane (``_owners``): each value some holder's memo lacks,
        once, to one lane; ``self.dests`` says which lanes get each share's entries."""
        shares: list[dict[Unit, RawValues]] = [{} for _ in self.lanes]
        self.dests = [{} for _ in self.lanes]
        for column, units in self.planner.column_units.items():
            parts = [(w, d[column]) for _, w, _, d in done if column in d and len(d[column][0])]
            if not parts:
                continue
            hashes = np.concatenate([h for _, (_, h) in parts])
            bit = np.concatenate(
                [np.full(len(h), np.uint64(1) << np.uint64(w)) for w, (_, h) in parts]
            )
            order = np.argsort(hashes)
            h = hashes[order]
            starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
            holders = np.bitwise_or.reduceat(bit[order], starts)
            h = h[starts]
            share, owner, dest = self._owners(column, h, holders, _picked(h, holders))
            if not owner.size:
                continue
            values = pa.concat_arrays([v for _, (v, _) in parts])
            where = order[starts[share]]  # a position of each shared value in ``values``
            for w in range(len(self.lanes)):
                mine = owner == w
                if mine.any():
                    order = np.argsort(where[mine], kind="stable")
                    taken = values.take(pa.array(where[mine][order]))
                    for unit in units:  # one array per column: decoded once in the lane
                        shares[w][unit] = taken
                    self.dests[w][column] = dest[mine][order]
        return shares

    def _sight(self, done: list[_Scanned]) -> None:
        """Compute the wave's shared first sight on the lanes and queue each lane's part of
        the entries for it (waits for all of it: the wave's ranges are encoded after)."""
        self._collect_sight(self._route_sight(done))

    def _route_sight(self, done: list[_Scanned]) -> list[Future[Any] | None]:
        """Plan the wave's shared first sight and hand each lane its share. With the job's
        tmpfs folder, the entries go from lane to lane in files of it."""
        shares = self.plan(done)
        self.waves += 1
        return [
            lane.submit(
                routed_sight_task,
                share,
                dests,
                self.spec,
                self.planner.units,
                None if self.out_dir is None else os.path.join(self.out_dir, f"s{self.waves}.{w}"),
            )
            if share
            else None
            for w, (lane, share, dests) in enumerate(
                zip(self.lanes, shares, self.dests, strict=True)
            )
        ]

    def _collect_sight(self, sight: list[Future[Any] | None]) -> None:
        """Wait for the wave's shared first sight; queue each lane's part of the entries."""
        for fut in sight:
            if fut is None:
                continue
            blobs, seconds, worker, cpu = fut.result()
            self.planner.learn(seconds)
            if self.stats is not None:
                self.stats.add(worker, cpu, first_sight=True)
            for d, blob in blobs.items():
                self.handed[d].append(blob)

    def _free_tail(self, first: int) -> Generator[_BatchResult]:
        """The ranges from ``first`` on, after the waves (``tail``: ``PlacedWaveLanes`` only)."""
        assert first == len(self.ranges), "ranges after the waves need PlacedWaveLanes"
        yield from ()

    @staticmethod
    def _held_back(done: list[_Scanned]) -> set[int]:
        """``HOLD_LAST``: the ranges given after the next wave's first sight: each lane's last
        of the wave if it has two or more there, and only if they all come after the others
        (results are taken in the order given: input order)."""
        last: dict[int, int] = {}
        count: dict[int, int] = {}
        for key, w, _, _ in done:
            last[w] = key
            count[w] = count.get(w, 0) + 1
        hold = {key for w, key in last.items() if count[w] > 1}
        rest = [key for key, _, _, _ in done if key not in hold]
        return hold if hold and (not rest or min(hold) > max(rest)) else set()

    def _encode_range(
        self, key: int, w: int, first_row: int, sight: list[Future[Any] | None]
    ) -> None:
        """Encode range ``key`` on lane ``w`` with the entries handed to it (``sight``: empty,
        first sight is computed per wave by ``_sight``)."""
        entries, self.handed[w] = self.handed[w], []
        args = (self.spec, key, first_row, entries, self.source, self.id_column, self.out_dir)
        self.results.append(self.lanes[w].submit(wave_encode_task, *args))

    def run_ranges(self, ranges: list[CsvRange]) -> Generator[_BatchResult]:
        """Results in input order; raises ``NotSplittable`` (the caller starts again the exact
        way) if a lane finds a range whose lines are not all rows."""
        self.ranges = ranges
        size = len(self.lanes) * self.RANGES_PER_LANE
        waved = list(enumerate(ranges[: len(ranges) - self.tail]))
        waves = [waved[i : i + size] for i in range(0, len(waved), size)]
        ahead: list[tuple[int, int, Future[Any]]] | None = None  # given with the first wave
        if self.begun:  # given already (``begin``)
            scans, ahead, self.begun = self.early[:size], self.early[size:], []
        else:
            scans = [self._scan(*kp) for kp in waves[0]] if waves else []
        row = 1  # the first row of the next range
        held: list[tuple[int, int, int]] = []  # ``HOLD_LAST``: (range, lane, first row)
        try:
            for i in range(len(waves)):
                done, failed = self._scanned(scans, row)
                scans = []
                after = waves[i + 1] if failed is None and i + 1 < len(waves) else []
                hold = self._held_back(done) if self.HOLD_LAST and after else set()
                if self.PARSE_WHILE_FIRST_PLAN and i == 0:  # one range per lane now
                    if ahead is None:
                        ahead = [self._scan(*kp) for kp in after[: len(self.lanes)]]
                    scans, after = ahead, after[len(self.lanes) :]
                sight = self._route_sight(done) if self.SIGHT_FIRST else []
                for key, w, first in held:  # the wave before's last ranges, after this share
                    self._encode_range(key, w, first, [])
                held = []
                scans += [self._scan(*kp) for kp in after]  # parsed while this wave is encoded
                if self.SIGHT_FIRST:
                    self._collect_sight(sight)
                else:
                    self._sight(done)
                for key, w, n, _ in done:
                    if key in hold:
                        held.append((key, w, row))
                    else:
                        self._encode_range(key, w, row, [])
                    row += n
                while len(self.results) > size:
                    yield self._take()
                if failed is not None:
                    self.results.append(failed)
                    break
            else:
                yield from self._free_tail(len(waved))
            if self.SETTLE_LAST_WAVE:
                wait(list(self.results))
            while self.results:
                yield self._take()
        finally:
            stop_tasks([*self.results, *(s for _, _, s in scans)])


def placed_wave_task(
    spec: EncoderSpec, key: int, first_row: int, entries: list[bytes | str], job: RangeJob
) -> tuple[Any, str, float, dict[str, float], int]:
    """Runs in a lane: install the entries handed over (``_entries_of``), encode the range
    ``key`` this lane parsed (its first row is row ``first_row`` of the file), hash its ids and
    write its arrays into the job's output file at their rows (``parallel._place``); also the
    lane's name, the task's CPU seconds, the CPU of the encoding's steps and the entries
    installed."""
    c0 = time.process_time()
    blobs = _entries_of(entries)
    installed = 0
    with _WORKER_LOCK:
        encoder = _worker_encoder(spec)
        for blob in blobs:
            got = pickle.loads(blob)
            install_entries(encoder, got)
            installed += len(got)
        batch = _HELD.pop((spec.token, key))
        batch.first_row = first_row
        before = dict(encoder.step_cpu)
        result = encoder.encode_batch(batch, job.source, job.id_column)
        steps = {k: v - before[k] for k, v in encoder.step_cpu.items()}
        _hash_ids(result)
        out = _place(job, first_row, result)
    return out, _worker_name(), time.process_time() - c0, steps, installed


class PlacedWaveLanes(WaveLanes):
    """``WaveLanes`` on this machine's lanes (``encode_csv_parallel(..., routed_sight=True)``):
    the lanes hash the record ids and write the arrays into the job's output file in place
    (as ``parallel._PeerLanes``), so the parent only plans first sight and takes results."""

    RANGE_BLOCKS = 2
    SETTLE_LAST_WAVE = False
    SIGHT_FIRST = True
    PARSE_WHILE_FIRST_PLAN = True
    HOLD_LAST = True

    def __init__(self, *args: Any, job: RangeJob | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.job = job  # set before ``run_ranges`` if not given here
        self.lines: list[int] = []  # every range's lines (= rows): the tail's first rows
        self.lane_of: dict[Future[Any], int] = {}  # an encoding not taken -> its lane

    def _encode_range(
        self, key: int, w: int, first_row: int, sight: list[Future[Any] | None]
    ) -> None:
        assert self.job is not None
        entries, self.handed[w] = self.handed[w], []
        args = (self.spec, key, first_row, entries, self.job)
        fut: Future[Any] = self.lanes[w].submit(placed_wave_task, *args)
        self.results.append(fut)
        self.lane_of[fut] = w

    def _free_tail(self, first: int) -> Generator[_BatchResult]:
        """The ranges after the waves (``tail``: the last range of each lane cut into pieces,
        ``csv_ranges.cut_tail``), each given to the lane with the fewest encodings unfinished
        (at most two: one running, one waiting) and parsed, encoded and placed there on its own
        (``tail_range_task``: values new in them that two lanes meet are computed by both), so
        that the lanes end together; results in input order."""
        assert self.job is not None
        rows = np.cumsum([1, *self.lines[:-1]]).tolist()
        todo = deque(range(first, len(self.ranges)))
        while todo or self.results:
            while todo:
                busy = [0] * len(self.lanes)
                for fut in self.results:
                    if fut in self.lane_of and not fut.done():
                        busy[self.lane_of[fut]] += 1
                w = busy.index(min(busy))
                if busy[w] >= 2:
                    break
                key = todo.popleft()
                piece: Future[Any] = self.lanes[w].submit(
                    tail_range_task, self.spec, self.job, w, self.ranges[key], rows[key]
                )
                self.results.append(piece)
                self.lane_of[piece] = w
            if self.results[0].done():
                yield self._take()
            else:
                wait([f for f in self.results if not f.done()], return_when=FIRST_COMPLETED)

    def _take(self) -> _BatchResult:
        fut = self.results.popleft()
        self.lane_of.pop(fut, None)
        out, worker, cpu, steps, installed, *reading = cast(Any, fut.result())
        if self.stats is not None:
            self.stats.add_steps(steps)
            self.stats.add(worker, cpu)
            self.stats.shared_values += installed
            if reading:
                self.stats.add(worker, reading[0], reading=True)
        return out.take() if isinstance(out, _Placed) else out


def tail_range_task(
    spec: EncoderSpec, job: RangeJob, lane: int, part: CsvRange, first_row: int
) -> tuple[Any, str, float, dict[str, float], int, float]:
    """Runs in a lane: ``parallel.peer_range_task`` (parse, encode and place one range on its
    own; no exchange), its result as ``placed_wave_task`` gives it, then the reading's CPU."""
    out, worker, (reading, sight, encoding), installed, steps = peer_range_task(
        spec, job, lane, part, first_row
    )
    return out, worker, sight + encoding, steps, installed, reading
