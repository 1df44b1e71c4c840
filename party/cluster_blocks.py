"""The comparison's fast blocks (target all) on the party's Dask workers: ranges of consecutive blocks.

With a ``[cluster]`` table a node compares on its cluster as it encodes there
(``compare_on_cluster``). The node still builds every party's inputs, block indexes and the
block plan (``PartyEngine.compare``); it cuts the fast blocks into ranges of consecutive blocks
of about equal candidate sets (about ``ranges_per_worker`` per worker, none beyond the budget's
batch), and each range is one task (``block_ranges.fast_range_rows``) on one worker, round
robin. What goes to a worker: every party's segments, popcounts, block-index rows and pseudonyms
(``FastInputs``, once per worker), and per task the plan's columns of its blocks
(``FastRange``). What comes back: each range's distinct surviving sets as ring rows and its
stage counts, which the node appends to its survivor store in range order (the store sorts and
drops repeats: the thread path's survivors and stats). The sub-blocked and large blocks stay on
the node's threads, compared while the workers run.

Security: as ``party.cluster_pairs``: the same cluster and TLS as the encoding's; the segments
reach only the party's own workers, live there only while the comparison runs (every future is
cancelled when it ends or fails) and leave the party only through its node. No log or error
names a segment, a pseudonym or a record.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from party.cluster import ClusterError, dask_client
from party.cluster_pairs import POLL_S, RANGES_PER_WORKER
from party.config import ClusterConfig
from party.protocol.block_ranges import FastInputs, FastRange, fast_range_rows
from party.protocol.errors import ComparisonCancelled
from party.protocol.kernel import StageCounts

log = logging.getLogger(__name__)


class ClusterBlocks:
    """Ranges of fast blocks compared on a Dask client's workers (``submit`` them all, then
    ``results`` in order); a context manager that cancels every future it made when it exits."""

    def __init__(self, client: Any, ranges_per_worker: int = RANGES_PER_WORKER) -> None:
        self.client = client
        self.workers = sorted(client.scheduler_info()["workers"])
        if not self.workers:
            raise ClusterError("cluster: the scheduler has no workers to compare on")
        self.ranges_per_worker = max(1, int(ranges_per_worker))
        self._jobs: list[tuple[str, Any]] = []
        self._futures: list[Any] = []  # every future made, cancelled on exit
        self.tasks = 0  # tasks made (the next one's worker: round robin)
        #: bytes sent to the workers (the inputs times the workers, each range's own) and received
        self.sent_bytes = 0
        self.received_bytes = 0

    def __enter__(self) -> ClusterBlocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def parts(self) -> int:
        """Ranges wanted: ``ranges_per_worker`` per worker."""
        return len(self.workers) * self.ranges_per_worker

    def close(self) -> None:
        """Cancel every future (the workers drop their copies of the inputs and rows)."""
        futures, self._futures = self._futures, []
        self._jobs.clear()
        if futures:
            self.client.cancel(futures)

    def _scatter(self, data: Any, workers: list[str] | None = None) -> Any:
        """``data`` on the given workers (None: every worker), as a future."""
        if workers is None:
            future = self.client.scatter(data, broadcast=True, hash=False)
        else:
            future = self.client.scatter(data, workers=workers, hash=False)
        self._futures.append(future)
        return future

    def submit(self, inputs: FastInputs, pieces: list[FastRange]) -> None:
        """Start every range's task, round robin over the workers; ``inputs`` go to every worker
        once, each range's index slices to its worker only."""
        if not pieces:
            return
        shared = self._scatter(inputs)
        self.sent_bytes += inputs.nbytes * len(self.workers)
        for piece in pieces:
            worker = self.workers[self.tasks % len(self.workers)]
            self.tasks += 1
            self.sent_bytes += piece.nbytes
            own = self._scatter(piece, [worker])
            future = self.client.submit(
                fast_range_rows,
                shared,
                own,
                workers=[worker],
                allow_other_workers=False,
                pure=False,
            )
            self._futures.append(future)
            self._jobs.append((worker, future))

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
    with dask_client(cluster, workers) as client, ClusterBlocks(client) as remote:
        stats = engine.compare(progress, cancel, remote=remote)
        log.info(
            "compared on %d Dask workers: %d tasks, %.1f MB sent, %.1f MB received",
            len(remote.workers),
            remote.tasks,
            remote.sent_bytes / 1e6,
            remote.received_bytes / 1e6,
        )
        return stats
