"""The workers a party node computes on: its own cores, or a Dask cluster the party runs itself.

Without a ``[cluster]`` table a node encodes on a process pool of ``[limits] workers`` processes
and compares on as many threads (``party.encoding.parallel``, ``party.protocol.kernel``). With one,
encoding goes to Dask (``distributed``) workers, the same code path as the process pool: each
worker is one lane (``dask_lanes``: a ``concurrent.futures`` executor of the client pinned to that
worker), so first sight of the values is shared out among the workers and every worker keeps the
memo tables of its lane (``party.encoding.first_sight``):

- ``scheduler = "local"``: an embedded ``LocalCluster`` of ``workers`` worker processes on
  127.0.0.1 (forked from a forkserver with Dask and the encoder loaded, ``_forkserver``),
  started for one encoding and closed after it; its scheduler, workers and client talk
  TLS with throw-away certificates (``Security.temporary()``); at most as many of its tasks run
  at once as this machine has cores (``GatedLane``).
- ``scheduler = "tls://host:port"``: the party's own scheduler. Only ``tls://`` is accepted, with
  the party's cluster CA and the node's client certificate and key, and ``require_encryption``;
  workers must have this package installed (they import ``party.encoding`` and
  ``party.protocol``).

The comparison goes to the same cluster (``party.cluster_tasks``: the pairs of parties of
target any, ``party.cluster_pairs``; the fast blocks of target all, ``party.cluster_blocks``), and
so does a compute party's mpc3 circuit (``party.cluster_mpc``: a window's batches on the workers).

What goes to a worker: the linkage schema, the linkage secret (each worker builds the same
encoder) and batches of the party's own CSV; what comes back: filters and blocking digests (for
the comparison: segments, pseudonyms and block indexes in, kept rows out). Both stay inside the
party's infrastructure: the scheduler and workers are the party's own machines,
and nothing else. No co-party and no coordinator ever talks to them; encodings, segments and
shares leave the party only through its node, over the protocol.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from party.cluster_waves import WaveLanes
from party.config import ClusterConfig
from party.encoding.encoder import Encoder, EncodeReport
from party.encoding.parallel import (
    ParallelStats,
    available_cores,
    encode_csv_parallel,
    resolve_workers,
)
from party.encoding.records import EncodedRecords
from party.errors import PprlError

log = logging.getLogger(__name__)


class ClusterError(PprlError):
    """The party's Dask cluster cannot be started or reached (names the scheduler, not data)."""


EMBEDDED_HEARTBEAT_S = 5.0  # the embedded workers' heartbeat interval (Dask's: 0.5 s)
_heartbeats_lock = threading.Lock()
_heartbeats_users = 0
_heartbeats_default: Callable[[int], float] | None = None


@contextlib.contextmanager
def _slow_heartbeats() -> Iterator[None]:
    """While an embedded cluster runs, its scheduler (in this process) asks the workers for a
    heartbeat every ``EMBEDDED_HEARTBEAT_S`` seconds: Dask's scheduler sets 0.5 s for up to 10
    workers (``distributed.scheduler.heartbeat_interval``, which no configuration key sets),
    and each heartbeat costs a worker's event loop CPU (about 2.6 ms each in a profile at 200k
    records) for as long as the encoding's wall-clock lasts. Heartbeats only report liveness and
    metrics here (workers are dropped after ``worker-ttl``, 5 minutes); tasks are not paced by
    them. Shared by overlapping embedded clusters (counted); without that function (another
    Dask version) nothing changes."""
    global _heartbeats_users, _heartbeats_default
    import distributed.scheduler as scheduler

    default = getattr(scheduler, "heartbeat_interval", None)
    if not callable(default):
        yield
        return
    with _heartbeats_lock:
        if _heartbeats_users == 0:
            _heartbeats_default = default
            setattr(scheduler, "heartbeat_interval", _embedded_heartbeat(default))  # noqa: B010
        _heartbeats_users += 1
    try:
        yield
    finally:
        with _heartbeats_lock:
            _heartbeats_users -= 1
            if _heartbeats_users == 0 and _heartbeats_default is not None:
                setattr(scheduler, "heartbeat_interval", _heartbeats_default)  # noqa: B010
                _heartbeats_default = None


def _embedded_heartbeat(default: Callable[[int], float]) -> Callable[[int], float]:
    """Dask's interval for ``n`` workers (``default``), at least ``EMBEDDED_HEARTBEAT_S``."""

    def interval(n: int) -> float:
        return max(EMBEDDED_HEARTBEAT_S, float(default(n)))

    return interval


#: glibc's malloc on the embedded workers (``steady_malloc``): blocks up to this size come from
#: its heaps (larger ones are mapped for themselves; 32 MiB is glibc's largest threshold)
MALLOC_MMAP_BYTES = 32 << 20
#: and freed memory at the top of a heap goes back to the system only beyond this
MALLOC_TRIM_BYTES = 64 << 20


def steady_malloc() -> bool:
    """Runs on an embedded worker: fix glibc's mmap and trim thresholds (``mallopt``) at
    ``MALLOC_MMAP_BYTES`` and ``MALLOC_TRIM_BYTES`` for the worker's life, and keep every thread
    on one malloc arena; False where there is no glibc. With glibc's defaults a task thread
    allocates from an arena of its own and hands the arrays freed after one of the circuit's
    rounds back to the system, faulting them in (zeroed) again in the next (3 x 400k, compute
    party 0's circuit on 4 workers, three circuits: 287,097 page faults and 0.56 s of system CPU
    in the actors' calls, 79,794 and 0.22 s with the thresholds). A thread's own arena still
    gives back its heaps (64 MiB each) when they empty: with the round payloads copied out of
    files in the calls, 52,445-54,687 faults per circuit in the calls, 17,600 on one arena.
    What a worker keeps is at most its own peak, reused by its next task; the embedded workers
    end with the run that started them."""
    import ctypes
    import ctypes.util

    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8  # glibc's malloc.h
    return (
        bool(mallopt(m_mmap_threshold, MALLOC_MMAP_BYTES))
        and bool(mallopt(m_trim_threshold, MALLOC_TRIM_BYTES))
        and bool(mallopt(m_arena_max, 1))
    )


# what the embedded workers' forkserver imports before it forks them (``_forkserver``)
EMBEDDED_PRELOAD = (
    "distributed",
    "party.encoding.encoder",
    "party.encoding._numba_warm",
    "party.cluster_waves",
    "party.cluster",
    "party.cluster_tasks",
    "party.cluster_pairs",
    "party.cluster_blocks",
    "party.cluster_warm",
)


def _forkserver() -> bool:
    """Start (once per process) the forkserver that the embedded cluster's workers are forked
    from, with Dask and the encoder imported and the encoder's and the comparison tasks' numba
    loops loaded (``_numba_warm``, ``cluster_warm``): a worker then
    starts without importing them (spawned, each paid 1.5-2.3 CPU-s of start-up per encoding),
    and the server's imports are paid once per node process. The server is shared with the
    encoding pool's lanes (``parallel.process_pool``); if they started it first, it has the
    encoder but not Dask preloaded. False where there is no forkserver (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    import multiprocessing
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload(list(EMBEDDED_PRELOAD))
    forkserver.ensure_running()  # the preload above counts only if the server starts here
    return True


@contextlib.contextmanager
def dask_client(
    cluster: ClusterConfig, workers: int | None = None, *, connect_timeout: float = 60.0
) -> Iterator[Any]:
    """A ``distributed.Client`` on the party's cluster (embedded or at its scheduler address).
    Every worker loads the encoder's numba loops once when the client connects (``warm_up``), as
    the process pool's forkserver does; the embedded cluster runs without Dask's sampling
    profiler thread, with its monitors at long intervals (a party's own workers: set the
    same three keys in their Dask configuration, docs/scaling.md), with heartbeats every
    ``EMBEDDED_HEARTBEAT_S`` seconds (``_slow_heartbeats``), with its workers forked from a
    forkserver that has Dask and the encoder loaded (``_forkserver``; Linux) and with glibc's
    malloc keeping freed memory for their next tasks (``steady_malloc``); its client calls the
    workers (an actor's methods, results) straight, not through the scheduler as Dask's
    default does (on the same machine they are always reachable)."""
    import dask
    from distributed import Client, LocalCluster
    from distributed.security import Security

    from party.encoding._numba_bits import warm_up

    n = resolve_workers(workers)
    if cluster.embedded:
        security = Security.temporary()
        method = "forkserver" if _forkserver() else "spawn"
        with (
            dask.config.set(
                {
                    "distributed.worker.multiprocessing-method": method,
                    "distributed.worker.profile.enabled": False,  # no sampling thread
                    # the workers' periodic callbacks (event-loop tick every 20 ms, system
                    # monitor every 0.5 s, memory monitor every 0.1 s) cost an idle worker 0.25
                    # CPU-s per 10 s of wall-clock; at these intervals 0.035 (measured through
                    # ``worker_usage``), which a worker otherwise spends alongside its tasks
                    "distributed.admin.tick.interval": "1s",
                    "distributed.admin.system-monitor.interval": "5s",
                    "distributed.worker.memory.monitor-interval": "1s",
                    # glibc's own malloc tuning: Dask's nanny sets MALLOC_TRIM_THRESHOLD_, which
                    # turns off glibc's dynamic mmap threshold, so every large numpy temporary is
                    # mmapped and unmapped again (page faults: the encoder ran 1.4-1.6x slower
                    # in a Dask worker than in a process of its own)
                    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                }
            ),
            _slow_heartbeats(),
            LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                scheduler_port=0,
                dashboard_address=None,
                security=security,
                silence_logs=logging.WARNING,
            ) as local,
            Client(local, security=security, direct_to_workers=True) as client,
        ):
            client.run(warm_up)
            client.run(steady_malloc)
            yield client
        return
    if cluster.tls_ca is None or cluster.tls_cert is None or cluster.tls_key is None:
        raise ClusterError("cluster: tls_ca, tls_cert and tls_key are required for a scheduler")
    security = Security(
        tls_ca_file=str(cluster.tls_ca),
        tls_client_cert=str(cluster.tls_cert),
        tls_client_key=str(cluster.tls_key),
        require_encryption=True,
    )
    try:
        client = Client(cluster.scheduler, security=security, timeout=connect_timeout)
    except (OSError, TimeoutError) as exc:
        raise ClusterError(
            f"cluster: cannot reach the scheduler {cluster.scheduler} ({type(exc).__name__})"
        ) from None
    with client:
        try:  # a scheduler whose workers have not joined (yet) has nothing to encode on
            client.wait_for_workers(1, timeout=connect_timeout)
        except (OSError, TimeoutError):
            raise ClusterError(
                f"cluster: no worker joined the scheduler {cluster.scheduler} within "
                f"{connect_timeout:g} s"
            ) from None
        client.run(warm_up)
        yield client


def dask_lanes(client: Any, at_once: int | None = None) -> list[Executor]:
    """One executor per worker of the client's cluster, pinned to that worker (in address
    order), so that the same worker runs every task of its lane; with ``at_once``, at most that
    many of the lanes' tasks run at a time (``GatedLane``: the embedded cluster's workers share
    this machine's cores)."""
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:  # they left after the client connected (a restart, a lost heartbeat)
        raise ClusterError("cluster: the scheduler has no workers to encode on")
    lanes: list[Executor] = [
        client.get_executor(workers=[address], allow_other_workers=False, pure=False)
        for address in workers
    ]
    if at_once is None or at_once >= len(lanes):
        return lanes
    gate = threading.BoundedSemaphore(max(1, at_once))
    return [GatedLane(lane, gate) for lane in lanes]


class GatedLane(Executor):
    """A lane whose tasks take one of ``gate``'s slots, shared with the other lanes: ``submit``
    waits for a free slot (while the lane's earlier tasks finish) and the slot is freed when the
    task ends (done, failed or cancelled). More workers than cores would only time-slice: each
    task's CPU grows with the switching between processes, and the wall-clock does not shrink.
    Tasks never wait for a task submitted after them, so waiting for a slot cannot deadlock."""

    def __init__(self, lane: Executor, gate: threading.BoundedSemaphore) -> None:
        self.lane, self.gate = lane, gate

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.gate.acquire()
        try:
            fut = self.lane.submit(fn, *args, **kwargs)
        except BaseException:
            self.gate.release()
            raise
        fut.add_done_callback(self._free)
        return fut

    def _free(self, _fut: Future[Any]) -> None:
        self.gate.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.lane.shutdown(wait=wait, cancel_futures=cancel_futures)


@dataclass(frozen=True)
class WorkerUsage:
    """One worker process: CPU seconds of all its threads and of those that ran tasks or its
    actors' calls (the rest is Dask's event loop: receiving arguments, sending results,
    heartbeats, monitors), and its
    peak resident memory in bytes. ``after - before``: the CPU in between, the later peak, and
    in ``start`` the process's CPU from its start to ``before`` (its start-up: interpreter,
    imports, numba loops, joining the cluster, for a reading taken before its first task)."""

    process: float
    tasks: float
    peak_rss: int = 0
    start: float = 0.0

    def __sub__(self, other: WorkerUsage) -> WorkerUsage:
        return WorkerUsage(
            self.process - other.process, self.tasks - other.tasks, self.peak_rss, other.process
        )


#: in the names of distributed's task threads, and of the thread its actors' calls run in
TASK_THREAD_NAMES = ("Dask-Default-Threads", "Dask-Actor-Threads")
#: CPU seconds of the threads that take steps outside Dask's (the circuit's round channels,
#: ``party.round_channel``), each as of its last step, by a number of its own: they end with
#: their circuit, and ``/proc/self/task`` forgets an ended thread
_SERVING_CPU: dict[int, float] = {}
_serving = itertools.count()


def serving_thread() -> Callable[[], None]:
    """For a thread that takes steps outside Dask's task threads: what it calls after each
    step, so that ``worker_usage`` counts its CPU with the tasks'."""
    key = next(_serving)

    def note() -> None:
        _SERVING_CPU[key] = time.thread_time()

    return note


def _peak_rss() -> int:
    """This process's peak resident memory in bytes: ``VmHWM`` (Linux; ``ru_maxrss`` would
    include the peak of the process that spawned a worker), else ``ru_maxrss``."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def worker_usage() -> WorkerUsage:
    """Runs on a worker: its process CPU so far, its task threads' share (Linux
    ``/proc/self/task``; elsewhere the task share is reported as 0; with the threads of
    ``serving_thread``) and its peak RSS."""
    times = os.times()
    peak = _peak_rss()
    names = {t.native_id: t.name for t in threading.enumerate()}
    tasks = 0.0
    with contextlib.suppress(OSError):
        tick = os.sysconf("SC_CLK_TCK")
        for tid in os.listdir("/proc/self/task"):
            name = names.get(int(tid), "")
            if not any(task in name for task in TASK_THREAD_NAMES):
                continue
            with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/stat") as fh:
                after_name = fh.read().rsplit(")", 1)[1].split()  # fields 3.. of stat(5)
                tasks += (int(after_name[11]) + int(after_name[12])) / tick  # utime, stime
    tasks += sum(_SERVING_CPU.values())
    return WorkerUsage(times.user + times.system, tasks, peak)


def encode_csv_on_workers(
    encoder: Encoder,
    path: str | Path,
    *,
    workers: int | None = None,
    cluster: ClusterConfig | None = None,
    id_column: str | None = None,
    progress: Callable[[int], None] | None = None,
    stats: ParallelStats | None = None,
    usage_by_worker: dict[str, WorkerUsage] | None = None,
) -> tuple[EncodedRecords, EncodeReport]:
    """Encode a CSV on this machine's cores (``cluster`` None) or on the party's Dask cluster;
    the same records and report as ``encoder.encode_csv`` either way. ``usage_by_worker``
    (Dask only) receives each worker's CPU during the encoding (and before it, from the
    process's start) and its peak RSS, by address."""
    if cluster is None:
        return encode_csv_parallel(
            encoder, path, workers=workers, id_column=id_column, progress=progress, stats=stats
        )
    with dask_client(cluster, workers) as client:
        before: dict[str, WorkerUsage] = {} if usage_by_worker is None else client.run(worker_usage)
        # the embedded workers share this machine: no more tasks at once than it has cores
        lanes = dask_lanes(client, available_cores() if cluster.embedded else None)
        out = encode_csv_parallel(
            encoder,
            path,
            workers=workers,
            id_column=id_column,
            progress=progress,
            lanes=lanes,
            stats=stats,
            # the embedded cluster's workers share this machine: they read their own byte
            # ranges of the CSV and hand their arrays back in files (tmpfs), not through Dask
            lanes_read_file=cluster.embedded,
            # first sight of a value two workers meet: once, by one, sent to those lacking it
            range_lanes=WaveLanes if len(lanes) <= WaveLanes.MAX_LANES else None,
        )
        if usage_by_worker is not None:
            after: dict[str, WorkerUsage] = client.run(worker_usage)
            usage_by_worker.update({w: after[w] - before[w] for w in after if w in before})
        return out
