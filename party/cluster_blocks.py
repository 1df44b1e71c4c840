"""The comparison's fast blocks (target all) on the party's Dask workers: ranges of consecutive blocks.

With a ``[cluster]`` table a node compares on its cluster as it encodes there
(``cluster_tasks.compare_on_cluster``). The node still builds every party's inputs, block indexes and the
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

How inputs reach the workers, the results, lost workers, errors and cleanup:
``party.cluster_tasks``. Security: as ``party.cluster_pairs``: the same cluster and TLS as the encoding's; the segments
reach only the party's own workers, live there only while the comparison runs (every future is
cancelled and the file unmapped and removed when it ends or fails) and leave the party only
through its node. On the embedded cluster the file's bytes are reserved on the node's memory
budget while it exists (through Dask when refused). No log or error names a segment, a
pseudonym or a record.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from party.cluster_tasks import ClusterTasks, Mapped, compact
from party.protocol.block_ranges import FastIndex, FastInputs, fast_range_rows
from party.protocol.kernel import StageCounts

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


class ClusterBlocks(ClusterTasks):
    """Ranges of fast blocks compared on a Dask client's workers (``submit`` them all, then
    ``results`` in order): every party's inputs and the whole index in one file on the embedded
    cluster, else the inputs through Dask to every worker and each range's slices of the index
    to its worker."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._jobs: list[tuple[str, Any]] = []

    @property
    def parts(self) -> int:
        """Ranges wanted: ``ranges_per_worker`` per worker."""
        return len(self.workers) * self.ranges_per_worker

    def close(self) -> None:
        self._jobs.clear()
        super().close()

    def submit(self, inputs: FastInputs, index: FastIndex, ranges: list[tuple[int, int]]) -> None:
        """Start every range's task, round robin over the workers: with ``folder``, the inputs
        and the whole index (32-bit where they fit) in one file the workers map (``Mapped``);
        else (or when it has no room) ``inputs`` through Dask to every worker once and each
        range's slices of the index (``index.range``) to its worker only."""
        if not ranges:
            return
        arrays: dict[str, np.ndarray] = {"fast": index.fast}
        for k in range(len(inputs.segs)):
            arrays |= {f"segs{k}": inputs.segs[k], f"pops{k}": inputs.pops[k]}
            arrays |= {f"keys{k}": inputs.keys[k], f"starts{k}": compact(index.starts[k])}
            arrays[f"rows{k}"] = compact(index.rows[k])
        # a new name each time: never a file a worker may still map
        mapped = self._write(f"blocks-{next(_FILES)}", 0, arrays) if self.folder else None
        del arrays
        shared = self._scatter(inputs) if mapped is None else None
        if mapped is None:
            self.sent_bytes += inputs.nbytes * len(self.workers)
        for lo, hi in ranges:
            if mapped is None:
                piece = index.range(lo, hi)
                self.sent_bytes += piece.nbytes
                head: tuple[Any, ...] = (shared, self._scatter(piece, [self.next_worker()]))
                self._jobs.append(self._submit(fast_range_rows, *head))
            else:
                what = (inputs.columns, inputs.seg_bits, inputs.threshold)
                self._jobs.append(self._submit(fast_rows_mapped, mapped, lo, hi, *what))

    def results(
        self, cancel: threading.Event | None = None
    ) -> Iterator[tuple[np.ndarray, StageCounts]]:
        """The submitted ranges' (ring rows, stage counts) in order."""
        jobs, self._jobs = self._jobs, []
        for k, (worker, future) in enumerate(jobs):
            rows, counts = self._result(f"the range {k} of blocks", worker, future, cancel)
            self.received_bytes += int(rows.nbytes)
            yield rows, counts
