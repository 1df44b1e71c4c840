"""The comparison's pairs of parties on the party's Dask workers (target any): keys in buckets.

With a ``[cluster]`` table a node compares on its cluster as it encodes there
(``cluster_tasks.compare_on_cluster``). The node still builds every party's inputs, block
indexes and plans (``PairEngine.compare``). A pair of parties (a, b) is cut twice, as the kernel
threads cut it (``PairPlan.kept_pairs``), with the sort moved to the second cut:

1. ranges of blocks of about equal pairs (``PairPlan.block_ranges``): each range is a task that
   writes its keys (row of a, row of b: each pair once per whole block it is in) to buckets of
   consecutive rows of a (``pairwise.bucket_keys``), reading both block indexes in order;
2. the buckets: each is a task that takes its bucket's keys from every range of blocks, sorts
   them and keeps the pairs passing the segment filter, each once (``pairwise.kept_rows_of_keys``).

The node takes the buckets' rows in bucket order: the rows of the thread path, in its order.
A pair has ``ranges_per_worker`` ranges (and buckets) per worker, more when its keys would
exceed ``max_pairs`` per range (at most ``MAX_BUCKETS``).

What goes to a worker: each party's pseudonyms, segments, popcounts and block index
(``IndexedSide``) once, and a plan's per-block flags when the run has a block cap. The keys go
from the ranges to the buckets in files of the comparison's folder on the embedded cluster
(written by the range's task, read by each bucket's, their bytes reserved on the node's budget
and removed once the pair's rows are in; a range whose file cannot be written returns its keys
instead), else from worker to worker through Dask. What comes
back: each bucket's kept rows (pseudonyms and common bits). How inputs reach the workers, the
results, lost workers, errors and cleanup: ``party.cluster_tasks``.

Security: the same cluster and TLS as the encoding's (``party.cluster.dask_client``): the
embedded cluster's throw-away certificates, or the party's own ``tls://`` scheduler with its CA
and client certificate and ``require_encryption``. The segments are this party's own and those
its peers sent it through the protocol; they reach only the party's own workers, live there only
while the comparison runs (every future is cancelled when it ends or fails) and leave the party
only through its node. No log or error names a segment, a pseudonym or a record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from party.cluster_tasks import SCRATCH_MIN_BYTES, ClusterTasks, Mapped, compact, forget_mapped
from party.protocol.pairwise import (
    IndexedSide,
    PairPlan,
    bucket_keys,
    kept_rows_of_keys,
    party_records,
)

#: a party's arrays in its two files (``Mapped``): its rows, its block index (int32 where it fits)
FILE_ARRAYS = {"rows": ("records",), "index": ("starts", "rows")}
#: ranges of blocks (and buckets of a's rows) of a pair of parties at most
MAX_BUCKETS = 256
KEY_BYTES = 8


@dataclasses.dataclass(frozen=True)
class MappedSide:
    """A party's ``IndexedSide`` in its two files (``FILE_ARRAYS``)."""

    rows: Mapped
    index: Mapped

    def side(self) -> IndexedSide:
        rows, index = self.rows.arrays(), self.index.arrays()
        return IndexedSide(self.rows.column, rows["records"], index["starts"], index["rows"])


def _side(source: MappedSide | IndexedSide) -> IndexedSide:
    return source.side() if isinstance(source, MappedSide) else source


def range_keys(
    source_a: MappedSide | IndexedSide,
    source_b: MappedSide | IndexedSide,
    whole: np.ndarray | None,
    x0: int,
    x1: int,
    count: int,
    buckets: int,
    path: str | None = None,
) -> Any:
    """Runs on a worker: ``bucket_keys`` of blocks x0..x1-1: (keys, offsets); with ``path``,
    the keys go to that file (made here) and only the offsets come back, unless the file
    cannot be written (tmpfs full since the room was checked): then (keys, offsets) go through
    Dask."""
    keys, offsets = bucket_keys(_side(source_a), _side(source_b), whole, x0, x1, count, buckets)
    if path is None:
        return keys, offsets
    try:
        with open(path, "wb") as fh:  # a write, not a mapping: no room is an OSError, not SIGBUS
            fh.write(keys.data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(path)
        return keys, offsets
    return offsets


def bucket_of(keys_offsets: tuple[np.ndarray, np.ndarray], bucket: int) -> np.ndarray:
    """Runs on a worker: bucket ``bucket`` of a range's (keys, offsets)."""
    keys, offsets = keys_offsets
    return keys[int(offsets[bucket]) : int(offsets[bucket + 1])]


def _read_keys(path: str, lo: int, out: np.ndarray) -> None:
    """Keys lo.. of a range's file into ``out`` (all of it)."""
    if not out.size:
        return
    with open(path, "rb") as fh:
        fh.seek(lo * KEY_BYTES)
        if fh.readinto(out) != out.nbytes:  # type: ignore[arg-type]
            raise OSError("a range's key file is shorter than its offsets say")


def kept_rows_of_bucket(
    source_a: MappedSide | IndexedSide,
    source_b: MappedSide | IndexedSide,
    pieces: list[Any],
    bucket: int,
    table: np.ndarray,
    parties: int,
) -> tuple[list[np.ndarray], int, int]:
    """Runs on a worker: ``kept_rows_of_keys`` of bucket ``bucket``, its keys from every range
    of blocks (``pieces``: each the bucket's keys, or (a range's file, what its task returned:
    the offsets, or the keys and offsets when the file could not be written))."""
    sources: list[Any] = []  # the bucket's keys in memory, or (a file, first, end)
    for piece in pieces:
        if isinstance(piece, tuple):
            path, got = piece
            piece = (
                bucket_of(got, bucket)
                if isinstance(got, tuple)
                else (path, *got[bucket : bucket + 2])
            )
        sources.append(piece)
    sizes = [int(x[2] - x[1]) if isinstance(x, tuple) else int(x.shape[0]) for x in sources]
    keys = np.empty(sum(sizes), dtype=np.uint64)
    at = 0
    for source, size in zip(sources, sizes, strict=True):
        if isinstance(source, tuple):
            _read_keys(source[0], int(source[1]), keys[at : at + size])
        else:
            keys[at : at + size] = source
        at += size
    return kept_rows_of_keys(_side(source_a), _side(source_b), keys, table, parties)


def warm_up() -> None:
    """Run a range's and a bucket's tasks once on a tiny pair of parties, in files and in
    memory: loads (or compiles) their numba loops for the types a worker meets (mapped arrays
    are read-only), so workers forked after this (the embedded cluster's forkserver) start with
    them ready instead of loading them in their first comparison's tasks."""
    import tempfile

    from party.protocol.kernel import threshold_table

    records = party_records([np.arange(1, 5, dtype=np.uint64)], [np.zeros((4, 1), np.uint64)])
    side = IndexedSide(
        0,
        records[0],
        compact(np.array([0, 4], dtype=np.int64)),
        compact(np.arange(4, dtype=np.int64)),
    )
    table = threshold_table(2, 0.5, 128)  # read-only, as the tasks get it
    got = range_keys(side, side, None, 0, 1, 16, 2)
    kept_rows_of_bucket(side, side, [bucket_of(got, 0)], 0, table, 3)
    with tempfile.TemporaryDirectory(prefix="pprl-warm-") as folder:
        files = [
            Mapped.write(folder, kind, 0, {key: getattr(side, key) for key in keys})
            for kind, keys in FILE_ARRAYS.items()
        ]
        mapped = MappedSide(files[0], files[1])
        path = os.path.join(folder, "keys")
        offsets = range_keys(mapped, mapped, None, 0, 1, 16, 2, path)
        kept_rows_of_bucket(mapped, mapped, [(path, offsets)], 0, table, 3)
        forget_mapped(folder)


@dataclasses.dataclass
class _PairJobs:
    """A submitted pair's bucket tasks, and what goes once its rows are in."""

    buckets: list[tuple[str, Any]]
    between: list[Any]  # the ranges' futures (and buckets through Dask)
    paths: list[str]  # the ranges' key files
    reserved: int  # their bytes on the budget


class ClusterPairs(ClusterTasks):
    """The kept rows of pairs of parties computed on a Dask client's workers (``submit`` every
    pair first, then ``kept_pairs`` of each in turn; module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sources: dict[int, Any] = {}  # a party's column -> its MappedSide or future
        self._jobs: dict[tuple[int, int], _PairJobs] = {}

    def close(self) -> None:
        self._jobs.clear()
        self._sources.clear()
        super().close()

    def _source(self, side: IndexedSide) -> Any:
        """The party's inputs on the workers, once per party: its two files (embedded cluster),
        else through Dask to every worker."""
        if side.column not in self._sources:
            compacted = dataclasses.replace(
                side, starts=compact(side.starts), rows=compact(side.rows)
            )
            files = [
                self._write(
                    f"{kind}-{side.column}",
                    side.column,
                    {key: getattr(compacted, key) for key in keys},
                )
                for kind, keys in FILE_ARRAYS.items()
            ]
            if files[0] is not None and files[1] is not None:
                self._sources[side.column] = MappedSide(files[0], files[1])
            else:  # both through Dask: a file written alone would only hold room
                for mapped in files:
                    if mapped is not None:
                        self._drop(mapped)
                self._sources[side.column] = self._scatter(compacted)
                self.sent_bytes += compacted.nbytes * len(self.workers)
        return self._sources[side.column]

    def _key_files(self, pair: tuple[int, int], parts: int, nbytes: int) -> list[str] | None:
        """Paths for a pair's ranges' key files, their bytes reserved; None (through Dask)
        without a folder, when the budget refuses or tmpfs lacks the room."""
        if self.folder is None or shutil.disk_usage(self.folder).free < nbytes + SCRATCH_MIN_BYTES:
            return None
        if not self._reserve(nbytes):
            return None
        paths = [os.path.join(self.folder, f"keys-{pair[0]}-{pair[1]}-{k}") for k in range(parts)]
        self._paths.extend(paths)
        return paths

    def submit(
        self,
        pair: tuple[int, int],
        plan: PairPlan,
        side_a: IndexedSide,
        side_b: IndexedSide,
        table: np.ndarray,
        parties: int,
        max_pairs: int,
    ) -> None:
        """Start the tasks of pair ``pair`` = (a, b): its ranges of blocks, then its buckets,
        round robin over the workers (``plan``: the pair's plan, for its ranges and, with a
        cap, its per-block flags)."""
        total = int(plan.whole_pairs)
        if total == 0 or int(side_a.keys.shape[0]) == 0:
            self._jobs[pair] = _PairJobs([], [], [], 0)
            return
        parts = len(self.workers) * self.ranges_per_worker
        parts = min(MAX_BUCKETS, max(parts, math.ceil(total / max(1, int(max_pairs)))))
        cuts, offsets = plan.block_ranges(parts)
        a, b = self._source(side_a), self._source(side_b)
        flags = None
        if plan.check:
            flags = self._scatter(np.ascontiguousarray(plan.whole))
            self.sent_bytes += int(plan.whole.nbytes) * len(self.workers)
        nbytes = total * KEY_BYTES
        paths = self._key_files(pair, parts, nbytes)
        ranges = []
        for k in range(parts):
            head = (range_keys, a, b, flags, int(cuts[k]), int(cuts[k + 1]))
            path = None if paths is None else paths[k]
            ranges.append(self._submit(*head, int(offsets[k + 1] - offsets[k]), parts, path)[1])
        between = list(ranges)  # and, through Dask, each bucket's piece of each range
        files = None if paths is None else list(zip(paths, ranges, strict=True))
        buckets = []
        for j in range(parts):
            pieces: list[Any] | None = files
            if pieces is None:
                pieces = [self.client.submit(bucket_of, r, j, pure=False) for r in ranges]
                self._futures.extend(pieces)
                between.extend(pieces)
            buckets.append(self._submit(kept_rows_of_bucket, a, b, pieces, j, table, parties))
        self.shuffled_bytes += nbytes
        self._jobs[pair] = _PairJobs(buckets, between, paths or [], 0 if paths is None else nbytes)

    def kept_pairs(
        self, pair: tuple[int, int], cancel: threading.Event | None = None
    ) -> Iterator[tuple[list[np.ndarray], int, int]]:
        """The submitted pair's buckets in order, as ``PairPlan.kept_pairs`` yields its pieces:
        (kept rows, pairs counted once per whole block, kept pairs counted once per whole
        block); then the pair's keys are dropped."""
        a, b = pair
        jobs = self._jobs.pop(pair, None)
        if jobs is None:
            return
        for worker, future in jobs.buckets:
            what = f"the comparison of parties {a} and {b}"
            found, pairs, kept = self._result(what, worker, future, cancel)
            self.received_bytes += sum(int(rows.nbytes) for rows in found)
            yield found, pairs, kept
        if jobs.between:
            self.client.cancel(jobs.between)
        self._remove(jobs.paths, jobs.reserved)
