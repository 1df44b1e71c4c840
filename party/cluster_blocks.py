"""The comparison's fast blocks (target all) on the party's Dask workers: ranges of consecutive blocks.

With a ``[cluster]`` table a node compares on its cluster as it encodes there
(``compare_on_cluster``). The node still builds every party's inputs, block indexes and the
block plan (``PartyEngine.compare``); it cuts the fast blocks into ranges of consecutive blocks
of about equal candidate sets (``ranges_per_worker`` per worker, more if the budget's batch is
smaller), and each range is one task (``block_ranges.fast_range_rows``) on one worker, round
robin. What goes to a worker: every party's segments, popcounts and pseudonyms (``FastInputs``, once
per worker), and per task its blocks' slices of every party's block index
(``FastRange``), through Dask; the embedded cluster's workers (on the node's machine) instead map
all of it from one file on tmpfs written once (``cluster_pairs.Mapped``) and get only their
range's bounds. What comes back: each range's distinct surviving sets as ring rows and its
stage counts, which the node appends to its survivor store in range order (the store sorts and
drops repeats: the thread path's survivors and stats). The sub-blocked and large blocks stay on
the node's threads, compared while the workers run.

Security: as ``party.cluster_pairs``: the same cluster and TLS as the encoding's; the segments
reach only the party's own workers, live there only while the comparison runs (every future is
cancelled and the file unmapped and removed when it ends or fails) and leave the party only
through its node. On the embedded cluster the file's bytes are reserved on the node's memory
budget while it exists (through Dask when refused). No log or error names a segment, a
pseudonym or a record.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any, Self

import numpy as np

from party.cluster import ClusterError, dask_client
from party.cluster_pairs import (
    POLL_S,
    RANGES_PER_WORKER,
    SCRATCH_MIN_BYTES,
    Mapped,
    compact,
    forget_mapped,
)
from party.config import ClusterConfig
from party.encoding.parallel import scratch_folder
from party.protocol.block_ranges import FastIndex, FastInputs, fast_range_rows
from party.protocol.errors import ComparisonCancelled
from party.protocol.kernel import StageCounts
from party.protocol.spill import MemoryGauge

log = logging.getLogger(__name__)

_FILES = itertools.count()  # numbers of this process's files of inputs


def fast_rows_mapped(
    mapped: Mapped, lo: int, hi: int, columns: np.ndarray, seg_bits: int, threshold: float
) -> tuple[np.ndarray, StageCounts]:
    """``fast_range_rows`` of blocks [lo, hi), every input read from ``mapped``'s file."""
    a = mapped.arrays()
    p = int(columns.size)
    inputs = FastInputs(
        tuple(a[f"segs{k}"] for k in range(p)),
        tuple(a[f"pops{k}"] for k in range(p)),
        tuple(a[f"keys{k}"] for k in range(p)),
        columns,
        seg_bits,
        threshold,
    )
    starts = tuple(a[f"starts{k}"] for k in range(p))
    index = FastIndex(starts, tuple(a[f"rows{k}"] for k in range(p)), a["fast"])
    return fast_range_rows(inputs, index.range(lo, hi))


class ClusterBlocks:
    """Ranges of fast blocks compared on a Dask client's workers (``submit`` them all, then
    ``results`` in order; a task's worker is a preference: a lost worker's tasks on the mapped
    file run again elsewhere, through Dask its lost ranges are a ClusterError); a context
    manager that cancels every future it made when it exits."""

    def __init__(
        self,
        client: Any,
        ranges_per_worker: int = RANGES_PER_WORKER,
        folder: str | None = None,
        memory: MemoryGauge | None = None,
    ) -> None:
        self.client = client
        self.folder = folder
        self.memory = memory  # the file's bytes are reserved there while it exists
        self._reserved = 0
        self._file: Mapped | None = None
        self.workers = sorted(client.scheduler_info()["workers"])
        if not self.workers:
            raise ClusterError("cluster: the scheduler has no workers to compare on")
        self.ranges_per_worker = max(1, int(ranges_per_worker))
        self._jobs: list[tuple[str, Any]] = []
        self._futures: list[Any] = []  # every future made, cancelled on exit
        self.tasks = 0  # tasks made (the next one's worker: round robin)
        #: bytes sent to the workers (through Dask: the inputs times the workers and each
        #: range's own; with ``folder``: the file written) and received
        self.sent_bytes = 0
        self.received_bytes = 0
        self.mapped_bytes = 0  # of sent_bytes: in the file

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def parts(self) -> int:
        """Ranges wanted: ``ranges_per_worker`` per worker."""
        return len(self.workers) * self.ranges_per_worker

    def close(self) -> None:
        """Cancel every future (the workers drop their copies of the inputs and rows), have the
        workers unmap the file, remove it and release its reservation."""
        futures, self._futures = self._futures, []
        self._jobs.clear()
        if futures:
            self.client.cancel(futures)
        if self.folder is not None:
            if self._file is not None:  # freed now, not when the folder goes (the caller's)
                with contextlib.suppress(OSError):
                    os.unlink(self._file.path)
                self._file = None
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

    def submit(self, inputs: FastInputs, index: FastIndex, ranges: list[tuple[int, int]]) -> None:
        """Start every range's task, round robin over the workers: with ``folder``, the inputs
        and the whole index in one file the workers map (``Mapped``); else (or when it has no
        room) ``inputs`` through Dask to every worker once and each range's slices of the index
        (``index.range``) to its worker only."""
        if not ranges:
            return
        mapped = None if self.folder is None else self._write(inputs, index)
        shared = self._scatter(inputs) if mapped is None else None
        if mapped is None:
            self.sent_bytes += inputs.nbytes * len(self.workers)
        for lo, hi in ranges:
            worker = self.workers[self.tasks % len(self.workers)]
            self.tasks += 1
            if mapped is None:
                piece = index.range(lo, hi)
                self.sent_bytes += piece.nbytes
                args: tuple[Any, ...] = (fast_range_rows, shared, self._scatter(piece, [worker]))
            else:
                what = (inputs.columns, inputs.seg_bits, inputs.threshold)
                args = (fast_rows_mapped, mapped, lo, hi, *what)
            # a preference: if the worker is lost, another one runs the task again (its inputs
            # are a file's name, or data Dask still holds)
            future = self.client.submit(
                *args, workers=[worker], allow_other_workers=True, pure=False
            )
            self._futures.append(future)
            self._jobs.append((worker, future))

    def _write(self, inputs: FastInputs, index: FastIndex) -> Mapped | None:
        """The inputs and the index (32-bit where they fit) in a file of ``folder``, its bytes
        reserved on ``memory``; None when the budget refuses them or tmpfs has no room for it
        (the file is removed)."""
        assert self.folder is not None
        arrays: dict[str, np.ndarray] = {"fast": index.fast}
        for k in range(len(inputs.segs)):
            arrays |= {f"segs{k}": inputs.segs[k], f"pops{k}": inputs.pops[k]}
            arrays |= {f"keys{k}": inputs.keys[k], f"starts{k}": compact(index.starts[k])}
            arrays[f"rows{k}"] = compact(index.rows[k])
        name = f"blocks-{next(_FILES)}"  # never a file a worker may still map
        need = sum(int(x.nbytes) + 64 for x in arrays.values())
        if self.memory is not None and not self.memory.try_reserve(need):
            return None
        try:
            mapped = Mapped.write(self.folder, name, 0, arrays)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.folder, name))
            if self.memory is not None:
                self.memory.release(need)
            return None
        self._reserved += need if self.memory is not None else 0
        self._file = mapped
        self.sent_bytes += mapped.nbytes
        self.mapped_bytes += mapped.nbytes
        return mapped

    def results(
        self, cancel: threading.Event | None = None
    ) -> Iterator[tuple[np.ndarray, StageCounts]]:
        """The submitted ranges' (ring rows, stage counts) in order; a range's future is
        released once its rows are here."""
        jobs, self._jobs = self._jobs, []
        for k, (worker, future) in enumerate(jobs):
            rows, counts = self._result(k, worker, future, cancel)
            self.received_bytes += int(rows.nbytes)
            future.release()
            yield rows, counts

    def _result(self, k: int, worker: str, future: Any, cancel: threading.Event | None) -> Any:
        """Range k's result, looking at ``cancel`` every ``POLL_S`` seconds while it runs; a
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
                raise ClusterError(
                    f"cluster: the range {k} of blocks failed on worker {worker} "
                    f"({type(exc).__name__})"
                ) from None


@contextlib.contextmanager
def cluster_blocks(
    client: Any, embedded: bool, memory: MemoryGauge | None = None
) -> Iterator[ClusterBlocks]:
    """A ClusterBlocks on ``client``'s workers; an embedded cluster's (on this machine) map
    their inputs from a file on tmpfs (``Mapped``, its bytes reserved on ``memory``), removed
    at the end."""
    with (
        scratch_folder(SCRATCH_MIN_BYTES, "pprl-compare-")
        if embedded
        else contextlib.nullcontext(None) as folder,
        ClusterBlocks(client, folder=folder, memory=memory) as remote,
    ):
        yield remote


def compare_on_cluster(
    engine: Any,
    cluster: ClusterConfig,
    workers: int | None = None,
    progress: Any = None,
    cancel: threading.Event | None = None,
) -> Any:
    """``engine.compare(progress, cancel)`` with its fast blocks on the party's Dask cluster (a
    ``PartyEngine``; the embedded cluster: ``workers`` worker processes, started for this
    comparison and closed after it)."""
    try:
        with (
            dask_client(cluster, workers) as client,
            cluster_blocks(client, cluster.embedded, engine.memory) as remote,
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
