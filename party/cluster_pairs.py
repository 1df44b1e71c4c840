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

import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from party.cluster import ClusterError, dask_client
from party.config import ClusterConfig
from party.protocol.errors import ComparisonCancelled
from party.protocol.pairwise import PairSide, PairTarget, kept_rows_of, side_rows
from party.protocol.threads import split_range

log = logging.getLogger(__name__)

#: ranges of a's rows per worker and pair of parties (equal rows: about equal pairs, since rows
#: are in pseudonym order, a random order of the records)
RANGES_PER_WORKER = 2
#: seconds between looks at the cancel event while a range's rows are awaited
POLL_S = 0.5


class ClusterPairs:
    """The kept rows of pairs of parties computed on a Dask client's workers (``submit`` every
    pair first, then ``kept_pairs`` of each in turn); a context manager that cancels every
    future it made when it exits."""

    def __init__(self, client: Any, ranges_per_worker: int = RANGES_PER_WORKER) -> None:
        self.client = client
        self.workers = sorted(client.scheduler_info()["workers"])
        if not self.workers:
            raise ClusterError("cluster: the scheduler has no workers to compare on")
        self.ranges_per_worker = max(1, int(ranges_per_worker))
        self._targets: dict[int, Any] = {}  # b's column -> its PairTarget on every worker
        self._jobs: dict[tuple[int, int], list[tuple[str, Any]]] = {}
        self._futures: list[Any] = []  # every future made, cancelled on exit
        self.tasks = 0  # tasks made (the next one's worker: round robin)
        #: bytes sent to the workers (b's inputs times the workers, a's ranges) and received
        self.sent_bytes = 0
        self.received_bytes = 0

    def __enter__(self) -> ClusterPairs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel every future (the workers drop their copies of the inputs and rows)."""
        futures, self._futures = self._futures, []
        self._jobs.clear()
        self._targets.clear()
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
        ranges_per_worker`` ranges, round robin over the workers. b's ``target`` is sent to
        every worker once (by its column) and ``whole`` (the plan's flags, None without a cap)
        with the pair's first task on each worker."""
        if target.column not in self._targets:
            self._targets[target.column] = self._scatter(target)
            self.sent_bytes += target.nbytes * len(self.workers)
        flags = None if whole is None else self._scatter(np.ascontiguousarray(whole))
        if whole is not None:
            self.sent_bytes += int(whole.nbytes) * len(self.workers)
        n = int(side_a.keys.shape[0])
        jobs: list[tuple[str, Any]] = []
        for lo, hi in split_range(n, len(self.workers) * self.ranges_per_worker):
            worker = self.workers[self.tasks % len(self.workers)]
            self.tasks += 1
            rows = side_rows(side_a, lo, hi)
            self.sent_bytes += sum(
                int(x.nbytes) for x in (rows.keys, rows.segments, rows.pops, rows.positions)
            )
            piece = self._scatter(rows, [worker])
            future = self.client.submit(
                kept_rows_of,
                piece,
                self._targets[target.column],
                flags,
                table,
                parties,
                max_pairs,
                workers=[worker],
                allow_other_workers=False,
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
    with dask_client(cluster, workers) as client, ClusterPairs(client) as remote:
        stats = engine.compare(progress, cancel, remote=remote)
        log.info(
            "compared on %d Dask workers: %d tasks, %.1f MB sent, %.1f MB received",
            len(remote.workers),
            remote.tasks,
            remote.sent_bytes / 1e6,
            remote.received_bytes / 1e6,
        )
        return stats
