"""One comparison's tasks on the party's Dask workers: inputs sent or mapped, results in order, cleanup.

The common part of ``party.cluster_pairs`` (target any: pairs of parties in ranges of blocks and
buckets of a's rows) and ``party.cluster_blocks`` (target all: ranges of fast blocks). Inputs reach
the workers through Dask (``client.scatter``) or, on the embedded cluster (its workers run on the
node's machine), in files of a private tmpfs folder that they map read-only (``Mapped``), their
bytes reserved on the node's memory budget while they exist (through Dask when it refuses them or
tmpfs has no room). A task's worker is a preference: if it is lost, another worker runs the task
again from the files (inputs Dask held only there are lost: a ClusterError). On the embedded
cluster with more workers than the machine has cores, a task first takes one of ``slots`` slots
(``gated``: a lock on one of the folder's slot files), so no more tasks run at once than the cores
(4 workers on 2 cores would otherwise time-slice, each task's CPU growing with the switching);
a scheduler address is not gated. Results are taken in
submission order with the node's cancel event looked at every ``POLL_S`` seconds; every future is
cancelled, every file unmapped by the workers and removed, and every reservation released when the
comparison ends or fails. Errors name the worker and the error's type only, never data; the
coordinator gets a reason without the party's addresses (``compare_on_cluster``).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import mmap
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

from party.cluster import ClusterError, dask_client
from party.config import ClusterConfig
from party.encoding.parallel import available_cores, scratch_folder
from party.protocol.errors import ComparisonCancelled
from party.protocol.spill import MemoryGauge

log = logging.getLogger(__name__)

#: ranges per worker (of a's rows for a pair of parties, or of fast blocks)
RANGES_PER_WORKER = 2
#: seconds between looks at the cancel event while a range's rows are awaited
POLL_S = 0.5
#: seconds a comparison waits for a worker when the scheduler has none (one restarting)
WORKERS_WAIT_S = 30
#: tmpfs room below which the embedded cluster's inputs go through Dask (a file that does not
#: fit falls back to Dask too)
SCRATCH_MIN_BYTES = 1 << 26
#: seconds between a waiting task's looks for a free slot (``gated``; tasks take 30 ms and more)
SLOT_POLL_S = 0.002


def compact(x: np.ndarray) -> np.ndarray:
    """An int64 block index array as int32 when its values fit (half the bytes to send or map;
    the compiled loops take either)."""
    if x.dtype == np.int64 and (x.size == 0 or (int(x.min()) >= 0 and int(x.max()) < 2**31)):
        return x.astype(np.int32)
    return x


@dataclass(frozen=True)
class Mapped:
    """Named arrays written once to a file on tmpfs, which the embedded cluster's workers (on
    this machine) map read-only instead of receiving them through Dask; the file belongs to the
    comparison's private folder (0700) and is removed when it ends."""

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


class CoreSlots:
    """The ``slots`` slot files ``slot-<i>`` of ``folder``, which every worker on the machine
    sees, open for as long as this object lives (an actor holds one for its life: held open, the
    slot's share of its calls' CPU in compute party 0's circuit fell from 3.7% to 2.1% under
    cProfile). ``hold`` takes a slot: an exclusive ``flock`` on its file. A dead holder's locks go with
    its process; the files close when the object is collected or ``close``d."""

    def __init__(self, folder: str, slots: int) -> None:
        self._paths = [os.path.join(folder, f"slot-{i}") for i in range(slots)]
        fds: list[int] = []
        try:
            for path in self._paths:
                fds.append(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        except OSError:
            _close_all(fds)
            raise
        self._fds = fds
        self._one_at_a_time = threading.Lock()  # one flock owner: this object's descriptors
        self._closer = weakref.finalize(self, _close_all, fds)

    @contextlib.contextmanager
    def hold(self) -> Iterator[int]:
        """Hold one of the slots until the block ends; waits, polling every ``SLOT_POLL_S``
        seconds, while all are held, and gives up (FileNotFoundError) once the files are gone:
        the comparison ended (``ClusterTasks.close`` removes them) and a task still waiting
        would only run for nothing. Yields the slot's number."""
        slots = len(self._fds)
        with self._one_at_a_time:
            held = -1
            first = os.getpid() % slots  # workers try the slots in different orders
            while held < 0:
                for i in (*range(first, slots), *range(first)):
                    try:
                        fcntl.flock(self._fds[i], fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue
                    held = i
                    break
                else:
                    if not os.path.exists(self._paths[0]):
                        raise FileNotFoundError("the comparison's slot files are gone (it ended)")
                    time.sleep(SLOT_POLL_S)
            try:
                yield held
            finally:
                fcntl.flock(self._fds[held], fcntl.LOCK_UN)

    def close(self) -> None:
        self._closer()


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
    fds.clear()


@contextlib.contextmanager
def core_slot(folder: str, slots: int) -> Iterator[int]:
    """Hold one of ``slots`` slots of ``folder`` (``CoreSlots.hold``) until the block ends,
    the files opened for it alone; yields the slot's number."""
    files = CoreSlots(folder, slots)
    try:
        with files.hold() as held:
            yield held
    finally:
        files.close()


def gated(folder: str, slots: int, fn: Callable[..., Any], *args: Any) -> Any:
    """Runs on a worker: ``fn(*args)`` while holding one of the slots (``core_slot``). Dask
    starts a task only once its inputs are done, so a task never holds a slot while it waits
    for another task: the wait cannot deadlock."""
    with core_slot(folder, slots):
        return fn(*args)


class ClusterTasks:
    """A comparison's tasks on a Dask client's workers (module docstring); a context manager
    that cancels every future it made, and removes its files, when it exits."""

    def __init__(
        self,
        client: Any,
        ranges_per_worker: int = RANGES_PER_WORKER,
        folder: str | None = None,
        memory: MemoryGauge | None = None,
        slots: int | None = None,
    ) -> None:
        self.client = client
        self.workers = sorted(client.scheduler_info()["workers"])
        if not self.workers:  # a worker restarting (its nanny starts it again): wait for one
            with contextlib.suppress(OSError, TimeoutError):
                client.wait_for_workers(1, timeout=WORKERS_WAIT_S)
            self.workers = sorted(client.scheduler_info()["workers"])
        if not self.workers:
            raise ClusterError("cluster: the scheduler has no workers to compare on")
        self.ranges_per_worker = max(1, int(ranges_per_worker))
        self.folder = folder
        self.memory = memory  # the files' bytes are reserved there while they exist
        if slots is None and folder is not None:  # the embedded cluster: this machine's cores
            slots = available_cores()
        #: tasks at once at most (``gated``), None: not gated (a scheduler address, or no more
        #: workers than slots)
        self.slots = (
            slots
            if folder is not None and slots is not None and slots < len(self.workers)
            else None
        )
        self._reserved = 0
        self._paths: list[str] = []  # files of ``folder`` made for this comparison
        self._file_bytes: dict[str, int] = {}  # what ``_write`` reserved for each of its files
        self._futures: list[Any] = []  # every future made, cancelled on exit
        self.tasks = 0  # tasks made (the next one's worker: round robin)
        #: bytes sent to the workers (through Dask: what every worker gets times the workers,
        #: and each task's own; with ``folder``: the files written) and received
        self.sent_bytes = 0
        self.received_bytes = 0
        self.mapped_bytes = 0  # of sent_bytes: in files
        self.shuffled_bytes = 0  # from task to task (files or Dask)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel every future (the workers drop their copies of the inputs and rows), have the
        workers unmap the files, remove them and release their reservation."""
        futures, self._futures = self._futures, []
        if futures:
            self.client.cancel(futures)
        if self.folder is not None:
            self._remove(self._paths, 0)  # freed now, not when the folder goes (the caller's)
            for i in range(self.slots or 0):  # a task still waiting holds them open: harmless
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.folder, f"slot-{i}"))
            with contextlib.suppress(Exception):  # a worker that died maps nothing any more
                self.client.run(forget_mapped, self.folder)
        if self.memory is not None and self._reserved:
            self.memory.release(self._reserved)
        self._reserved = 0

    def _reserve(self, nbytes: int) -> bool:
        """Reserve ``nbytes`` of files on ``memory`` (True without a budget), held until
        ``_remove`` or ``close``."""
        if self.memory is not None:
            if not self.memory.try_reserve(nbytes):
                return False
            self._reserved += nbytes
        return True

    def _remove(self, paths: list[str], nbytes: int) -> None:
        """Remove the files ``paths`` (gone already: nothing to do) and release ``nbytes`` of
        their reservation."""
        for path in paths:
            with contextlib.suppress(OSError):
                os.unlink(path)
        gone = set(paths)
        self._paths = [path for path in self._paths if path not in gone]
        if self.memory is not None and nbytes:
            self.memory.release(nbytes)
            self._reserved -= nbytes

    def _scatter(self, data: Any, workers: list[str] | None = None) -> Any:
        """``data`` on each of the given workers (None: every worker), as a future."""
        future = self.client.scatter(data, workers=workers, broadcast=True, hash=False)
        self._futures.append(future)
        return future

    def _write(self, name: str, column: int, arrays: dict[str, np.ndarray]) -> Mapped | None:
        """The arrays in a file of ``folder``, its bytes reserved on ``memory``; None without a
        folder, or when the budget refuses them or tmpfs has no room (the file is removed)."""
        if self.folder is None:
            return None
        need = sum(int(x.nbytes) + 64 for x in arrays.values())
        if not self._reserve(need):
            return None
        path = os.path.join(self.folder, name)
        self._paths.append(path)
        self._file_bytes[path] = need
        try:
            mapped = Mapped.write(self.folder, name, column, arrays)
        except OSError:
            self._unwrite(path)
            return None
        self.sent_bytes += mapped.nbytes
        self.mapped_bytes += mapped.nbytes
        return mapped

    def _unwrite(self, path: str) -> None:
        """Remove a file of ``_write`` and release its reservation (inputs sent otherwise)."""
        self._remove([path], self._file_bytes.pop(path, 0))

    def _drop(self, mapped: Mapped) -> None:
        """``_unwrite`` a file ``_write`` made, and no longer count it as sent."""
        self.sent_bytes -= mapped.nbytes
        self.mapped_bytes -= mapped.nbytes
        self._unwrite(mapped.path)

    def _submit(self, fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
        """``fn(*args)`` on the next worker (round robin): (the worker, the future). The worker
        is a preference: if it is lost, another one runs the task again (its inputs are a
        file's name, or data Dask still holds)."""
        worker = self.workers[self.tasks % len(self.workers)]
        self.tasks += 1
        if self.slots is not None:
            fn, args = gated, (self.folder, self.slots, fn, *args)
        future = self.client.submit(
            fn, *args, workers=[worker], allow_other_workers=True, pure=False
        )
        self._futures.append(future)
        return worker, future

    def next_worker(self) -> str:
        """The worker the next ``_submit`` prefers (for inputs sent to it beforehand)."""
        return str(self.workers[self.tasks % len(self.workers)])

    def _result(
        self,
        what: str,
        worker: str,
        future: Any,
        cancel: threading.Event | None,
        *,
        cancelled: Callable[[], Exception] | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> Any:
        """A task's (or an actor call's) result, then its future released, looking at ``cancel``
        every ``POLL_S`` seconds while it runs (set: ``cancelled()``, by default
        ComparisonCancelled) and calling ``waiting()`` between the looks; a failed task (or a
        lost worker) is a ClusterError naming ``what``, the worker and the error's type only."""
        while True:
            if cancel is not None and cancel.is_set():
                raise (
                    ComparisonCancelled("comparison cancelled")
                    if cancelled is None
                    else cancelled()
                )
            try:
                result = future.result(timeout=POLL_S)
            except Exception as exc:  # noqa: BLE001 (the worker's error: its type only)
                if isinstance(exc, TimeoutError) or type(exc).__name__ == "TimeoutError":
                    if waiting is not None:  # Dask's own timeout too
                        waiting()
                    continue
                raise ClusterError(
                    f"cluster: {what} failed on worker {worker} ({type(exc).__name__})"
                ) from None
            release = getattr(future, "release", None)  # an actor call's future has none
            if release is not None:
                release()
            return result


@contextlib.contextmanager
def cluster_tasks(
    kind: Callable[..., ClusterTasks], client: Any, embedded: bool, memory: MemoryGauge | None
) -> Iterator[Any]:
    """A ``kind`` (ClusterPairs, ClusterBlocks) on ``client``'s workers; an embedded cluster's
    (on this machine) get their inputs in files of a private tmpfs folder (``Mapped``, their
    bytes reserved on ``memory``), removed at the end."""
    with (
        scratch_folder(SCRATCH_MIN_BYTES, "pprl-compare-")
        if embedded
        else contextlib.nullcontext(None) as folder,
        kind(client, folder=folder, memory=memory) as remote,
    ):
        yield remote


def compare_on_cluster(
    kind: Callable[..., ClusterTasks],
    engine: Any,
    cluster: ClusterConfig,
    workers: int | None = None,
    progress: Any = None,
    cancel: threading.Event | None = None,
    *,
    connect_timeout: float = 60.0,
) -> Any:
    """``engine.compare(progress, cancel, remote=...)`` with a ``kind`` on the party's Dask
    cluster (the embedded cluster: ``workers`` worker processes, started for this comparison
    and closed after it; a scheduler address: reached within ``connect_timeout`` seconds)."""
    try:
        with (
            dask_client(cluster, workers, connect_timeout=connect_timeout) as client,
            cluster_tasks(kind, client, cluster.embedded, engine.memory) as remote,
        ):
            stats = engine.compare(progress, cancel, remote=remote)
    except ClusterError as exc:  # the party's own addresses and errors stay in its log
        log.error("the comparison on the party's Dask cluster failed: %s", exc)
        raise ClusterError(
            "its comparison on the party's Dask cluster failed (the party's log says where)"
        ) from None
    log.info(
        "compared on %d Dask workers: %d tasks, %.1f MB sent (%.1f MB of them in files the "
        "workers map), %.1f MB from task to task, %.1f MB received",
        len(remote.workers),
        remote.tasks,
        remote.sent_bytes / 1e6,
        remote.mapped_bytes / 1e6,
        remote.shuffled_bytes / 1e6,
        remote.received_bytes / 1e6,
    )
    return stats
