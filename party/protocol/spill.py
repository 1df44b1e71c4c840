"""Bounded-memory row stores for a run's bulk data (survivors, ring output, masks, matches).

A ``RowStore`` holds (m, width) uint64 rows. Rows stay in memory while the run's ``MemoryGauge``
grants their bytes; beyond that they are written to files in the run's ``SpillFolder`` (a private
temporary folder, mode 0700, created on first use and removed by ``close``), so memory stays flat
however many rows arrive. This is the only place where the protocol engine touches files.

Two kinds of store:

- sorted (``key_columns=k``): rows arrive in any order; ``finish()`` turns them into one sequence
  sorted lexicographically by their first k columns, keeping the first row of each key (rows with
  equal keys carry equal payloads here: the same candidate set found in several blocks). In memory
  this is one lexsort. When rows were spilled, each spilled batch is a sorted run on disk and
  ``finish`` merges the runs by streaming (at most MAX_FAN_IN at once, in rounds beyond that): it
  reads a bounded block of every run and emits, merged (a compiled k-way merge of the sorted
  blocks, not a sort), every row whose key is at most the
  smallest last key among blocks whose run has more rows on disk; rows above that bound stay for
  the next round. Any key equal to the bound is therefore
  emitted in one batch, so de-duplication within batches is complete.
  A sorted store whose appends arrive already in order (every chunk's keys strictly increasing and
  above the previous chunk's last key, e.g. the candidate pairs of one block enumerated in
  pseudonym order; a pass over each chunk checks its keys unless the caller knows them increasing
  from how it built them, ``append(rows, increasing=True)``) stays *ordered*: it reserves only
  the rows' data, spills by appending to one file, and ``finish`` neither sorts nor merges. The
  first append out of order ends that: the rows held so far stay in memory if the gauge grants
  their sort room, else (one sorted run) they are written out, and the store goes on as above
  (target any: the kept pairs of each two parties come in key order, those of the next two
  parties start below them).
- sequential (``key_columns=None``): rows keep their append order (callers append sorted chunks).

What a store holds in memory is reserved on its gauge before it is held, including the room its
sorts take: a sorted store reserves, per row kept in memory, its data and what sorting it at a
spill or at ``finish`` allocates beside it (``sort_bytes_per_row``), and a merge reserves its
blocks and their sort (halving its block size until the gauge grants it, down to
``MIN_MERGE_BYTES``), so the gauge's peak is the store's real peak.

``chunks(rows)`` reads the finished store back in order, a bounded number of rows at a time.
``SortedCursor`` walks a sorted store forward to find the rows named by increasing query chunks
(the ring's intersection of an incoming message with a party's own survivors).

Spill file format: raw little-endian uint64, row-major, ``width`` words per row, no header; the
files are private to the run and deleted with its folder.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import threading
import weakref
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from party.protocol._numba_blocks import (
    first_keys_in_order,
    first_of_each_key,
    gather_rows,
    keys_strictly_increasing,
    merge_unique_runs,
    rows_at_most,
)
from party.protocol.errors import MemoryBudgetError
from party.protocol.ring import intersect_sorted_rows, sort_rows
from party.protocol.row_sort import PARALLEL_MIN_ROWS, sort_unique_rows

_U64 = np.dtype("<u8")
#: At most this many sorted runs are merged at once (more are merged in rounds), so the merge's
#: memory (one block per run) stays bounded even when every append had to spill on its own.
MAX_FAN_IN = 32
#: The smallest block memory of a merge (all runs together), granted or not by the gauge.
MIN_MERGE_BYTES = 1 << 20
#: A merge's memory per byte of its blocks: the blocks, the concatenation of the rows it merges
#: at once (at most all of the blocks) and the merged rows.
MERGE_BYTES_PER_BYTE = 3


class MemoryGauge(Protocol):
    """Grants or refuses bytes of memory (the node's per-run buffer account implements it)."""

    def try_reserve(self, nbytes: int) -> bool: ...

    def release(self, nbytes: int) -> None: ...


class LocalGauge:
    """A plain byte limit, optionally also charged to an outer gauge (e.g. the node's budget)."""

    def __init__(self, limit_bytes: int, outer: MemoryGauge | None = None) -> None:
        self.limit_bytes = limit_bytes
        self.outer = outer
        self.held = 0
        self.peak = 0
        self._lock = threading.Lock()

    def try_reserve(self, nbytes: int) -> bool:
        with self._lock:
            if self.held + nbytes > self.limit_bytes:
                return False
            if self.outer is not None and not self.outer.try_reserve(nbytes):
                return False
            self.held += nbytes
            self.peak = max(self.peak, self.held)
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            nbytes = min(nbytes, self.held)
            self.held -= nbytes
            if self.outer is not None:
                self.outer.release(nbytes)


class SpillFolder:
    """A private (0700) temporary folder for one run, created on first use, removed by close().

    ``limit_bytes`` bounds what the run may write there (default: 80% of the free space of the
    file system when the folder is created); beyond it writes fail with MemoryBudgetError.
    """

    def __init__(
        self, parent: str | os.PathLike[str] | None = None, limit_bytes: int | None = None
    ) -> None:
        self.parent = parent
        self.limit_bytes = limit_bytes
        self._path: pathlib.Path | None = None
        self._count = 0
        self._finalizer: weakref.finalize | None = None
        self.bytes_written = 0

    def charge(self, nbytes: int) -> None:
        """Count ``nbytes`` about to be written; MemoryBudgetError beyond the limit."""
        if self.limit_bytes is not None and self.bytes_written + nbytes > self.limit_bytes:
            raise MemoryBudgetError(
                f"the run needs more than {self.limit_bytes:,} bytes of spill space for its "
                "candidate sets; raise the segment threshold s_m, set max_block_size, or give "
                "the spill folder more room"
            )
        self.bytes_written += nbytes

    @property
    def created(self) -> bool:
        return self._path is not None

    def new_file(self, stem: str) -> pathlib.Path:
        if self._path is None:
            # mkdtemp creates the folder with mode 0700 (readable by this user only)
            self._path = pathlib.Path(tempfile.mkdtemp(prefix="pprl-run-", dir=self.parent))
            self._finalizer = weakref.finalize(self, shutil.rmtree, self._path, True)
            if self.limit_bytes is None:
                self.limit_bytes = int(shutil.disk_usage(self._path).free * 0.8)
        self._count += 1
        return self._path / f"{stem}-{self._count}.u64"

    @property
    def path(self) -> pathlib.Path | None:
        return self._path

    def close(self) -> None:
        if self._finalizer is not None:
            self._finalizer()
        self._path = None


def _sort_unique(
    rows: np.ndarray, key_columns: int, workers: int = 1, repeats: bool = True
) -> np.ndarray:
    """Rows sorted by their first ``key_columns`` columns, one row per key (the first in input
    order); on ``workers`` kernel threads (``row_sort``, the same result) when there are many.
    ``repeats``: many rows repeat a key (dropped by a hash pass before the sort, else after)."""
    if rows.shape[0] < 2:
        return rows
    rows = np.ascontiguousarray(rows)
    if workers > 1 and rows.shape[0] >= PARALLEL_MIN_ROWS:
        return sort_unique_rows(rows, key_columns, workers)
    if repeats:
        # Drop repeated keys first (linear; target all's comparison finds a set once per block
        # it shares, so most rows repeat), keeping each key's first row as a stable sort would;
        # then sort the rest.
        first = first_of_each_key(rows, key_columns)
        if not first.all():
            rows = rows[first]
        del first
        return rows[sort_rows(rows, key_columns)]
    order = sort_rows(rows, key_columns)
    firsts = first_keys_in_order(rows, order, key_columns)
    out = np.empty((firsts.size, rows.shape[1]), dtype=np.uint64)
    gather_rows(rows, order, firsts, out)
    return out


def sort_bytes_per_row(width: int) -> int:
    """Bytes a row of ``width`` uint64 columns takes while ``_sort_unique`` sorts it beside the
    input: the de-duplicated copy and the sorted copy (8 x width each), the hash table of
    ``first_of_each_key``, the sort's permutation, its column copy and merge buffer (32)."""
    return 16 * width + 32


def count_at_most(rows: np.ndarray, bound: np.ndarray) -> int:
    """How many leading rows of ``rows`` (sorted by their first len(bound) columns) are <= bound
    (a compiled binary search: the merge and the ring's cursor ask it of every block)."""
    if rows.shape[0] == 0:
        return 0
    return int(rows_at_most(rows, np.ascontiguousarray(bound, dtype=np.uint64)))


def _smallest_row(rows: np.ndarray) -> np.ndarray:
    return rows[np.lexsort(rows.T[::-1])[0]]


class _FileRun:
    """Sequential reader of one spill file."""

    def __init__(self, path: pathlib.Path, rows: int, width: int) -> None:
        self.path, self.rows, self.width = path, rows, width
        self.pos = 0

    @property
    def exhausted(self) -> bool:
        return self.pos >= self.rows

    def read(self, rows: int) -> np.ndarray:
        n = min(rows, self.rows - self.pos)
        with self.path.open("rb") as fh:
            fh.seek(self.pos * self.width * 8)
            out = np.fromfile(fh, dtype=_U64, count=n * self.width)
        self.pos += n
        return out.astype(np.uint64, copy=False).reshape(n, self.width)


def _write(path: pathlib.Path, rows: np.ndarray, folder: SpillFolder) -> None:
    folder.charge(rows.nbytes)
    with path.open("ab") as fh:
        np.ascontiguousarray(rows, dtype=_U64).tofile(fh)


class RowStore:
    """(m, width) uint64 rows in memory within a gauge, spilled beyond it (module docstring)."""

    def __init__(
        self,
        width: int,
        *,
        gauge: MemoryGauge,
        folder: SpillFolder,
        key_columns: int | None = None,
        name: str = "rows",
        merge_bytes: int = 8 * 2**20,
        workers: int = 1,
        repeats: bool = True,
    ) -> None:
        """``workers``: kernel threads a sorted store's sorts use (``row_sort``); ``repeats``:
        whether many appended rows repeat a key (``_sort_unique``; the result is the same)."""
        self.width = width
        self.workers = workers
        self.repeats = repeats
        self.gauge = gauge
        self.folder = folder
        self.key_columns = key_columns
        self.name = name
        self.merge_bytes = merge_bytes
        self._mem: list[np.ndarray] = []
        self._mem_bytes = 0
        self._files: list[tuple[pathlib.Path, int]] = []
        self.appended = 0
        #: a sorted store whose appends so far came in strictly increasing key order (docstring)
        self.ordered = key_columns is not None
        self._last_key: tuple[int, ...] | None = None
        self.finished = False
        self.rows = 0  # after finish: rows in the store (distinct keys for a sorted store)

    @property
    def spilled(self) -> bool:
        return bool(self._files)

    def append(self, rows: np.ndarray, *, increasing: bool = False) -> None:
        """Hold (or spill) ``rows``; ``increasing``: the caller knows from how it built them that
        their keys are strictly increasing, so an ordered store compares only their first key with
        the last one appended before (no pass over the rows)."""
        if self.finished:
            raise RuntimeError(f"{self.name} store is finished")
        rows = np.ascontiguousarray(rows, dtype=np.uint64)
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"{self.name} rows must be (m, {self.width}) uint64")
        if rows.shape[0] == 0:
            return
        if self.ordered and not self._in_order(rows, increasing):
            # what is held stays in memory when the gauge grants its sort room (it is sorted
            # with the later appends), else (still ordered) joins the one sorted run on disk
            room = sum(p.shape[0] for p in self._mem) * sort_bytes_per_row(self.width)
            if room and self.gauge.try_reserve(room):
                self._mem_bytes += room
            else:
                self._spill()
            self.ordered = False
        self.appended += rows.shape[0]
        cost = self._cost(rows.shape[0])
        if self.gauge.try_reserve(cost):
            self._mem.append(rows)
            self._mem_bytes += cost
            return
        self._spill(rows)

    def _in_order(self, rows: np.ndarray, increasing: bool = False) -> bool:
        """Whether ``rows`` continue the strictly increasing key order of the appends so far
        (and, if so, remember their last key); ``increasing``: their own keys are known to be."""
        k = self.key_columns
        assert k is not None
        first = tuple(rows[0, :k].tolist())
        if self._last_key is not None and not self._last_key < first:
            return False
        if not increasing and not keys_strictly_increasing(rows, k):
            return False
        self._last_key = tuple(rows[-1, :k].tolist())
        return True

    def _cost(self, rows: int) -> int:
        """Gauge bytes of ``rows`` rows kept in memory: their data and, in a sorted store that is
        not ordered, what sorting them at a spill or at ``finish`` takes beside them
        (``sort_bytes_per_row``)."""
        per_row = 8 * self.width
        if self.key_columns is not None and not self.ordered:
            per_row += sort_bytes_per_row(self.width)
        return rows * per_row

    def _spill(self, extra: np.ndarray | None = None) -> None:
        pieces = self._mem + ([extra] if extra is not None else [])
        if not pieces:
            return
        if self.key_columns is not None and not self.ordered:
            rows = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
            pieces.clear()
            self._mem = []  # the pieces' memory is the concatenation's now (still reserved)
            run = _sort_unique(rows, self.key_columns, self.workers, self.repeats)
            del rows
            path = self.folder.new_file(self.name)
            _write(path, run, self.folder)
            self._files.append((path, run.shape[0]))
        else:
            if not self._files:
                self._files.append((self.folder.new_file(self.name), 0))
            path, n = self._files[0]
            for piece in pieces:
                _write(path, piece, self.folder)
                n += piece.shape[0]
            self._files[0] = (path, n)
        self._drop_memory()

    def _drop_memory(self) -> None:
        self.gauge.release(self._mem_bytes)
        self._mem, self._mem_bytes = [], 0

    def finish(self) -> RowStore:
        """No more appends; sort and de-duplicate a sorted store (merging spilled runs)."""
        if self.finished:
            return self
        self.finished = True
        if self.key_columns is None or self.ordered:  # in order already: nothing to sort
            self.rows = self.appended
            return self
        if not self._files:
            if self._mem:
                rows = np.concatenate(self._mem) if len(self._mem) > 1 else self._mem[0]
                self._mem = []  # reserved with the sort's room until sorted
                rows = _sort_unique(rows, self.key_columns, self.workers, self.repeats)
                self._drop_memory()
                if not self.gauge.try_reserve(rows.nbytes):
                    self._files = [(self.folder.new_file(self.name), 0)]
                    _write(self._files[0][0], rows, self.folder)
                    self._files[0] = (self._files[0][0], rows.shape[0])
                else:
                    self._mem, self._mem_bytes = [rows], rows.nbytes
                self.rows = rows.shape[0]
            return self
        self._spill()
        self._files = [self._merge(self._files)]
        self.rows = self._files[0][1]
        return self

    def _merge(self, files: list[tuple[pathlib.Path, int]]) -> tuple[pathlib.Path, int]:
        while len(files) > MAX_FAN_IN:
            files = [
                self._merge_runs(files[a : a + MAX_FAN_IN])
                for a in range(0, len(files), MAX_FAN_IN)
            ]
        return self._merge_runs(files)

    def _merge_runs(self, files: list[tuple[pathlib.Path, int]]) -> tuple[pathlib.Path, int]:
        runs = [_FileRun(p, n, self.width) for p, n in files]
        # the merge holds a block of every run and merges at most all of them at once beside
        # them (their concatenation and the merged rows): reserved on the gauge (halved until it
        # fits, down to MIN_MERGE_BYTES)
        merge_bytes = max(MIN_MERGE_BYTES, self.merge_bytes)
        per_byte = MERGE_BYTES_PER_BYTE
        while merge_bytes > MIN_MERGE_BYTES and not self.gauge.try_reserve(
            int(merge_bytes * per_byte)
        ):
            merge_bytes //= 2
        reserved = int(merge_bytes * per_byte) if merge_bytes > MIN_MERGE_BYTES else 0
        try:
            return self._merge_blocks(runs, files, merge_bytes)
        finally:
            self.gauge.release(reserved)

    def _merge_blocks(
        self, runs: list[_FileRun], files: list[tuple[pathlib.Path, int]], merge_bytes: int
    ) -> tuple[pathlib.Path, int]:
        assert self.key_columns is not None
        k = self.key_columns
        block = max(1024, merge_bytes // (len(runs) * self.width * 8))
        bufs = [r.read(block) for r in runs]
        out = self.folder.new_file(self.name + "-merged")
        written = 0
        while True:
            for i, r in enumerate(runs):
                if bufs[i].shape[0] == 0 and not r.exhausted:
                    bufs[i] = r.read(block)
            live = [i for i in range(len(runs)) if bufs[i].shape[0]]
            if not live:
                break
            waiting = [i for i in live if not runs[i].exhausted]
            parts = []
            if waiting:
                bound = _smallest_row(np.stack([bufs[i][-1, :k] for i in waiting]))
                for i in live:
                    n = count_at_most(bufs[i], bound)
                    parts.append(bufs[i][:n])
                    bufs[i] = bufs[i][n:]
            else:
                parts = [bufs[i] for i in live]
                bufs = [b[:0] for b in bufs]
            rows = np.concatenate(parts)  # every part sorted: merged, not sorted again
            bounds = np.concatenate([[0], np.cumsum([part.shape[0] for part in parts])])
            del parts
            batch = np.empty_like(rows)
            kept = merge_unique_runs(rows, bounds.astype(np.int64), k, batch)
            del rows
            _write(out, batch[:kept], self.folder)
            written += kept
        for p, _ in files:
            p.unlink(missing_ok=True)
        return out, written

    def chunks(self, rows: int) -> Iterator[np.ndarray]:
        """The finished store's rows in order, at most ``rows`` at a time."""
        if not self.finished:
            raise RuntimeError(f"{self.name} store is not finished")
        rows = max(1, rows)
        for path, n in self._files:
            run = _FileRun(path, n, self.width)
            while not run.exhausted:
                yield run.read(rows)
        for piece in self._mem:
            for a in range(0, piece.shape[0], rows):
                yield piece[a : a + rows]

    def close(self) -> None:
        """Free the memory (and gauge bytes) and delete the files of this store."""
        self._drop_memory()
        for p, _ in self._files:
            p.unlink(missing_ok=True)
        self._files = []


class SortedCursor:
    """Finds, in a sorted unique row stream, the rows whose keys appear in increasing query chunks.

    Every query chunk must be strictly increasing and start above the previous chunk's last row
    (the caller checks); the stream is read forward once, one chunk in memory at a time.
    """

    def __init__(self, chunks: Iterator[np.ndarray], key_columns: int) -> None:
        self._source = chunks
        self.k = key_columns
        self._window: np.ndarray | None = None
        self._done = False
        self._back: list[np.ndarray] = []  # chunks given back by rewind, read again first
        self._undo: tuple[np.ndarray | None, bool, list[np.ndarray]] | None = None

    def _next_chunk(self) -> np.ndarray | None:
        return self._back.pop() if self._back else next(self._source, None)

    def match(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``query`` found in the stream, the stream's rows for them), in order.
        ``rewind`` can undo this call until the next one."""
        q_pos: list[np.ndarray] = []
        found: list[np.ndarray] = []
        read: list[np.ndarray] = []
        self._undo = (self._window, self._done, read)
        if query.shape[0]:
            last = query[-1]
            while True:
                if self._window is None or self._window.shape[0] == 0:
                    self._window = None if self._done else self._next_chunk()
                    if self._window is None:
                        self._done = True
                        break
                    read.append(self._window)
                win = self._window
                ia, ib = intersect_sorted_rows(query, np.ascontiguousarray(win[:, : self.k]))
                q_pos.append(ia)
                found.append(win[ib])
                n = count_at_most(win, last)
                self._window = win[n:]
                if self._window.shape[0]:
                    break
        if not q_pos:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.uint64)
        return np.concatenate(q_pos), np.concatenate(found)

    def rewind(self) -> None:
        """Undo the last ``match`` (its query was refused): the stream reads as before it."""
        if self._undo is None:
            raise RuntimeError("no match to rewind")
        self._window, self._done, read = self._undo
        self._back.extend(reversed(read))  # popped from the end: read again in order
        self._undo = None
