"""The comparison's pairs of parties on the party's Dask workers (target any): ranges of a's rows.

With a ``[cluster]`` table a node compares on its cluster as it encodes there
(``compare_on_cluster``). The node still builds every party's inputs, block indexes and plans
(``PairEngine.compare``); for each pair of parties (a, b) it cuts a's rows into ranges, and each
range is one task (``pairwise.kept_rows_of``: row-driven, it reads only its rows' blocks of b's
index) on one worker. What goes to a worker: b's pseudonyms, segments, popcounts and block index
(``PairTarget``, once per worker for every pair b is in), and per task a's rows of its range
(pseudonyms, segments, popcounts, block positions), plus the plan's per-block flags when the run
has a block cap. What comes back: each range's kept rows (pseudonyms and common bits), which the
node takes in range order: the rows of the thread path, in its order.

Security: the same cluster and TLS as the encoding's (``party.cluster.dask_client``): the
embedded cluster's throw-away certificates, or the party's own ``tls://`` scheduler with its CA
and client certificate and ``require_encryption``. The segments are this party's own and those its
peers sent it through the protocol; they reach only the party's own workers, live there only
while the comparison runs (every future is cancelled when it ends or fails) and leave the party
only through its node. No log or error names a segment, a pseudonym or a record.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import mmap
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from party.cluster import ClusterError, dask_client
from party.config import ClusterConfig
from party.encoding.parallel import scratch_folder
from party.protocol.errors import ComparisonCancelled
from party.protocol.pairwise import PairSide, PairTarget, kept_rows_of, side_rows
from party.protocol.spill import MemoryGauge
from party.protocol.threads import split_range

log = logging.getLogger(__name__)

#: ranges of a's rows per worker and pair of parties (equal rows: about equal pairs, since rows
#: are in pseudonym order, a random order of the records)
RANGES_PER_WORKER = 2
#: seconds between looks at the cancel event while a range's rows are awaited
POLL_S = 0.5
#: tmpfs room below which the embedded cluster's inputs go through Dask (a file that does not
#: fit falls back to Dask too)
SCRATCH_MIN_BYTES = 1 << 26
#: what a task needs of a's side and of b (``Mapped`` files)
SIDE_ARRAYS = ("keys", "segments", "pops", "positions")
TARGET_ARRAYS = ("keys", "segments", "pops", "starts", "rows")


def compact(x: np.ndarray) -> np.ndarray:
    """An int64 block index array as int32 when its values fit (half the bytes to send or map;
    the compiled loops take either)."""
    if x.dtype == np.int64 and (x.size == 0 or (int(x.min()) >= 0 and int(x.max()) < 2**31)):
        return x.astype(np.int32)
    return x


def target_arrays(target: PairTarget) -> PairTarget:
    """``target`` with its block index compacted (``compact``)."""
    return dataclasses.replace(target, starts=compact(target.starts), rows=compact(target.rows))


@dataclass(frozen=True)
class Mapped:
    """Named arrays written once to a file on tmpfs, which the embedded cluster's workers (on
    this machine) map read-only instead of receiving them through Dask; the file belongs to the
    comparison's private folder (0700), removed when it ends."""

    path: str
    column: int
    layout: tuple[tuple[str, str, tuple[int, ...], int], ...]  # name, dtype, shape, offset

    @classmethod
    def write(cls, folder: str, name: str, column: int, arrays: dict[str, np.ndarray]) -> Mapped:
        path = os.path.join(folder, name)
        layout = []
        at = 0
        with open(path, "wb") as fh:
            for key, x in arrays.items():
                x = np.ascontiguousarray(x)
                pad = -at % 64  # each array cache-line aligned
                fh.write(b"\0" * pad)
                at += pad
                layout.append((key, x.dtype.str, tuple(int(d) for d in x.shape), at))
                fh.write(x.data.cast("B"))
                at += int(x.nbytes)
        return cls(path, column, tuple(layout))

    @property
    def nbytes(self) -> int:
        return os.path.getsize(self.path)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays, mapped once per process (``forget_mapped`` drops them)."""
        got = _MAPPED.get(self.path)
        if got is None:
            with open(self.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                buf = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) if size else b""
            got = {}
            for key, dtype, shape, at in self.layout:
                count = int(np.prod(shape, dtype=np.int64))
                got[key] = np.frombuffer(buf, np.dtype(dtype), count, at).reshape(shape)
            _MAPPED[self.path] = got
        return got


_MAPPED: dict[str, dict[str, np.ndarray]] = {}  # a worker's mapped files, by path


def forget_mapped(folder: str) -> int:
    """Runs on a worker: unmap (drop) the files of ``folder`` it mapped; how many."""
    gone = [path for path in _MAPPED if os.path.dirname(path) == folder]
    for path in gone:
        del _MAPPED[path]
    return len(gone)


def kept_rows_mapped(
    side: Mapped,
    lo: int,
    hi: int,
    target: Mapped,
    whole: np.ndarray | None,
    table: np.ndarray,
    parties: int,
    max_pairs: int,
) -> tuple[list[np.ndarray], int, int]:
    """``kept_rows_of`` of a's rows [lo, hi) (``side``'s file) and b (``target``'s file)."""
    a, b = side.arrays(), target.arrays()
    rows = PairSide(side.column, a["keys"], a["segments"], a["pops"], a["positions"])
    pair_target = PairTarget(
        target.column, b["keys"], b["segments"], b["pops"], b["starts"], b["rows"]
    )
    return kept_rows_of(side_rows(rows, lo, hi), pair_target, whole, table, parties, max_pairs)


class ClusterPairs:
    """The kept rows of pairs of parties computed on a Dask client's workers (``submit`` every
    pair first, then ``kept_pairs`` of each in turn); a context manager that cancels every
    future it made when it exits.

    The inputs go to the workers through Dask (``client.scatter``: b's once to every worker,
    a's range to the worker of its task), or, with ``folder`` (a private folder on tmpfs, for
    the embedded cluster, whose workers run on this machine), as files written once per party
    that the workers map (``Mapped``): no copy through Dask's messages, no unpickling."""

    def __init__(
        self,
        client: Any,
        ranges_per_worker: int = RANGES_PER_WORKER,
        folder: str | None = None,
        memory: MemoryGauge | None = None,
    ) -> None:
        self.client = client
        self.workers = sorted(client.scheduler_info()["workers"])
        if not self.workers:
            raise ClusterError("cluster: the scheduler has no workers to compare on")
        self.ranges_per_worker = max(1, int(ranges_per_worker))
        self.folder = folder
        self.memory = memory  # the files' bytes are reserved there while they exist
        self._reserved = 0
        self._targets: dict[int, Any] = {}  # b's column -> its inputs on every worker
        self._files: dict[tuple[str, int], Mapped | None] = {}  # (side/target, column) -> file
        self._jobs: dict[tuple[int, int], list[tuple[str, Any]]] = {}
        self._futures: list[Any] = []  # every future made, cancelled on exit
        self.tasks = 0  # tasks made (the next one's worker: round robin)
        #: bytes sent to the workers (through Dask: b's inputs times the workers and a's
        #: ranges; with ``folder``: the files written) and received
        self.sent_bytes = 0
        self.received_bytes = 0
        self.mapped_bytes = 0  # of sent_bytes: in files

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel every future (the workers drop their copies of the inputs and rows) and have
        the workers unmap the files."""
        futures, self._futures = self._futures, []
        self._jobs.clear()
        self._targets.clear()
        if futures:
            self.client.cancel(futures)
        if self.folder is not None:
            for mapped in self._files.values():  # freed when the folder goes (the caller's)
                if mapped is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(mapped.path)
            self._files.clear()
            with contextlib.suppress(Exception):  # a worker that died maps nothing any more
                self.client.run(forget_mapped, self.folder)
        if self.memory is not None and self._reserved:
            self.memory.release(self._reserved)
        self._reserved = 0

    def _scatter(self, data: Any, workers: list[str] | None = None) -> Any:
        """``data`` on the given workers (None: every worker), as a future."""
        if workers is None:
            future = self.client.scatter(data, broadcast=True, hash=False)
        else:
            future = self.client.scatter(data, workers=workers, hash=False)
        self._futures.append(future)
        return future

    def _inputs(self, side_a: PairSide, target: PairTarget) -> tuple[Mapped, Mapped] | None:
        """a's and b's files (each written once per party), or None: without ``folder`` or if
        either does not fit in it (then the pair's inputs go through Dask)."""
        if self.folder is None:
            return None
        for column, kind, make in (
            (side_a.column, "side", lambda: side_a),
            (target.column, "target", lambda: target_arrays(target)),
        ):
            if (kind, column) not in self._files:
                source = make()
                keys = SIDE_ARRAYS if kind == "side" else TARGET_ARRAYS
                arrays = {key: getattr(source, key) for key in keys}
                self._files[(kind, column)] = self._write(f"{kind}-{column}", column, arrays)
        a, b = self._files[("side", side_a.column)], self._files[("target", target.column)]
        return None if a is None or b is None else (a, b)

    def _write(self, name: str, column: int, arrays: dict[str, np.ndarray]) -> Mapped | None:
        """The arrays in a file of ``folder``, its bytes reserved on ``memory``; None when the
        budget refuses them or tmpfs has no room for it (the file is removed)."""
        assert self.folder is not None
        need = sum(int(x.nbytes) + 64 for x in arrays.values())
        if self.memory is not None and not self.memory.try_reserve(need):
            return None
        try:
            mapped = Mapped.write(self.folder, name, column, arrays)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.folder, name))
            if self.memory is not None:
                self.memory.release(need)
            return None
        self._reserved += need if self.memory is not None else 0
        self.sent_bytes += mapped.nbytes
        self.mapped_bytes += mapped.nbytes
        return mapped

    def _target(self, target: PairTarget) -> Any:
        """b's inputs on every worker, through Dask (once per party)."""
        if target.column not in self._targets:
            compacted = target_arrays(target)
            self._targets[target.column] = self._scatter(compacted)
            self.sent_bytes += compacted.nbytes * len(self.workers)
        return self._targets[target.column]

    def submit(
        self,
        pair: tuple[int, int],
        side_a: PairSide,
        target: PairTarget,
        whole: np.ndarray | None,
        table: np.ndarray,
        parties: int,
        max_pairs: int,
    ) -> None:
        """Start the tasks of pair ``pair`` = (a, b): a's rows in ``len(workers) *
        ranges_per_worker`` ranges, round robin over the workers. b's ``target`` goes to every
        worker once (by its column) and ``whole`` (the plan's flags, None without a cap) with
        the pair's tasks."""
        files = self._inputs(side_a, target)
        b = self._target(target) if files is None else files[1]
        flags = None if whole is None else self._scatter(np.ascontiguousarray(whole))
        if whole is not None:
            self.sent_bytes += int(whole.nbytes) * len(self.workers)
        n = int(side_a.keys.shape[0])
        jobs: list[tuple[str, Any]] = []
        for lo, hi in split_range(n, len(self.workers) * self.ranges_per_worker):
            worker = self.workers[self.tasks % len(self.workers)]
            self.tasks += 1
            if files is None:
                rows = side_rows(side_a, lo, hi)
                arrays = (rows.keys, rows.segments, rows.pops, rows.positions)
                self.sent_bytes += sum(int(x.nbytes) for x in arrays)
                args: tuple[Any, ...] = (kept_rows_of, self._scatter(rows, [worker]))
            else:
                args = (kept_rows_mapped, files[0], lo, hi)
            future = self.client.submit(
                *args,
                b,
                flags,
                table,
                parties,
                max_pairs,
                workers=[worker],
                # a preference: if the worker is lost, another one runs the task again (its
                # inputs are a file's name, or data Dask still holds)
                allow_other_workers=True,
                pure=False,
            )
            self._futures.append(future)
            jobs.append((worker, future))
        self._jobs[pair] = jobs

    def kept_pairs(
        self, pair: tuple[int, int], cancel: threading.Event | None = None
    ) -> Iterator[tuple[list[np.ndarray], int, int]]:
        """The submitted pair's ranges in order, as ``PairPlan.kept_pairs`` yields its pieces:
        (kept rows, pairs counted once per whole block, kept pairs counted once per whole
        block). A range's future is released once its rows are here."""
        for worker, future in self._jobs.pop(pair, []):
            found, pairs, kept = self._result(pair, worker, future, cancel)
            self.received_bytes += sum(int(rows.nbytes) for rows in found)
            future.release()
            yield found, pairs, kept

    def _result(
        self, pair: tuple[int, int], worker: str, future: Any, cancel: threading.Event | None
    ) -> Any:
        """A task's result, looking at ``cancel`` every ``POLL_S`` seconds while it runs; a
        failed task (or a lost worker) is a ClusterError naming the worker and the error's type
        only."""
        from distributed import TimeoutError as DaskTimeout

        while True:
            if cancel is not None and cancel.is_set():
                raise ComparisonCancelled("comparison cancelled")
            try:
                return future.result(timeout=POLL_S)
            except (DaskTimeout, TimeoutError):
                continue
            except Exception as exc:  # noqa: BLE001 (the worker's error: its type only)
                a, b = pair
                raise ClusterError(
                    f"cluster: the comparison of parties {a} and {b} failed on worker {worker} "
                    f"({type(exc).__name__})"
                ) from None


@contextlib.contextmanager
def cluster_pairs(
    client: Any, embedded: bool, memory: MemoryGauge | None = None
) -> Iterator[ClusterPairs]:
    """A ClusterPairs on ``client``'s workers; an embedded cluster's (on this machine) get their
    inputs in files on tmpfs (``Mapped``, their bytes reserved on ``memory``), removed at the
    end."""
    with (
        scratch_folder(SCRATCH_MIN_BYTES, "pprl-compare-")
        if embedded
        else contextlib.nullcontext(None) as folder,
        ClusterPairs(client, folder=folder, memory=memory) as remote,
    ):
        yield remote


def compare_on_cluster(
    engine: Any,
    cluster: ClusterConfig,
    workers: int | None = None,
    progress: Any = None,
    cancel: threading.Event | None = None,
) -> Any:
    """``engine.compare(progress, cancel)`` with its pairs of parties on the party's Dask cluster
    (a ``PairEngine``; the embedded cluster: ``workers`` worker processes, started for this
    comparison and closed after it)."""
    try:
        with (
            dask_client(cluster, workers) as client,
            cluster_pairs(client, cluster.embedded, engine.memory) as remote,
        ):
            stats = engine.compare(progress, cancel, remote=remote)
    except ClusterError as exc:  # the party's own addresses and errors stay in its log
        log.error("the comparison on the party's Dask cluster failed: %s", exc)
        raise ClusterError(
            "its comparison on the party's Dask cluster failed (the party's log says where)"
        ) from None
    log.info(
        "compared on %d Dask workers: %d tasks, %.1f MB sent (%.1f MB of them in files the "
        "workers map), %.1f MB received",
        len(remote.workers),
        remote.tasks,
        remote.sent_bytes / 1e6,
        remote.mapped_bytes / 1e6,
        remote.received_bytes / 1e6,
    )
    return stats
