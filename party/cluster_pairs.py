"""The comparison's pairs of parties on the party's Dask workers (target any): ranges of a's rows.

With a ``[cluster]`` table a node compares on its cluster as it encodes there
(``cluster_tasks.compare_on_cluster``). The node still builds every party's inputs, block indexes and plans
(``PairEngine.compare``); for each pair of parties (a, b) it cuts a's rows into ranges, and each
range is one task (``pairwise.kept_rows_of``: row-driven, it reads only its rows' blocks of b's
index) on one worker. What goes to a worker: b's pseudonyms, segments, popcounts and block index
(``PairTarget``, once per worker for every pair b is in), and per task a's rows of its range
(pseudonyms, segments, popcounts, block positions), plus the plan's per-block flags when the run
has a block cap. What comes back: each range's kept rows (pseudonyms and common bits), which the
node takes in range order: the rows of the thread path, in its order.

How inputs reach the workers (through Dask, or files the embedded cluster's workers map), the
results, lost workers, errors and cleanup: ``party.cluster_tasks``.

Security: the same cluster and TLS as the encoding's (``party.cluster.dask_client``): the
embedded cluster's throw-away certificates, or the party's own ``tls://`` scheduler with its CA
and client certificate and ``require_encryption``. The segments are this party's own and those its
peers sent it through the protocol; they reach only the party's own workers, live there only
while the comparison runs (every future is cancelled when it ends or fails) and leave the party
only through its node. No log or error names a segment, a pseudonym or a record.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from party.cluster_tasks import ClusterTasks, Mapped, compact
from party.protocol.pairwise import PairSide, PairTarget, kept_rows_of, side_rows
from party.protocol.threads import split_range

#: a party's arrays in its files (``Mapped``): its rows (whichever role it has in a pair), its
#: block positions (as a), its block index (as b, int32 where it fits)
FILE_ARRAYS = {
    "rows": ("keys", "segments", "pops"),
    "positions": ("positions",),
    "index": ("starts", "rows"),
}


def target_arrays(target: PairTarget) -> PairTarget:
    """``target`` with its block index compacted (``compact``)."""
    return dataclasses.replace(target, starts=compact(target.starts), rows=compact(target.rows))


def kept_rows_mapped(
    a_files: tuple[Mapped, Mapped],
    lo: int,
    hi: int,
    b_files: tuple[Mapped, Mapped],
    whole: np.ndarray | None,
    table: np.ndarray,
    parties: int,
    max_pairs: int,
) -> tuple[list[np.ndarray], int, int]:
    """``kept_rows_of`` of a's rows [lo, hi) (its rows and positions files) and b (its rows and
    index files)."""
    (a_rows, a_positions), (b_rows, b_index) = a_files, b_files
    a, b = a_rows.arrays(), b_rows.arrays()
    side = PairSide(a_rows.column, a["keys"], a["segments"], a["pops"], **a_positions.arrays())
    index = b_index.arrays()
    target = PairTarget(
        b_rows.column, b["keys"], b["segments"], b["pops"], index["starts"], index["rows"]
    )
    return kept_rows_of(side_rows(side, lo, hi), target, whole, table, parties, max_pairs)


class ClusterPairs(ClusterTasks):
    """The kept rows of pairs of parties computed on a Dask client's workers (``submit`` every
    pair first, then ``kept_pairs`` of each in turn): b's inputs once per worker (on the embedded
    cluster files each party's arrays are written to once, ``FILE_ARRAYS``; else through Dask
    to every worker), a's rows per task (its range of the files, else through Dask to the
    task's worker)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._targets: dict[int, Any] = {}  # b's column -> its inputs on every worker
        self._mapped: dict[tuple[str, int], Mapped | None] = {}  # (kind, column) -> file
        self._jobs: dict[tuple[int, int], list[tuple[str, Any]]] = {}

    def close(self) -> None:
        self._jobs.clear()
        self._targets.clear()
        self._mapped.clear()
        super().close()

    def _inputs(
        self, side_a: PairSide, target: PairTarget
    ) -> tuple[tuple[Mapped, Mapped], tuple[Mapped, Mapped]] | None:
        """a's files (rows, positions) and b's (rows, index), each written once per party, or
        None: without ``folder`` or if any does not fit in it (then the pair's inputs go
        through Dask)."""
        if self.folder is None:
            return None
        a_rows, a_positions = self._file("rows", side_a), self._file("positions", side_a)
        b_rows, b_index = self._file("rows", target), self._file("index", target)
        if a_rows is None or a_positions is None or b_rows is None or b_index is None:
            return None
        return (a_rows, a_positions), (b_rows, b_index)

    def _file(self, kind: str, source: PairSide | PairTarget) -> Mapped | None:
        """The party's file of ``kind`` (``FILE_ARRAYS``), written at its first use."""
        if (kind, source.column) not in self._mapped:
            arrays = {key: getattr(source, key) for key in FILE_ARRAYS[kind]}
            if kind == "index":
                arrays = {key: compact(x) for key, x in arrays.items()}
            name = f"{kind}-{source.column}"
            self._mapped[(kind, source.column)] = self._write(name, source.column, arrays)
        return self._mapped[(kind, source.column)]

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
        ranges_per_worker`` ranges, round robin over the workers; ``whole`` (the plan's flags,
        None without a cap) to every worker with them."""
        files = self._inputs(side_a, target)
        b = self._target(target) if files is None else files[1]
        flags = None if whole is None else self._scatter(np.ascontiguousarray(whole))
        if whole is not None:
            self.sent_bytes += int(whole.nbytes) * len(self.workers)
        n = int(side_a.keys.shape[0])
        jobs: list[tuple[str, Any]] = []
        for lo, hi in split_range(n, len(self.workers) * self.ranges_per_worker):
            if files is None:
                rows = side_rows(side_a, lo, hi)
                arrays = (rows.keys, rows.segments, rows.pops, rows.positions)
                self.sent_bytes += sum(int(x.nbytes) for x in arrays)
                head: tuple[Any, ...] = (
                    kept_rows_of,
                    self._scatter(rows, [self.next_worker()]),
                )
            else:
                head = (kept_rows_mapped, files[0], lo, hi)
            jobs.append(self._submit(*head, b, flags, table, parties, max_pairs))
        self._jobs[pair] = jobs

    def kept_pairs(
        self, pair: tuple[int, int], cancel: threading.Event | None = None
    ) -> Iterator[tuple[list[np.ndarray], int, int]]:
        """The submitted pair's ranges in order, as ``PairPlan.kept_pairs`` yields its pieces:
        (kept rows, pairs counted once per whole block, kept pairs counted once per whole
        block)."""
        a, b = pair
        for worker, future in self._jobs.pop(pair, []):
            what = f"the comparison of parties {a} and {b}"
            found, pairs, kept = self._result(what, worker, future, cancel)
            self.received_bytes += sum(int(rows.nbytes) for rows in found)
            yield found, pairs, kept
