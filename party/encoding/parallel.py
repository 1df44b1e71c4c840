"""Encoding on every core: a CSV's batches encoded by worker processes, assembled in input order.

Each worker ("lane": one process of a persistent pool, or one worker of the party's Dask
cluster, see ``party.cluster``) holds an ``Encoder`` built from the same schema and secret.

By default, on the persistent local lanes (``routed_sight``, ``cluster_waves.PlacedWaveLanes``),
the parent only cuts the file into byte ranges of whole lines (``csv_ranges``: two CSV blocks
each), gives the lanes the first wave of ranges to parse, and meanwhile counts each range's
lines in one pass, so the job's output file on tmpfs can be reserved for every row. The lanes
parse their ranges a wave at a time and report each column's distinct values by hash; the
parent routes the first sight of each value two lanes meet to one of them, which computes it
and sends it to the lanes lacking it (``cluster_waves``); each lane
then encodes its ranges, writes the filters and digests into the output file at their rows
(positional writes; the parent maps the file, and the records are views of it), and hashes the
record ids (the last range of each lane is cut into pieces given to the lanes as they become
free, each parsed and encoded on its own, so the lanes end together); the parent takes the
results in input order, checks the ids (``encoder._IdCheck``: by sorting the hashes at the
end, exactly on a tie or an error) and moves rows up past skipped ones. With ``routed_sight=False`` (``own_ranges``, ``_PeerLanes``) every
range's first row is known from the line counts, and each lane encodes a range as soon as it
gets it, computing the first sight of every value it meets itself (values both lanes meet
twice). An error a lane raises names its true row and is raised when the results before it are
taken. With ``peer_sight`` the lanes also share the first-sight entries they compute
(``party.encoding.peer_sight``: files on tmpfs, no lane ever waits for another; measured
costlier than computing them again).

Lanes can also read the CSV themselves with the parent sharing first sight out
(``_RangeLanes``, with ``lanes_read_file``: the Dask path): the parent only cuts the file into
byte ranges of whole lines, and every range goes through three steps:

0. Reading: one lane parses the range (pyarrow, the same options as ``Encoder.encode_csv``),
   keeps it, and reports the distinct raw values of every column with first-sight work with a
   64-bit hash of each (``first_sight.value_hashes``); the parent keeps the values whose hash no
   lane was given before (``SeenValues.new_in``: numpy, no Python object per row or value).
1. First sight, partitioned (``party.encoding.first_sight``): the parent cuts the new values into
   one share per lane, and each lane computes the value filters and part blocks of its share;
   the parent forwards every lane's entries to the other lanes with their next task. So each
   distinct name, date or address is normalised and hashed once in all, not once per worker
   that meets it.
2. Records: the lane that read the range installs the entries it was sent and encodes it with
   ``Encoder.encode_batch`` (its memo tables now warm); filters and blocking digests come back
   in a file on tmpfs (read once, not unpickled), record ids as one string, skip reasons as
   they are.

Cutting at line ends is exact only if every line is a row: a lane that finds a quote, an empty
line or a lone carriage return in its range says so, and the encoding starts again the exact way
(progress is not counted twice). That way, and for lanes elsewhere unless told otherwise (Dask
workers, which may not see the file), the parent reads the CSV as ``Encoder.encode_csv`` does (pyarrow's
streaming reader, or the csv module for files with blank lines) and sends each batch to a lane
(``_Lanes``: steps 1 and 2, the parent finding each batch's new values).

The parent consumes the results strictly in input order and does the only sequential work: the
row numbers (a range's first row is known once the rows before it are counted), the record-id
checks across batches, the skip counts and the assembly of the output arrays (allocated once
for the rows the file's size suggests). So the records, the report and the first error raised
are the same as one process gives, bit for bit (``tests/unit/encoding/test_parallel.py``): memo
entries are a pure function of the value, and a lane that lacks one computes it itself.

Memory stays bounded: at most ``2 * lanes`` ranges (each at most ``encoder.CSV_BLOCK_BYTES`` of
CSV, two with ``own_ranges``, the driver's ``RANGE_BLOCKS`` with ``lanes_read_file``) are read ahead of their first sight, and at most ``2 * lanes``
results are in flight; with ``own_ranges`` the output (the size of the records) is the job's
file on tmpfs instead of the parent's memory (parent memory if tmpfs lacks room). The
default lanes are a persistent pool: processes started once per process with ``forkserver`` (a
node runs gRPC threads, which must not be forked), which import the encoder and load its numba
loops before their first task (``start_lanes``), and are reused by later encodings; when a
job ends its encoders and memo tables are dropped on every lane (``forget_task``: queued on
these lanes, whose tasks run in order, without waiting for it).

Exception: BLIP noise from an injected, seeded generator defines the output by the order in which
it is drawn, so such an encoder always encodes in one process. With the default CSPRNG noise
(``os.urandom``, fresh per call) every worker draws its own.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import mmap
import multiprocessing
import os
import pickle
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    BrokenExecutor,
    CancelledError,
    Executor,
    Future,
    ProcessPoolExecutor,
    wait,
)
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from party.encoding import bits
from party.encoding import encoder as encoder_module
from party.encoding.csv_ranges import (
    CsvRange,
    NotSplittable,
    cut_tail,
    line_counts,
    read_range,
    split_ranges,
)
from party.encoding.encoder import (
    CsvLayout,
    EncodeDataError,
    Encoder,
    EncodeReport,
    _Batch,
    _BatchResult,
)
from party.encoding.first_sight import (
    RawValues,
    SeenValues,
    SightEntries,
    SightPlanner,
    Unit,
    compute_entries,
    install_entries,
    sight_columns,
    sight_units,
    value_hashes,
)
from party.encoding.peer_sight import PeerSight
from party.encoding.records import EncodedRecords
from party.encoding.schema import LinkageSchema

if TYPE_CHECKING:  # imports this module
    from party.cluster_waves import PlacedWaveLanes

log = logging.getLogger(__name__)


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
    """CPU seconds the workers spent on their tasks, in total, on first sight, on reading their
    CSV ranges, and per worker (host:pid); ``batches``: batches encoded."""

    batches: int = 0
    cpu_seconds: float = 0.0
    first_sight_seconds: float = 0.0
    reading_seconds: float = 0.0
    ranges: int = 0  # CSV ranges the lanes read themselves
    shared_values: int = 0  # first-sight entries lanes installed from each other (peers, routed)
    cpu_by_worker: dict[str, float] = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)  # own ranges: ``Encoder.step_cpu``

    def add_steps(self, steps: dict[str, float]) -> None:
        for k, v in steps.items():
            self.steps[k] = self.steps.get(k, 0.0) + v

    def stage_entries(self, encoder: Encoder, own_cpu: float) -> dict[str, float]:
        """The node's sub-entries of ``cpu.audited.encoding``: this process's CPU (parsing in
        one process or driving the lanes, and its other threads), the lanes' task CPU, their
        CSV reading, and every ``Encoder.step_cpu`` step (here and in the lanes' ranges)."""
        out = {"cpu.audited.encoding.node": own_cpu}
        if self.cpu_by_worker:
            out["cpu.audited.encoding.lanes"] = self.cpu_seconds
            out["cpu.audited.encoding.lanes.reading"] = self.reading_seconds
        for k, v in encoder.step_cpu.items():
            if v + self.steps.get(k, 0.0) > 0:  # lanes decode columns while reading
                out[f"cpu.audited.encoding.{k}"] = v + self.steps.get(k, 0.0)
        return out

    def add(
        self, worker: str, cpu: float, *, first_sight: bool = False, reading: bool = False
    ) -> None:
        if first_sight:
            self.first_sight_seconds += cpu
        elif reading:
            self.reading_seconds += cpu
            self.ranges += 1
        else:
            self.batches += 1
        self.cpu_seconds += cpu
        self.cpu_by_worker[worker] = self.cpu_by_worker.get(worker, 0.0) + cpu


_WORKER_ENCODERS: dict[str, Encoder] = {}
_WORKER_LOCK = threading.Lock()  # a Dask worker may run tasks on several threads: one at a time


def _worker_encoder(spec: EncoderSpec) -> Encoder:
    enc = _WORKER_ENCODERS.get(spec.token)
    if enc is None:
        if len(_WORKER_ENCODERS) >= 2:  # an earlier job's memo tables: free them
            _WORKER_ENCODERS.clear()
        enc = Encoder(spec.schema, spec.secret)
        _WORKER_ENCODERS[spec.token] = enc
    return enc


def forget_task(token: str) -> bool:
    """Runs in a lane when a job ends: drop its encoder (secret, memo tables); True if held."""
    with _WORKER_LOCK:
        for key in [k for k in _HELD if k[0] == token]:
            del _HELD[key]
        _PEERS.pop(token, None)
        return _WORKER_ENCODERS.pop(token, None) is not None


def _worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def first_sight_task(
    work: dict[Unit, RawValues], spec: EncoderSpec
) -> tuple[bytes, dict[Unit, tuple[int, float]], str, float]:
    """Runs in a lane: the memo entries of one share of first-sight work (first_sight module),
    pickled once here (the parent forwards them to every other lane as they are; b"" if none),
    the CPU seconds per unit, the lane's name (host:pid) and the CPU seconds the task took.
    Entries are only a speed-up: if computing them fails, none are returned and the batch
    reports the problem in input order."""
    c0 = time.process_time()
    with _WORKER_LOCK:
        try:
            entries = compute_entries(_worker_encoder(spec), work)
        except Exception:  # noqa: BLE001 - the batch step raises the same problem in input order
            entries = SightEntries()
        blob = pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL) if len(entries) else b""
    return blob, entries.seconds, _worker_name(), time.process_time() - c0


def encode_batch_task(
    batch: _Batch,
    entries: list[bytes],
    spec: EncoderSpec,
    source: str,
    id_column: str | None,
    out_dir: str | None = None,
    key: int = 0,
) -> tuple[_Handoff | _BatchResult, str, float]:
    """Runs in a lane: install the other lanes' memo entries, then encode one batch (or slice)
    with this lane's encoder for ``spec``; returns the result (its arrays in a file of
    ``out_dir`` named by ``key``, if given: ``_hand_over``), the lane's name and its CPU s."""
    c0 = time.process_time()
    with _WORKER_LOCK:
        encoder = _worker_encoder(spec)
        for blob in entries:
            install_entries(encoder, pickle.loads(blob))
        result = _hand_over(encoder.encode_batch(batch, source, id_column), out_dir, key)
    return result, _worker_name(), time.process_time() - c0


_HELD: dict[tuple[str, int], _Batch] = {}  # (job token, range number) -> parsed, not encoded


def scan_range_task(
    spec: EncoderSpec, key: int, path: str, part: CsvRange, layout: CsvLayout, source: str
) -> tuple[int, dict[str, tuple[Any, np.ndarray]], str, float]:
    """Runs in a lane: parse one range of the CSV (``csv_ranges``; rows numbered from 1 until
    ``encode_held_task`` knows better), keep it for ``encode_held_task`` and return its rows,
    the distinct raw values (arrow binary arrays, with ``value_hashes``) of every column with
    first-sight work, the lane's name and the task's CPU seconds."""
    c0 = time.process_time()
    with _WORKER_LOCK:
        batch = read_range(path, part, layout, source, 1)
        columns = sight_columns(_worker_encoder(spec)) if batch.n else ()
        batch.materialise()
        distinct = {}
        for c in columns:
            values = batch.columns[c].dictionary
            distinct[c] = (values, value_hashes(values))
        if batch.n:
            _HELD[(spec.token, key)] = batch
    return batch.n, distinct, _worker_name(), time.process_time() - c0


@dataclass
class _Handoff:
    """A range's result without its arrays: those are in the file ``path`` (filters, then
    digests, raw uint64), the kept rows' ids joined by newlines (a CSV split into ranges has
    no newline inside a value)."""

    result: _BatchResult
    path: str
    filters_shape: tuple[int, int]
    digests_shape: tuple[int, int]
    ids: str | None


def encode_held_task(
    spec: EncoderSpec,
    key: int,
    first_row: int,
    entries: list[bytes],
    source: str,
    id_column: str | None,
    out_dir: str | None,
) -> tuple[_Handoff | _BatchResult, str, float]:
    """Runs in a lane: install the other lanes' memo entries, encode the range ``key`` this lane
    parsed (its first row is row ``first_row`` of the file), and hand the arrays over in a file
    of ``out_dir`` (tmpfs), so that the parent reads them instead of unpickling them; with no
    ``out_dir``, or if the file cannot be written (tmpfs full), the result itself."""
    c0 = time.process_time()
    with _WORKER_LOCK:
        encoder = _worker_encoder(spec)
        for blob in entries:
            install_entries(encoder, pickle.loads(blob))
        batch = _HELD.pop((spec.token, key))
        batch.first_row = first_row
        handoff = _hand_over(encoder.encode_batch(batch, source, id_column), out_dir, key)
    return handoff, _worker_name(), time.process_time() - c0


def _hand_over(result: _BatchResult, out_dir: str | None, key: int) -> _Handoff | _BatchResult:
    """In a lane: the result with its arrays written to a file of ``out_dir`` (tmpfs) for the
    parent to read (``_take_handoff``); the result itself with no ``out_dir`` or if the file
    cannot be written (tmpfs full)."""
    if out_dir is None:
        return result
    out = os.path.join(out_dir, f"{key}.u64")
    try:
        with open(out, "wb") as fh:
            fh.write(np.ascontiguousarray(result.filters, dtype=np.uint64).data)
            fh.write(np.ascontiguousarray(result.digests, dtype=np.uint64).data)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(out)
        return result
    ids = None if result.ids is None else "\n".join(result.ids)
    return _Handoff(
        replace(result, kept=_compact(result), filters=_EMPTY, digests=_EMPTY, ids=None),
        out,
        result.filters.shape,
        result.digests.shape,
        ids,
    )


_EMPTY = np.zeros((0, 0), dtype=np.uint64)


def _take_handoff(handoff: _Handoff) -> _BatchResult:
    """In the parent: the range's result with its arrays read from the lane's file (one read
    into memory the allocator reuses; mapping the file page by page cost more), then removed."""
    nf = math.prod(handoff.filters_shape)
    nd = math.prod(handoff.digests_shape)
    try:
        data = np.fromfile(handoff.path, dtype=np.uint64, count=nf + nd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(handoff.path)
    ids = None
    if handoff.ids is not None:
        ids = handoff.ids.split("\n") if handoff.result.kept else []
    return replace(
        handoff.result,
        filters=data[:nf].reshape(handoff.filters_shape),
        digests=data[nf:].reshape(handoff.digests_shape),
        ids=ids,
    )


_PEERS: dict[str, PeerSight] = {}  # job token -> this lane's side of the first-sight exchange


@dataclass(frozen=True)
class RangeJob:
    """What a lane needs to read and encode ranges of one CSV on its own (``peer_range_task``):
    ``output`` (a file on tmpfs, or None: arrays come back pickled) holds ``rows`` filters of
    ``words`` words, then ``rows`` digest rows of ``width`` words; ``folder`` (tmpfs, or
    None: no exchange) receives the first-sight entries the lanes share if ``exchange``."""

    path: str
    layout: CsvLayout
    source: str
    id_column: str | None
    folder: str | None
    lanes: int
    output: str | None = None
    rows: int = 0
    words: int = 0
    width: int = 0
    exchange: bool = False


@dataclass
class _Placed:
    """A range's result whose arrays a lane wrote into the job's output file in place
    (``result.placed``: its first output row); the kept rows' ids joined by newlines (a CSV
    split into ranges has no newline inside a value)."""

    result: _BatchResult
    ids: str | None

    def take(self) -> _BatchResult:
        """In the parent: the result with its ids as a list."""
        if self.ids is not None:
            self.result.ids = self.ids.split("\n") if self.result.kept else []
        return self.result


def _write_rows(job: RangeJob, at: int, result: _BatchResult) -> bool:
    """In a lane: write a result's filters and digests at output row ``at`` of ``job.output``
    (positional writes; no mapping); False if the file cannot take them (tmpfs full)."""
    assert job.output is not None
    try:
        fd = os.open(job.output, os.O_WRONLY)
        try:
            for array, base, width in (
                (result.filters, 0, job.words),
                (result.digests, 8 * job.rows * job.words, job.width),
            ):
                view = np.ascontiguousarray(array, dtype=np.uint64).data.cast("B")
                offset = base + 8 * at * width
                while view:
                    done = os.pwrite(fd, view, offset)
                    view, offset = view[done:], offset + done
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def _hash_ids(result: _BatchResult) -> None:
    """In a lane: a 64-bit hash of each kept record id, which the parent checks for
    duplicates by sorting them (``encoder._IdCheck``)."""
    if result.ids is not None and result.ids_valid:
        result.id_hashes = value_hashes(pa.array(result.ids, type=pa.string()))


def _place(job: RangeJob, first_row: int, result: _BatchResult) -> _Placed | _BatchResult:
    """In a lane: a range's result with its arrays written into ``job.output`` at their rows
    (``_write_rows``; the range's first row is row ``first_row`` of the file), or the result
    itself if there is no output file or no room in it."""
    if job.output is None or not _write_rows(job, first_row - 1, result):
        return result
    ids = None if result.ids is None else "\n".join(result.ids)
    kept = _compact(result)
    return _Placed(
        replace(result, kept=kept, filters=_EMPTY, digests=_EMPTY, ids=None, placed=first_row - 1),
        ids,
    )


def _compact(result: _BatchResult) -> Sequence[int]:
    """In a lane: the kept row offsets to send, ``range(n)`` if every row was kept (the common
    case: no list of n ints pickled here, unpickled and held by the parent)."""
    return range(result.n) if len(result.kept) == result.n else result.kept


def peer_range_task(
    spec: EncoderSpec, job: RangeJob, lane: int, part: CsvRange, first_row: int
) -> tuple[_Placed | _BatchResult, str, tuple[float, float, float], int, dict[str, float]]:
    """Runs in lane ``lane``: parse a range of the CSV whose first row is ``first_row`` (so
    errors name the rows one process names), install the first-sight entries the other lanes
    published (``job.exchange``), encode the range, publish the entries it computed and write
    its arrays into the output file at their row (``_write_rows``; pickled back if there is
    no file or no room); also the lane's name, the CPU seconds of reading, of the exchange
    and of encoding, the entries it installed and the CPU of the encoding's steps."""
    c0 = time.process_time()
    with _WORKER_LOCK:
        encoder = _worker_encoder(spec)
        batch = read_range(job.path, part, job.layout, job.source, first_row)
        batch.materialise()
        c1 = time.process_time()
        peers = _PEERS.get(spec.token)
        if peers is None:
            folder = job.folder if job.exchange else None
            peers = _PEERS[spec.token] = PeerSight(encoder, lane, job.lanes, folder)
        peers.take()
        c2 = time.process_time()
        before = dict(encoder.step_cpu)
        result = encoder.encode_batch(batch, job.source, job.id_column)
        steps = {k: v - before[k] for k, v in encoder.step_cpu.items()}
        _hash_ids(result)
        c3 = time.process_time()
        peers.publish()
        out = _place(job, first_row, result)
        installed, peers.installed = peers.installed, 0
    cpu = (c1 - c0, c2 - c1 + time.process_time() - c3, c3 - c2)
    return out, _worker_name(), cpu, installed, steps


def _ready() -> str:
    """Runs in a lane when it starts: the encoder's modules are imported, numba loops loaded."""
    from party.encoding._numba_bits import warm_up

    warm_up()
    return _worker_name()


def process_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes (forkserver on Linux: safe next to gRPC threads)."""
    method = "forkserver" if sys.platform.startswith("linux") else "spawn"
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(["party.encoding.encoder", "party.encoding._numba_warm"])
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx)


_LANES: list[ProcessPoolExecutor] = []
_LANES_LOCK = threading.Lock()


def start_lanes(workers: int | None = None) -> list[Executor]:
    """The persistent lanes of this process (one single-process pool each), started and warm:
    ``workers`` of them (``None``/0: every core). Started once, reused by every later encoding
    (a node may call this at start so its first encoding does not wait for them)."""
    n = resolve_workers(workers)
    with _LANES_LOCK:
        for i, lane in enumerate(_LANES):
            if getattr(lane, "_broken", False):  # its process died: a fresh one replaces it
                lane.shutdown(wait=False, cancel_futures=True)
                _LANES[i] = process_pool(1)
        while len(_LANES) < n:
            _LANES.append(process_pool(1))
        lanes: list[Executor] = list(_LANES[:n])
    for fut in [lane.submit(_ready) for lane in lanes]:
        fut.result()
    return lanes


def start_lanes_for(path: str | Path, workers: int | None = None) -> int:
    """Start (once) the persistent lanes that ``encode_csv_parallel`` will use to encode
    ``path`` on ``workers`` processes: none for a file of one CSV block (or unreadable) or for
    one worker, which are encoded in the calling process. Returns how many lanes run."""
    n = resolve_workers(workers)
    if n <= 1 or _one_batch(path):
        return 0
    return len(start_lanes(n))


def stop_lanes() -> None:
    """Shut the persistent lanes down (they start again when next needed)."""
    with _LANES_LOCK:
        lanes = list(_LANES)
        _LANES.clear()
    for lane in lanes:
        lane.shutdown(wait=True, cancel_futures=True)


atexit.register(stop_lanes)

MIN_BLOCK_BYTES = 1 << 18
BATCHES_PER_WORKER = 1


def block_bytes_for(path: str | Path, workers: int, most: int | None = None) -> int:
    """CSV bytes per batch such that every worker gets the same whole number of batches (at least
    BATCHES_PER_WORKER, each at most ``most``, default ``CSV_BLOCK_BYTES``); a batch ends at the
    last whole row of its block, so blocks are made a little larger than an exact share."""
    most = encoder_module.CSV_BLOCK_BYTES if most is None else most
    try:
        size = Path(path).stat().st_size
    except OSError:
        return most
    lanes = max(1, workers)
    per_lane = max(BATCHES_PER_WORKER, math.ceil(size / (lanes * most)))
    share = math.ceil(size / (lanes * per_lane) * 1.002) + 1
    return max(min(MIN_BLOCK_BYTES, most), share)


def _one_batch(path: str | Path) -> bool:
    """True if the file fits in one CSV block (or cannot be read: one process reports that)."""
    try:
        return Path(path).stat().st_size <= encoder_module.CSV_BLOCK_BYTES
    except OSError:
        return True


PEER_RANGE_BYTES = 1 << 21  # at most, per range with first sight shared among the lanes
PEER_FIRST_BYTES = 1 << 16  # the first such ranges: lanes meeting the commonest values at the
# same moment both compute them, so the first ranges are small (sizes double per pair)
PEER_SHARED_BYTES = 1 << 27  # tmpfs room per lane for the first-sight entries it publishes
PROBE_VALUES = 1000  # per column: the first batch's sample that measures first-sight costs


class _Lanes:
    """Drives the two steps of the module docstring on ``lanes``; results in input order."""

    def __init__(
        self,
        lanes: Sequence[Executor],
        encoder: Encoder,
        spec: EncoderSpec,
        source: str,
        id_column: str | None,
        stats: ParallelStats | None,
    ) -> None:
        self.lanes = list(lanes)
        self.spec = spec
        self.source = source
        self.id_column = id_column
        self.stats = stats
        units = sight_units(encoder)
        self.seen = SeenValues(tuple(dict.fromkeys(units.values())))
        self.planner = SightPlanner(units, len(self.lanes))
        self.outbox: list[list[bytes]] = [[] for _ in self.lanes]  # entries not yet sent
        self.rows = [0] * len(self.lanes)  # rows given to each lane so far
        self.results: deque[Future[tuple[Any, str, float]]] = deque()
        self.out_dir: str | None = None  # tmpfs folder for results (lanes on this machine)
        self.sent = 0  # batches sent to be encoded

    def _submit_sight(self, new: dict[str, RawValues]) -> list[Future[Any] | None]:
        shares = self.planner.shares(new)
        return [
            lane.submit(first_sight_task, share, self.spec) if share else None
            for lane, share in zip(self.lanes, shares, strict=True)
        ]

    def _first_sight(self, batch: _Batch) -> list[Future[Any] | None]:
        return self._first_sight_of(self.seen.new_of(batch))

    def _first_sight_of(self, new: dict[str, RawValues]) -> list[Future[Any] | None]:
        if not self.planner.measured and self.lanes[1:]:
            # before any measurement: first sight of a sample of every column, so that the
            # rest of the first batch (most of all first sight) is shared out by measured cost
            sample = {c: v[:PROBE_VALUES] for c, v in new.items()}
            self._collect(self._submit_sight(sample))
            new = {c: v[PROBE_VALUES:] for c, v in new.items() if len(v) > PROBE_VALUES}
        return self._submit_sight(new)

    def _collect(self, sight: list[Future[Any] | None]) -> None:
        """First-sight results: learn their costs, queue their entries for the other lanes."""
        for w, fut in enumerate(sight):
            if fut is None:
                continue
            entries, seconds, worker, cpu = fut.result()
            self.planner.learn(seconds)
            if self.stats is not None:
                self.stats.add(worker, cpu, first_sight=True)
            if entries:
                for v, box in enumerate(self.outbox):
                    if v != w:
                        box.append(entries)

    def _encode(self, batch: _Batch, sight: list[Future[Any] | None]) -> None:
        self._collect(sight)
        w = self.rows.index(min(self.rows))  # the lane with the fewest rows so far
        self.rows[w] += batch.n
        entries, self.outbox[w] = self.outbox[w], []
        self.sent += 1
        args = (batch, entries, self.spec, self.source, self.id_column, self.out_dir, self.sent)
        self.results.append(self.lanes[w].submit(encode_batch_task, *args))

    def _take(self) -> _BatchResult:
        result, worker, cpu = self.results.popleft().result()
        if self.stats is not None:
            self.stats.add(worker, cpu)
        return _take_handoff(result) if isinstance(result, _Handoff) else result

    def run(self, batches: Iterator[_Batch]) -> Iterator[_BatchResult]:
        window = 2 * len(self.lanes)
        waiting: deque[tuple[_Batch, list[Future[Any] | None]]] = deque()
        try:
            for batch in batches:
                waiting.append((batch, self._first_sight(batch)))
                if len(waiting) > 1:  # first sight runs one batch ahead of the records
                    self._encode(*waiting.popleft())
                while len(self.results) > window:
                    yield self._take()
            while waiting:
                self._encode(*waiting.popleft())
            while self.results:
                yield self._take()
        finally:
            stop_tasks([*self.results, *(f for _, sight in waiting for f in sight)])


def stop_tasks(futures: Sequence[Future[Any] | None]) -> None:
    """Cancels the lanes' tasks not yet started and waits for those already running: a running
    task may still write its result into the job's tmpfs folder, which is removed next."""
    wait([f for f in futures if f is not None and not f.cancel()])


class _RangeLanes(_Lanes):
    """The same two steps on lanes that read the CSV themselves (``csv_ranges``): each range is
    parsed by one lane, which reports its distinct values; the parent keeps only the values no
    lane was given (``SeenValues.new_in``, in C), shares their first sight out as ``_Lanes``
    does, and the lane that parsed the range encodes it and hands the arrays over in a file."""

    RANGE_BLOCKS = 1  # CSV blocks (``encoder.CSV_BLOCK_BYTES``) per range at most; a range is
    # parsed whole (``csv_ranges.read_range``), so a driver may take more

    def __init__(self, *args: Any, path: str, layout: CsvLayout, out_dir: str | None) -> None:
        super().__init__(*args)
        self.path, self.layout, self.out_dir = path, layout, out_dir
        self.bytes = [0] * len(self.lanes)  # CSV bytes given to each lane so far

    def _scan(self, key: int, part: CsvRange) -> tuple[int, int, Future[Any]]:
        w = self.bytes.index(min(self.bytes))
        self.bytes[w] += part.size
        args = (self.spec, key, self.path, part, self.layout, self.source)
        return key, w, self.lanes[w].submit(scan_range_task, *args)

    def _encode_range(
        self, key: int, w: int, first_row: int, sight: list[Future[Any] | None]
    ) -> None:
        self._collect(sight)
        entries, self.outbox[w] = self.outbox[w], []
        args = (self.spec, key, first_row, entries, self.source, self.id_column, self.out_dir)
        self.results.append(self.lanes[w].submit(encode_held_task, *args))

    def run_ranges(self, ranges: list[CsvRange]) -> Iterator[_BatchResult]:
        """Results in input order; raises ``NotSplittable`` (before any result if a lane finds
        it in the first ranges, else mid-way: the caller starts again the exact way)."""
        window = 2 * len(self.lanes)
        todo = iter(enumerate(ranges))
        scans: deque[tuple[int, int, Future[Any]]] = deque(
            self._scan(*kp) for kp in islice(todo, window)
        )
        waiting: deque[tuple[int, int, int, list[Future[Any] | None]]] = deque()
        row = 1  # the first row of the next range
        try:
            while scans:
                key, w, scan = scans.popleft()
                if (nxt := next(todo, None)) is not None:
                    scans.append(self._scan(*nxt))
                try:
                    n, distinct, worker, cpu = scan.result()
                except EncodeDataError:  # named rows from 1: find it again with the true rows
                    failed: Future[Any] = Future()
                    try:
                        read_range(self.path, ranges[key], self.layout, self.source, row)
                        raise AssertionError("a range failed in a lane, not here")
                    except EncodeDataError as exc:
                        failed.set_exception(exc)
                    while waiting:
                        self._encode_range(*waiting.popleft())
                    self.results.append(failed)
                    break
                if self.stats is not None:
                    self.stats.add(worker, cpu, reading=True)
                if not n:
                    continue
                new = self.seen.new_in(distinct)
                waiting.append((key, w, row, self._first_sight_of(new)))
                row += n
                if len(waiting) > 1:  # first sight runs one range ahead of the records
                    self._encode_range(*waiting.popleft())
                while len(self.results) > window:
                    yield self._take()
            while waiting:
                self._encode_range(*waiting.popleft())
            while self.results:
                yield self._take()
        finally:
            stop_tasks([*self.results, *(scan for _, _, scan in scans)])


class _PeerLanes:
    """Lanes that read and encode their own ranges (the default on this machine's lanes;
    with ``peer_sight`` they also share first sight among themselves): the parent only hands
    out ranges (to the lane with the fewest unfinished, at most two per lane) with their first
    rows, known from the line counts, and takes the results in input order; the lanes write
    the arrays in place. An error a lane raises names its true row, and is raised here when
    the results before it are taken, so it is the first error one process raises."""

    def __init__(
        self,
        lanes: Sequence[Executor],
        spec: EncoderSpec,
        job: RangeJob,
        stats: ParallelStats | None,
    ) -> None:
        self.lanes, self.spec, self.job, self.stats = list(lanes), spec, job, stats

    def run(self, ranges: list[CsvRange], lines: list[int]) -> Generator[_BatchResult]:
        """Results in input order; raises ``NotSplittable`` (the caller starts again). A lane
        gets its next range as soon as one of its ranges is done (at most two unfinished per
        lane), not when its result's turn comes: a lane whose ranges go faster is not left
        idle behind the other's (at most ``4 * lanes`` results, done or not, are held)."""
        running: dict[Future[Any], int] = {}  # unfinished range -> its lane
        pending: deque[tuple[int, Future[Any]]] = deque()  # every range not taken, in order
        firsts = np.cumsum([1, *lines[:-1]]).tolist()  # each range's first row
        todo = iter(zip(ranges, firsts, strict=True))
        most = 4 * len(self.lanes)

        def unfinished() -> list[int]:  # unfinished ranges per lane
            counts = [0] * len(self.lanes)
            for w in running.values():
                counts[w] += 1
            return counts

        def submit() -> bool:
            nxt = next(todo, None)
            if nxt is None:
                return False
            busy = unfinished()
            w = busy.index(min(busy))
            fut = self.lanes[w].submit(peer_range_task, self.spec, self.job, w, *nxt)
            running[fut] = w
            pending.append((w, fut))
            return True

        def refill() -> None:
            while min(unfinished()) < 2 and len(pending) < most and submit():
                pass

        def finished(futures: Iterable[Future[Any]]) -> None:
            for fut in futures:
                running.pop(fut, None)

        submit()
        if pending and self.job.exchange:  # a head start: the first (small) range's commonest
            wait([pending[0][1]])  # values reach every lane before they start
        refill()
        try:
            while pending:
                head = pending[0][1]
                if not head.done():
                    done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                    finished(done)
                    refill()
                    continue
                pending.popleft()
                finished([head])
                out, worker, (reading, sight, encoding), installed, steps = head.result()
                if self.stats is not None:
                    self.stats.add_steps(steps)
                    self.stats.add(worker, reading, reading=True)
                    self.stats.add(worker, sight, first_sight=True)
                    self.stats.add(worker, encoding)
                    self.stats.shared_values += installed
                refill()
                yield out.take() if isinstance(out, _Placed) else out
        finally:
            stop_tasks([fut for _, fut in pending])


class _ProgressOnce:
    """A progress callback that, when the encoding starts again, does not count rows twice."""

    def __init__(self, progress: Callable[[int], None] | None) -> None:
        self.progress = progress
        self.told = 0  # rows reported so far
        self.seen = 0  # rows of the current attempt

    def restart(self) -> None:
        self.seen = 0

    def __call__(self, rows: int) -> None:
        self.seen += rows
        if self.progress is not None and self.seen > self.told:
            self.progress(self.seen - self.told)
            self.told = self.seen


def encode_csv_parallel(
    encoder: Encoder,
    path: str | Path,
    *,
    workers: int | None = None,
    id_column: str | None = None,
    progress: Callable[[int], None] | None = None,
    lanes: Sequence[Executor] | None = None,
    stats: ParallelStats | None = None,
    lanes_read_file: bool = False,
    range_lanes: type[_RangeLanes] | None = None,
    own_ranges: bool | None = None,
    peer_sight: bool = False,
    routed_sight: bool | None = None,
) -> tuple[EncodedRecords, EncodeReport]:
    """``encoder.encode_csv(path, ...)`` with the batches encoded on ``workers`` persistent
    processes (``None``/0: every core) or on ``lanes`` if given (each an executor of one
    worker, e.g. ``party.cluster.dask_lanes``); identical results (module docstring). A file of
    one CSV block is encoded here, without starting processes.

    ``own_ranges`` (default: yes for the persistent local lanes, no for ``lanes`` given): each
    lane reads and encodes whole ranges of the CSV on its own and writes the arrays into the
    output in place; the parent only counts lines, hands out ranges and checks record ids.
    ``routed_sight`` (default: with ``own_ranges``, unless ``peer_sight``): the ranges go a
    wave at a time, and the first sight of a value two lanes meet is computed once, by one,
    and sent to the others (``cluster_waves.PlacedWaveLanes``); else each lane computes the
    first sight of the values it meets itself (``_PeerLanes``).
    ``peer_sight``: the same, the lanes also sharing the first-sight entries they compute
    (``peer_sight`` module; measured costlier than computing them again at 1M records).

    ``lanes_read_file``: the lanes run on this machine and read their own ranges of the CSV
    with the parent sharing first sight out (``_RangeLanes``; the embedded Dask cluster's
    path). ``range_lanes``: the driver of such lanes (default ``_RangeLanes``; the embedded
    Dask cluster's is ``party.cluster_waves.WaveLanes``). Otherwise the parent reads the CSV
    and sends batches (``_Lanes``), as for any CSV ``csv_ranges`` cannot split.
    """
    n = resolve_workers(workers)
    seeded_blip = (
        encoder._blip_rng is not None and encoder.schema.hardening.blip_flip_probability is not None
    )
    if seeded_blip or (lanes is None and (n <= 1 or _one_batch(path))):
        if seeded_blip and n > 1:
            log.info("a seeded BLIP generator was injected: encoding in one process")
        return encoder.encode_csv(path, id_column=id_column, progress=progress)
    if own_ranges is None:
        own_ranges = lanes is None and not lanes_read_file
    own_ranges = own_ranges or peer_sight or bool(routed_sight)
    if routed_sight is None:
        routed_sight = own_ranges and not peer_sight
    use = start_lanes(n) if lanes is None else list(lanes)
    spec = EncoderSpec(encoder.schema, encoder._secret, secrets.token_hex(8))
    args = (use, encoder, spec, str(Path(path)), id_column, stats)
    block_bytes = block_bytes_for(path, len(use))
    progress_once = _ProgressOnce(progress)
    try:
        try:
            if own_ranges:
                return _encode_own_ranges(
                    encoder,
                    path,
                    use,
                    spec,
                    id_column,
                    stats,
                    progress_once,
                    peer_sight,
                    routed_sight,
                )
            if lanes_read_file:
                ranger = range_lanes or _RangeLanes
                most = ranger.RANGE_BLOCKS * encoder_module.CSV_BLOCK_BYTES
                split = split_ranges(  # the same whole number of ranges for every lane
                    path, block_bytes_for(path, len(use), most)
                )
                if split is not None:
                    ranges, rows = split
                    layout = encoder.csv_layout(Path(path), id_column)
                    in_flight = min(rows, (2 * len(use) + 4) * rows // max(1, len(ranges)))
                    need = 2 * in_flight * 8 * (bits.words_for(encoder.schema.output_bits) + 1)
                    need += 2 * in_flight * 8 * encoder.schema.digest_width
                    with scratch_folder(need) as out:
                        ranged = ranger(*args, path=str(path), layout=layout, out_dir=out)
                        return encoder.encode_results(
                            ranged.run_ranges(ranges),
                            str(Path(path)),
                            id_column,
                            progress_once,
                            rows,
                        )
        except NotSplittable:
            log.info("the CSV has quotes, empty lines or lone carriage returns: read here")
            progress_once.restart()
        batched = _Lanes(*args)
        room = 2 * (2 * len(use) + 4) * block_bytes * 8  # results in flight (~8x their CSV)
        # results come back in files only from lanes on this machine (Dask's may be elsewhere)
        place = scratch_folder(room) if lanes is None else contextlib.nullcontext(None)
        with place as batched.out_dir:
            return encoder.encode_csv(
                path,
                id_column=id_column,
                progress=progress_once,
                map_batches=batched.run,
                block_bytes=block_bytes,
            )
    finally:  # the job's encoders and memo tables are freed on every lane when it ends
        _forget_everywhere(use, spec.token, wait=lanes is not None)


def _encode_own_ranges(
    encoder: Encoder,
    path: str | Path,
    lanes: list[Executor],
    spec: EncoderSpec,
    id_column: str | None,
    stats: ParallelStats | None,
    progress: _ProgressOnce,
    peer_sight: bool,
    routed_sight: bool | None = None,
) -> tuple[EncodedRecords, EncodeReport]:
    """The lanes read, encode and write whole ranges (``_PeerLanes``; with ``routed_sight``
    ``cluster_waves.PlacedWaveLanes``); raises ``NotSplittable`` if the CSV cannot be cut at
    line ends (the caller reads it here)."""
    from party.cluster_waves import PlacedWaveLanes

    waves: PlacedWaveLanes | None = None
    if routed_sight:
        most = PlacedWaveLanes.RANGE_BLOCKS * encoder_module.CSV_BLOCK_BYTES
        split = split_ranges(path, block_bytes_for(path, len(lanes), most))
        if split is not None:  # the lanes parse the first wave while the lines are counted
            tail = 0
            if len(split[0]) >= PlacedWaveLanes.RANGES_PER_LANE * len(lanes):
                # the last range of each lane cut into pieces the lanes take as they are free
                cut = cut_tail(path, split[0], len(lanes), encoder_module.CSV_BLOCK_BYTES // 4)
                tail = len(cut) - len(split[0]) + len(lanes)
                split = (cut, split[1])
            layout = encoder.csv_layout(Path(path), id_column)
            waves = PlacedWaveLanes(
                lanes,
                encoder,
                spec,
                str(Path(path)),
                id_column,
                stats,
                path=str(path),
                layout=layout,
                out_dir=None,
            )
            waves.tail = tail
            waves.begin(split[0])
    elif peer_sight:
        block = min(block_bytes_for(path, len(lanes)), PEER_RANGE_BYTES)
        split = split_ranges(path, block, PEER_FIRST_BYTES)
    else:  # ranges of two CSV blocks: measured cheaper per row than one or half a block
        block = block_bytes_for(path, len(lanes), 2 * encoder_module.CSV_BLOCK_BYTES)
        split = split_ranges(path, block, last_bytes=encoder_module.CSV_BLOCK_BYTES // 4)
    try:
        return _encode_counted(
            encoder, path, lanes, spec, id_column, stats, progress, peer_sight, split, waves
        )
    finally:
        if waves is not None:  # not taken if the lines could not be counted
            stop_tasks(waves.begun)


def _encode_counted(
    encoder: Encoder,
    path: str | Path,
    lanes: list[Executor],
    spec: EncoderSpec,
    id_column: str | None,
    stats: ParallelStats | None,
    progress: _ProgressOnce,
    peer_sight: bool,
    split: tuple[list[CsvRange], int] | None,
    waves: PlacedWaveLanes | None,
) -> tuple[EncodedRecords, EncodeReport]:
    """``_encode_own_ranges`` once the ranges are cut (and, routed, the first wave given to
    the lanes: ``waves``): the lines counted, the output file reserved, the results taken."""
    lines = None if split is None else line_counts(path, split[0])
    if split is None or lines is None:
        raise NotSplittable
    ranges, rows = split[0], sum(lines)
    layout = encoder.csv_layout(Path(path), id_column)
    words = bits.words_for(encoder.schema.output_bits)
    width = encoder.schema.digest_width
    size = 8 * rows * (words + width)
    # routed entries that find no room on tmpfs travel as pickles instead (``_entries_file``)
    room = size + (PEER_SHARED_BYTES * len(lanes) if peer_sight else 0)
    with scratch_folder(room) as folder:
        output = _output_file(folder, size)
        if output is None:
            arrays = np.zeros(rows * (words + width), dtype=np.uint64)
        else:
            arrays = np.frombuffer(output[1], dtype=np.uint64)
        out = (
            arrays[: rows * words].reshape(rows, words),
            arrays[rows * words :].reshape(rows, width),
        )
        source = str(Path(path))
        job = RangeJob(
            str(path),
            layout,
            source,
            id_column,
            folder,
            len(lanes),
            None if output is None else output[0],
            rows,
            words,
            width,
            peer_sight,
        )
        if waves is not None:
            waves.out_dir, waves.job, waves.lines = folder, job, lines
            running: Generator[_BatchResult] = waves.run_ranges(ranges)
        else:
            running = _PeerLanes(lanes, spec, job, stats).run(ranges, lines)
        # closed before the folder is removed: a running task may still write into it
        with contextlib.closing(running) as results:
            return encoder.encode_results(results, source, id_column, progress, rows, out)


def _output_file(folder: str | None, size: int) -> tuple[str, mmap.mmap] | None:
    """A file of ``size`` bytes in ``folder`` (tmpfs), its space reserved (so neither a
    lane's write nor a write through the mapping can find tmpfs full), mapped shared; None
    if there is no folder or no room (the arrays then come back pickled)."""
    if folder is None or size == 0:
        return None
    out = os.path.join(folder, "output.u64")
    try:
        with open(out, "w+b") as fh:
            os.posix_fallocate(fh.fileno(), 0, size)
            return out, mmap.mmap(fh.fileno(), size)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(out)
        return None


@contextlib.contextmanager
def scratch_folder(need: int, prefix: str = "pprl-encode-") -> Iterator[str | None]:
    """A private directory (0700) on tmpfs (/dev/shm) for lanes (or the embedded cluster's
    workers) to hand arrays over, removed with what is left in it when the job ends; None
    (results pickled) if /dev/shm is missing or has less than ``need`` bytes free (a container's
    default /dev/shm is 64 MiB)."""
    try:
        st = os.statvfs("/dev/shm")
        room = st.f_bavail * st.f_frsize if os.access("/dev/shm", os.W_OK) else 0
    except OSError:
        room = 0
    if room < need:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix=prefix, dir="/dev/shm") as out:
        yield out


def _forget_everywhere(lanes: Sequence[Executor], token: str, wait: bool = True) -> None:
    """``forget_task`` on every lane; a lane whose process died holds nothing any more. With
    ``wait`` False (this process's lanes: one process each, tasks run in the order given) the
    forget is queued without waiting for it: it runs before any later task of the lane, so the
    caller does not wait for the lanes to free the job's memo tables."""
    futures = []
    for lane in lanes:
        with contextlib.suppress(BrokenExecutor, RuntimeError):
            futures.append(lane.submit(forget_task, token))
    if not wait:
        return
    for fut in futures:
        with contextlib.suppress(BrokenExecutor, CancelledError):
            fut.result()
