"""Encoding on every core: a CSV's batches encoded by worker processes, assembled in input order.

The parent process reads the CSV exactly as ``Encoder.encode_csv`` does (pyarrow's streaming
reader, or the csv module for files with blank lines) and hands each batch, still as an arrow
record batch, to a worker. A worker holds an ``Encoder`` built from the same schema and secret
(memo tables are per worker and pure, so they do not change any output) and returns the batch's
filters, blocking digests, skip reasons and raw record ids. The parent consumes results strictly
in input order and does the only sequential work: the record-id checks across batches, the skip
counts and the assembly of the output arrays. So the records, the report and the first error
raised are the same as one process gives, bit for bit (``tests/unit/encoding/test_parallel.py``).

Memory stays bounded: at most ``2 * workers`` batches (at most ``encoder.CSV_BLOCK_BYTES`` of CSV
each) are in flight. Batches are made smaller (down to ``MIN_BLOCK_BYTES``) so that every worker
gets at least ``BATCHES_PER_WORKER`` of them: the last batches then leave few workers idle. Any ``concurrent.futures.Executor`` can run the batches: by default a process pool
of ``workers`` processes started with ``forkserver`` (a node runs gRPC threads, which must not be
forked), or a Dask client's executor (``party.cluster``) for workers on other machines of the
party's own infrastructure.

Exception: BLIP noise from an injected, seeded generator defines the output by the order in which
it is drawn, so such an encoder always encodes in one process. With the default CSPRNG noise
(``os.urandom``, fresh per call) every worker draws its own.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import secrets
import socket
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from party.encoding import encoder as encoder_module
from party.encoding.encoder import Encoder, EncodeReport, _Batch, _BatchResult
from party.encoding.records import EncodedRecords
from party.encoding.schema import LinkageSchema

log = logging.getLogger(__name__)
T = TypeVar("T")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def resolve_workers(workers: int | None) -> int:
    """``None`` or 0 means every available core; otherwise the number given (at least 1)."""
    if workers is None or workers == 0:
        return available_cores()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be a whole number >= 0 (0: all cores), got {workers!r}")
    return workers


@dataclass(frozen=True)
class EncoderSpec:
    """What a worker needs to build the same encoder; ``token`` names one encoding job."""

    schema: LinkageSchema
    secret: bytes
    token: str

    def __repr__(self) -> str:  # never show the secret
        return f"EncoderSpec(token={self.token!r})"


@dataclass
class ParallelStats:
    """CPU seconds the workers spent on batches, in total and per worker (host:pid)."""

    batches: int = 0
    cpu_seconds: float = 0.0
    cpu_by_worker: dict[str, float] = field(default_factory=dict)

    def add(self, worker: str, cpu: float) -> None:
        self.batches += 1
        self.cpu_seconds += cpu
        self.cpu_by_worker[worker] = self.cpu_by_worker.get(worker, 0.0) + cpu


_WORKER_ENCODERS: dict[str, Encoder] = {}


def _worker_encoder(spec: EncoderSpec) -> Encoder:
    enc = _WORKER_ENCODERS.get(spec.token)
    if enc is None:
        if len(_WORKER_ENCODERS) >= 2:  # an earlier job's memo tables: free them
            _WORKER_ENCODERS.clear()
        enc = Encoder(spec.schema, spec.secret)
        _WORKER_ENCODERS[spec.token] = enc
    return enc


def encode_batch_task(
    batch: _Batch, spec: EncoderSpec, source: str, id_column: str | None
) -> tuple[_BatchResult, str, float]:
    """Runs in a worker: encode one batch with this worker's encoder for ``spec``; returns the
    result, the worker's name (host:pid) and the CPU seconds the batch took there."""
    c0 = time.process_time()
    result = _worker_encoder(spec).encode_batch(batch, source, id_column)
    return result, f"{socket.gethostname()}:{os.getpid()}", time.process_time() - c0


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes (forkserver on Linux: safe next to gRPC threads)."""
    method = "forkserver" if sys.platform.startswith("linux") else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["party.encoding.encoder", "party.encoding._numba_warm"])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


def ordered_map(
    executor: Executor,
    task: Callable[..., T],
    items: Iterator[Any],
    window: int,
    *args: object,
) -> Iterator[T]:
    """``task(item, *args)`` for every item on ``executor``, results in input order, with at most
    ``window`` items submitted and not yet consumed. Pending work is cancelled on an error."""
    pending: deque[Future[T]] = deque()
    try:
        for item in items:
            pending.append(executor.submit(task, item, *args))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for fut in pending:
            fut.cancel()


MIN_BLOCK_BYTES = 1 << 20
BATCHES_PER_WORKER = 4


def block_bytes_for(path: str | Path, workers: int) -> int:
    """CSV bytes per batch: about BATCHES_PER_WORKER batches per worker, within limits."""
    try:
        size = Path(path).stat().st_size
    except OSError:
        return encoder_module.CSV_BLOCK_BYTES
    per = size // (BATCHES_PER_WORKER * max(1, workers))
    return max(
        min(MIN_BLOCK_BYTES, encoder_module.CSV_BLOCK_BYTES),
        min(per, encoder_module.CSV_BLOCK_BYTES),
    )


def _one_batch(path: str | Path) -> bool:
    """True if the file fits in one CSV block (or cannot be read: one process reports that)."""
    try:
        return Path(path).stat().st_size <= encoder_module.CSV_BLOCK_BYTES
    except OSError:
        return True


def executor_size(executor: Executor) -> int:
    """Worker count of a process pool or of a Dask client's executor (1 if unknown)."""
    size = getattr(executor, "_max_workers", None)
    if isinstance(size, int):
        return size
    client = getattr(executor, "_client", None)
    if client is not None:
        return max(
            1, sum(w.get("nthreads", 1) for w in client.scheduler_info()["workers"].values())
        )
    return 1


def encode_csv_parallel(
    encoder: Encoder,
    path: str | Path,
    *,
    workers: int | None = None,
    id_column: str | None = None,
    progress: Callable[[int], None] | None = None,
    executor: Executor | None = None,
    stats: ParallelStats | None = None,
) -> tuple[EncodedRecords, EncodeReport]:
    """``encoder.encode_csv(path, ...)`` with the batches encoded on ``workers`` processes
    (``None``/0: every core) or on ``executor`` if given; identical results (module docstring).
    A file of one CSV block is encoded here, without starting processes."""
    n = resolve_workers(workers)
    seeded_blip = (
        encoder._blip_rng is not None and encoder.schema.hardening.blip_flip_probability is not None
    )
    if seeded_blip or (executor is None and (n <= 1 or _one_batch(path))):
        if seeded_blip and n > 1:
            log.info("a seeded BLIP generator was injected: encoding in one process")
        return encoder.encode_csv(path, id_column=id_column, progress=progress)
    spec = EncoderSpec(encoder.schema, encoder._secret, secrets.token_hex(8))
    source = str(Path(path))
    own = executor is None
    pool = process_pool(n) if executor is None else executor

    size = n if own else max(n, executor_size(pool))
    window = 2 * size

    def map_batches(batches: Iterator[_Batch]) -> Iterator[_BatchResult]:
        for result, worker, cpu in ordered_map(
            pool, encode_batch_task, batches, window, spec, source, id_column
        ):
            if stats is not None:
                stats.add(worker, cpu)
            yield result

    try:
        return encoder.encode_csv(
            path,
            id_column=id_column,
            progress=progress,
            map_batches=map_batches,
            block_bytes=block_bytes_for(path, size),
        )
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
