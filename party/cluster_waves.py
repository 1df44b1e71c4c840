"""First sight planned per wave of CSV ranges: a value two workers meet is computed once, by one.

Lanes that read their own ranges of a CSV (``parallel._RangeLanes``: the embedded Dask cluster's
workers) meet the same names, dates of birth and towns, but most street addresses only once.
``WaveLanes`` takes the ranges a wave at a time (``RANGES_PER_LANE`` per lane, lanes chosen by
the CSV bytes they were given so far, so every lane gets the same share):

1. every lane parses its ranges of the wave and reports each column's distinct raw values with
   their ``first_sight.value_hashes`` (``parallel.scan_range_task``);
2. the parent keeps, per column, the values that two or more lanes hold in this wave and that no
   lane was given before, and gives each to one of the lanes holding it, picked by its hash (so
   the shares are even); those lanes compute the memo entries (``parallel.first_sight_task``)
   and every other lane installs them with its next range. A value only one lane holds is
   computed by that lane while it encodes: it never travels, unless another lane meets it in a
   later wave; then the lane that computed it (its memo has it) sends it;
3. every lane encodes its ranges of the wave (``parallel.encode_held_task``) and hands the
   arrays over in files on tmpfs; meanwhile the lanes parse the next wave.

Entries are a pure function of the value and a lane that lacks one computes it itself, so the
records are those of one process, bit for bit (``tests/unit/test_cluster_waves.py``). Results are
consumed in input order by ``Encoder.encode_results`` as for ``_RangeLanes`` (row numbers,
record-id checks, the first error); at most two waves of ranges are held or in flight.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa

from party.encoding.csv_ranges import CsvRange, read_range
from party.encoding.encoder import EncodeDataError, _BatchResult
from party.encoding.first_sight import RawValues, Unit
from party.encoding.parallel import _RangeLanes, first_sight_task, stop_tasks

_Scanned = tuple[int, int, int, dict[str, tuple[Any, np.ndarray]]]  # key, lane, rows, distinct


class WaveLanes(_RangeLanes):
    """``_RangeLanes`` with first sight planned per wave (module docstring)."""

    RANGES_PER_LANE = 2  # per wave
    HANDED_CAP = 1 << 21  # values per column remembered as handed out (then forgotten: a cost)

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        # column -> sorted hashes of the values handed out, and of those one lane computed
        # alone (with that lane)
        self.handed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.private: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.ranges: list[CsvRange] = []

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

    def _sorted(self, table: dict[str, Any], column: str, extra: int) -> Any:
        """A column's record in ``table``, forgotten when it would outgrow ``HANDED_CAP``."""
        held = table.get(column)
        if held is None or len(held[0]) + extra > self.HANDED_CAP:
            held = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64))
        return held

    def _owners(self, column: str, h: np.ndarray, holders: np.ndarray, pick: np.ndarray) -> Any:
        """For a wave's distinct hashes ``h`` (sorted), held by ``holders`` lanes each, the one
        a hash picks being lane ``pick``: which to share and with which owner. Shared: not
        handed out before, and held by two or more lanes now, or by another lane than the one
        that computed it alone in an earlier wave (that lane, whose memo has it, is its owner).
        Values held by one lane are recorded as that lane's (``private``)."""
        handed, _ = self._sorted(self.handed, column, h.size)
        fresh = ~np.isin(h, handed, assume_unique=True)
        mine, mine_lane = self._sorted(self.private, column, h.size)
        at = np.minimum(np.searchsorted(mine, h), max(mine.size - 1, 0))
        before = np.full(h.size, -1, dtype=np.int64)
        if mine.size:
            hit = mine[at] == h
            before[hit] = mine_lane[at[hit]]
        share = fresh & ((holders >= 2) | ((before >= 0) & (before != pick)))
        owner = np.where(before >= 0, before, pick)[share]
        self.handed[column] = (np.union1d(handed, h[share]), np.zeros(0, dtype=np.int64))
        alone = fresh & ~share & (before < 0)  # first met, by one lane
        keys = np.concatenate([mine, h[alone]])
        order = np.argsort(keys, kind="stable")
        self.private[column] = (keys[order], np.concatenate([mine_lane, pick[alone]])[order])
        return share, owner

    def plan(self, done: list[_Scanned]) -> list[dict[Unit, RawValues]]:
        """One first-sight share per lane (``_owners``): each value of a column that two or more
        lanes meet, once, to one lane (picked by its hash among the holders)."""
        shares: list[dict[Unit, RawValues]] = [{} for _ in self.lanes]
        for column, units in self.planner.column_units.items():
            parts = [(w, d[column]) for _, w, _, d in done if column in d and len(d[column][0])]
            if not parts:
                continue
            hashes = np.concatenate([h for _, (_, h) in parts])
            lane = np.concatenate([np.full(len(h), w) for w, (_, h) in parts])
            order = np.lexsort((lane, hashes))  # by hash, then lane
            h, ln = hashes[order], lane[order]
            first = np.ones(h.size, dtype=bool)
            first[1:] = (h[1:] != h[:-1]) | (ln[1:] != ln[:-1])
            at, h = order[first], h[first]  # one (hash, lane) pair per holder
            starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
            holders = np.diff(np.r_[starts, h.size])
            picked = at[starts + (h[starts] % holders.astype(np.uint64)).astype(np.int64)]
            share, owner = self._owners(column, h[starts], holders, lane[picked])
            if not owner.size:
                continue
            values = pa.concat_arrays([v for _, (v, _) in parts])
            where = picked[share]  # a position of each shared value in ``values``
            for w in range(len(self.lanes)):
                mine = where[owner == w]
                if mine.size:
                    taken = values.take(pa.array(np.sort(mine)))
                    for unit in units:  # one array per column: decoded once in the lane
                        shares[w][unit] = taken
        return shares

    def _sight(self, done: list[_Scanned]) -> None:
        """Compute the wave's shared first sight on the lanes and queue its entries for every
        other lane (waits for all of it: the wave's ranges are encoded after)."""
        sight: list[Future[Any] | None] = [
            lane.submit(first_sight_task, share, self.spec) if share else None
            for lane, share in zip(self.lanes, self.plan(done), strict=True)
        ]
        self._collect(sight)

    def run_ranges(self, ranges: list[CsvRange]) -> Iterator[_BatchResult]:
        """Results in input order; raises ``NotSplittable`` (the caller starts again the exact
        way) if a lane finds a range whose lines are not all rows."""
        self.ranges = ranges
        size = len(self.lanes) * self.RANGES_PER_LANE
        waves = [list(enumerate(ranges))[i : i + size] for i in range(0, len(ranges), size)]
        scans = [self._scan(*kp) for kp in waves[0]] if waves else []
        row = 1  # the first row of the next range
        try:
            for i in range(len(waves)):
                done, failed = self._scanned(scans, row)
                scans = []
                if failed is None and i + 1 < len(waves):  # parsed while this wave is encoded
                    scans = [self._scan(*kp) for kp in waves[i + 1]]
                self._sight(done)
                for key, w, n, _ in done:
                    self._encode_range(key, w, row, [])
                    row += n
                while len(self.results) > size:
                    yield self._take()
                if failed is not None:
                    self.results.append(failed)
                    break
            while self.results:
                yield self._take()
        finally:
            stop_tasks([*self.results, *(s for _, _, s in scans)])
