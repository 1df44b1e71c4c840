"""The mpc3 circuit's batches on the party's Dask workers: a compute party's ``Circuits``.

A compute party whose node has a ``[cluster]`` table evaluates the batches of each window
(``party.mpc.flight``: ``BATCHES_IN_FLIGHT`` batches whose rounds interleave) on its Dask workers.
Each worker holds one ``CircuitWorker``, a Dask actor: an object that stays on its worker, whose
method calls go to it directly rather than through the scheduler (a round costs one call per
batch; on a scheduler address's cluster only with Dask's ``distributed.client.direct-to-workers``
set, else the scheduler passes them on). A window's batches go to distinct actors (W at most
``BATCHES_IN_FLIGHT``: more workers would have nothing to do), the largest to the actor given
the fewest candidate sets so far, and all of them step at once: the node sends every batch its
incoming round payload and takes back its next round (or, at its end, its match bits and opened
c and x). The payloads and the outcome are those of ``LocalCircuits`` on the node's threads.

What a worker gets, once per run: the compute party's index, the run's parameters, its two PRF
keys, and the filter and count-term shares of every data party (not their pseudonyms or block
digests); per batch its candidate rows; per round the batch's incoming payload. The embedded
cluster's workers (this machine) map the shares from a file of a private tmpfs folder, their bytes
reserved on the node's memory budget, and take one of the machine's cores while they compute
(``party.cluster_tasks.CoreSlots``); a scheduler address's get them through Dask. On the embedded
cluster a batch's round payloads cross in a file of that folder too (``RoundFiles``: one per
running batch, rewritten in place each round and handed on to a batch of the next window),
and such a step is asked of the actor over its round channel (``party.round_channel``: a Unix
socket of that folder, served by a thread of the actor's own), not through Dask; a batch's start
and result, an error, and a payload whose file the budget or tmpfs refuses go through Dask.
Everything goes only to the party's own workers; round payloads reach the other compute parties
only through the node. A failed call or a lost worker is a ClusterError naming the worker and the
error's type, never data; every actor, file and reservation goes when the circuit ends or fails.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import socket
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from party.cluster import ClusterError, dask_client, serving_thread
from party.cluster_tasks import ClusterTasks, CoreSlots, Mapped
from party.config import ClusterConfig
from party.encoding.parallel import scratch_folder
from party.mpc.errors import MpcCancelled
from party.mpc.flight import BATCHES_IN_FLIGHT, BatchJob, BatchResult, LocalCircuits, Step
from party.mpc.gates import Round
from party.mpc.inputs import InputShare
from party.mpc.keys import ComputeKeys
from party.protocol.params import ProtocolParameters
from party.protocol.spill import MemoryGauge
from party.round_channel import (
    ASK,
    ROUNDS_THREAD,
    TELL,
    ChannelClosed,
    ChannelServer,
    connect,
    receive,
)

log = logging.getLogger(__name__)

#: tmpfs room below which the embedded cluster's shares go through Dask
SCRATCH_MIN_BYTES = 1 << 26

_SHARE_ARRAYS = ("filters0", "filters1", "counts0", "counts1")


def _share_arrays(share: InputShare) -> dict[str, np.ndarray]:
    """What a worker's circuits read of a data party's input share."""
    return dict(zip(_SHARE_ARRAYS, (*share.filters, *share.counts), strict=True))


def _share_of(
    source: int, target: int, filter_bits: int, arrays: dict[str, np.ndarray]
) -> InputShare:
    """An input share for the circuit (no pseudonyms or digests: the node keeps those)."""
    none = np.zeros(0, dtype=np.uint64)
    return InputShare(
        source=source,
        target=target,
        filter_bits=filter_bits,
        pseudonyms=none,
        block_digests=none.reshape(0, 1),
        filters=(arrays["filters0"], arrays["filters1"]),
        counts=(arrays["counts0"], arrays["counts1"]),
    )


#: a step as it crosses between the node and a worker: a Round as (batch, number, payload as a
#: uint8 array), which Dask sends as a buffer of its own where a pickled Round copies its bytes
#: into the pickle (4 MiB: 0.5 ms against 3.4 ms to serialise), or as (batch, number, its length)
#: when the payload is in the batch's round file (``RoundFiles``); or a BatchResult as it is
Wire: TypeAlias = tuple[int, int, np.ndarray | int] | BatchResult


def to_wire(step: Step) -> Wire:
    """``step`` as it crosses through Dask (``Wire``)."""
    if isinstance(step, Round):
        return step.batch, step.number, np.frombuffer(step.payload, dtype=np.uint8)
    return step


def from_wire(got: Wire, files: RoundFiles | None = None, file: int = -1) -> Step:
    """The step that crossed as ``got`` (``to_wire``; a payload's length: read from round file
    ``file`` of ``files``)."""
    if isinstance(got, tuple):
        batch, number, payload = got
        if isinstance(payload, int | np.integer):
            if files is None or file < 0:
                raise ClusterError(f"cluster: batch {batch}'s round came in a file not made")
            return Round(int(batch), int(number), files.read(file, int(payload)))
        return Round(int(batch), int(number), np.ascontiguousarray(payload).tobytes())
    return got


#: seconds the node waits for its actors' round channels, once the actors are made (each
#: connected while it was made: its connection waits to be taken)
CHANNEL_TIMEOUT_S = 10.0


#: the length a round file is made with and mapped (sparse on tmpfs: only the bytes allocated
#: for its payloads take memory); a larger payload crosses through Dask
ROUND_FILE_BYTES = 1 << 30
_MADV_POPULATE_WRITE = 23  # Linux 5.14: map a range's pages in one call, not a fault per page


@dataclass
class _RoundFile:
    fd: int
    map: mmap.mmap
    ready: int = 0  # bytes from the start known allocated, and mapped in here (the head)
    low: int = 0  # the offset from which the bytes to the end are (the tail; made: the end)


class RoundFiles:
    """The round files of one side (the node or a worker) of a circuit on the embedded cluster:
    files ``round-<file>`` of the circuit's private folder (mode 0600), each held by one running
    batch at a time, mapped. Its worker writes each round at offset 0 (its head, rewritten in
    place: warm in the caches), the node copies it out and writes the reply (the same size)
    below the batch's earlier replies at the file's end (its tail), and the worker's circuit
    reads the reply where it is (``view``: no copy, kept as long as the circuit needs it); so
    the tail holds a batch's replies, written again only by the next batch that takes the file
    (the last one has ended: nothing reads its replies). A side allocates the bytes
    (``posix_fallocate``) before it first writes them, so a full tmpfs is an OSError (the
    payload then crosses through Dask), never a fault in the mapping; a file keeps them, and
    its mappings, for the batches after (allocating and mapping in a file's pages for every
    batch cost each worker 13,000 page faults a circuit, 3 x 400k on 4 workers). The node makes and removes the files (``make``, ``remove``: never
    emptied, a worker may read them) and reserves their bytes on its budget before they are
    written (``ClusterCircuits``); a worker opens them."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self._files: dict[int, _RoundFile] = {}
        self._finalizer = weakref.finalize(self, _close_all, self._files)

    def path(self, file: int) -> str:
        return os.path.join(self.folder, f"round-{file}")

    def make(self, file: int) -> None:
        """Create round file ``file``, no byte of it allocated (the node); OSError if it
        cannot."""
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        self._files[file] = _mapped(os.open(self.path(file), flags, 0o600), made=True)

    def _file(self, file: int) -> _RoundFile:
        got = self._files.get(file)
        if got is None:  # a worker: the node made it
            got = self._files[file] = _mapped(os.open(self.path(file), os.O_RDWR | os.O_CLOEXEC))
        return got

    def _ready(self, f: _RoundFile, at: int, end: int) -> None:
        """The file's bytes [at, end) allocated and mapped in here (OSError: no room): in its
        head (the first half: rounds, at 0) or its tail (the second: replies), each grown by
        the bytes beyond those ready only."""
        if end <= f.ready or at >= f.low:
            return
        head = at < ROUND_FILE_BYTES // 2
        if head:
            start, stop = f.ready - f.ready % mmap.PAGESIZE, end
        else:
            start, stop = at - at % mmap.PAGESIZE, f.low
        os.posix_fallocate(f.fd, start, stop - start)  # the other side's bytes: a no-op
        with contextlib.suppress(OSError, ValueError):  # an older kernel: faults instead
            f.map.madvise(_MADV_POPULATE_WRITE, start, stop - start)
        if head:
            f.ready = end
        else:
            f.low = start

    def write(self, file: int, payload: bytes | memoryview, at: int = 0) -> bool:
        """``payload`` into round file ``file`` at offset ``at``; False if it goes beyond the
        file, or tmpfs has no room for it, or the file cannot be mapped here."""
        end = at + len(payload)
        if not 0 <= at <= end <= ROUND_FILE_BYTES:
            return False
        try:
            f = self._file(file)  # a worker maps it on first use
            self._ready(f, at, end)
        except OSError:
            return False
        f.map[at:end] = payload
        return True

    def read(self, file: int, nbytes: int) -> bytes:
        """A copy of the ``nbytes`` of the round at the start of round file ``file``."""
        return bytes(self.view(file, 0, nbytes))

    def view(self, file: int, at: int, nbytes: int) -> memoryview:
        """The ``nbytes`` of the payload in round file ``file`` at offset ``at`` (written by
        the other side, which allocated them), read-only and where they are."""
        if not 0 <= at <= at + nbytes <= ROUND_FILE_BYTES:
            raise ClusterError(f"cluster: a round of {nbytes} bytes at {at} is not in a file")
        f = self._file(file)
        self._ready(f, at, at + nbytes)
        return memoryview(f.map).toreadonly()[at : at + nbytes]

    def close(self, file: int) -> None:
        """Unmap and close round file ``file`` (it stays until ``remove``)."""
        f = self._files.pop(file, None)
        if f is not None:
            _close(f)

    def remove(self, file: int) -> None:
        """Close and remove round file ``file`` (the node); its memory goes when the last
        worker that maps it unmaps it (never emptied first: a worker may read a reply there)."""
        self.close(file)
        with contextlib.suppress(OSError):
            os.unlink(self.path(file))


def _mapped(fd: int, made: bool = False) -> _RoundFile:
    """A round file's descriptor mapped (``made``: sized first); closed on failure."""
    try:
        if made:
            os.ftruncate(fd, ROUND_FILE_BYTES)
        return _RoundFile(fd, mmap.mmap(fd, ROUND_FILE_BYTES), low=ROUND_FILE_BYTES)
    except BaseException:
        os.close(fd)
        raise


def _close(f: _RoundFile) -> None:
    with contextlib.suppress(OSError, BufferError):
        f.map.close()
    with contextlib.suppress(OSError):
        os.close(f.fd)


def _close_all(files: dict[int, _RoundFile]) -> None:
    for f in files.values():
        _close(f)
    files.clear()


def place_batches(sizes: Sequence[int], given: list[int]) -> list[int]:
    """The actor of each of a window's batches (``sizes``: their candidate sets; ``given``: the
    sets each actor was given so far, updated here): the largest batch first, each to the actor
    with the fewest of the window's batches, then the fewest sets given, then the first; so the
    actors' work stays even across windows, where a pair of parties' last batch is smaller."""
    placed = [0] * len(sizes)
    here = [0] * len(given)  # the window's batches per actor
    for k in sorted(range(len(sizes)), key=lambda k: (-sizes[k], k)):
        at = min(range(len(given)), key=lambda a: (here[a], given[a], a))
        placed[k] = at
        here[at] += 1
        given[at] += sizes[k]
    return placed


class CircuitWorker:
    """Runs on a worker (a Dask actor): the batches of a compute party's windows it holds.

    ``shares`` are (source, Mapped) or (source, arrays); ``gate`` (folder, slots) makes each
    call hold one of the machine's cores (the embedded cluster with more workers than cores);
    ``rounds``: the folder of the batches' round files (``RoundFiles``; None: through Dask);
    ``channel`` (socket path, token, actor index): the node's round channel, served by a
    thread of this actor's own (``party.round_channel``; None: every step through Dask).
    """

    def __init__(
        self,
        index: int,
        params: ProtocolParameters,
        keys: ComputeKeys,
        shares: Sequence[tuple[int, Mapped | dict[str, np.ndarray]]],
        gate: tuple[str, int] | None,
        rounds: str | None = None,
        channel: tuple[str, bytes, int] | None = None,
    ) -> None:
        from party.mpc.pairs import compute_party_class

        # each round's payload is copied (into its file, or by Dask) before the next call
        party = compute_party_class(params)(index, params, keys, workers=1, payload_views=True)
        inputs = [
            _share_of(
                source,
                index,
                params.filter_bits,
                arrays.arrays() if isinstance(arrays, Mapped) else arrays,
            )
            for source, arrays in sorted(shares, key=lambda s: s[0])
        ]
        self._local = LocalCircuits(party, inputs)
        self._slots = None if gate is None else CoreSlots(*gate)
        self._files = None if rounds is None else RoundFiles(rounds)
        self._file_of: dict[int, int] = {}  # running batch -> its round file
        self._one_step = threading.Lock()  # the actor's thread and the channel's take turns
        self._kept: dict[int, Wire | Exception] = {}  # a channel's step for the node to take
        if channel is not None and self._files is not None:
            try:
                sock = connect(*channel)
            except OSError:  # the node takes every step through Dask (``ClusterCircuits``)
                return
            serve = threading.Thread(target=self._serve, args=(sock,), name=ROUNDS_THREAD)
            serve.daemon = True
            serve.start()

    def _held(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext() if self._slots is None else self._slots.hold()

    def start(self, job: BatchJob, room: int = 0, file: int = -1) -> Wire:
        """The batch's first step; the batch's rounds cross in round file ``file`` (-1: none)
        when they fit in ``room`` (``advance``)."""
        with self._one_step, self._held():
            self._file_of[job.batch] = file
            return self._wire(job.batch, self._local.start_one(job), room)

    def advance(self, batch: int, payload: np.ndarray | int, room: int = 0, at: int = 0) -> Wire:
        """The batch's next step, given the incoming payload as a uint8 array (``to_wire``) or
        as its length in the batch's round file at offset ``at`` (read there, not copied); the
        step's round at the file's offset 0 if it fits in ``room`` (the bytes the node reserved
        there; 0: none)."""
        with self._one_step, self._held():
            file = self._file_of.get(batch, -1)
            if isinstance(payload, np.ndarray):
                data: bytes | memoryview = payload.data
            elif self._files is None or file < 0:
                raise ClusterError(f"cluster: batch {batch}'s round came in a file not made")
            else:
                data = self._files.view(file, at, payload)
            return self._wire(batch, self._local.advance(batch, data), room)

    def take(self, batch: int) -> Wire:
        """The step of ``batch`` its channel kept (``party.round_channel``: a TELL of -1); its
        error, raised."""
        got = self._kept.pop(batch)
        if isinstance(got, Exception):
            raise got
        return got

    def _serve(self, sock: socket.socket) -> None:
        """The channel's thread: each ASK's step (``advance`` of the payload in the batch's
        file), told back as a TELL, or kept for ``take``; ends when the node closes it."""
        served = serving_thread()
        with sock, contextlib.suppress(OSError, ChannelClosed):
            while True:
                batch, at, length, room = ASK.unpack(receive(sock, ASK.size))
                number = -1
                try:
                    wire = self.advance(batch, length, room, at)
                except Exception as exc:  # noqa: BLE001 (the node takes it through Dask)
                    self._kept[batch] = exc
                else:
                    if isinstance(wire, tuple) and not isinstance(wire[2], np.ndarray):
                        number, length = wire[1], int(wire[2])
                    else:
                        self._kept[batch] = wire
                sock.sendall(TELL.pack(batch, number, length))
                served()

    def _wire(self, batch: int, step: Step, room: int) -> Wire:
        """``step`` of ``batch`` as it crosses: a round in the batch's file at offset 0 if it
        fits in ``room`` and tmpfs takes it; at the batch's end the file stays mapped here
        for the batch the node hands it to next."""
        files = self._files
        if isinstance(step, Round):
            file = self._file_of.get(batch, -1)
            fits = 0 < len(step.payload) <= room and file >= 0
            if fits and files is not None and files.write(file, step.payload):
                return step.batch, step.number, len(step.payload)
        else:
            self._file_of.pop(batch, None)
        return to_wire(step)


class ClusterCircuits(ClusterTasks):
    """A compute party's ``Circuits`` on its Dask workers (module docstring). Calling it with
    the compute party and its inputs (the ``CircuitsFactory`` of ``ComputeParty``) sends the
    shares and starts one actor on each worker it uses."""

    def __init__(self, *args: Any, cancel: threading.Event | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cancel = cancel
        self._actors: list[tuple[str, Any]] = []  # (worker, actor) in address order
        self._where: dict[int, tuple[str, Any, int]] = {}  # batch -> worker, actor, its index
        self._sets: list[int] = []  # candidate sets given to each actor so far
        #: the round files (the embedded cluster): their reserved bytes, the running batch that
        #: holds each, the files no batch holds by the actor whose batch held one last (handed
        #: to that actor's next batch first: its worker has the file's pages mapped in)
        self._files = None if self.folder is None else RoundFiles(self.folder)
        #: file -> bytes reserved for its head (a round) and its tail (a batch's replies)
        self._filed: dict[int, tuple[int, int]] = {}
        self._file_of: dict[int, int] = {}  # running batch -> its file
        self._top: dict[int, int] = {}  # running batch -> where its last reply starts
        self._refused: set[int] = set()  # running batches whose rounds go through Dask
        self._free: dict[int, list[int]] = {}
        self._made = 0  # files made so far (the next one's number)
        self._largest = 0  # the largest round payload so far (a new file's first reservation)
        #: the actors' round channels (the embedded cluster with round files; else None)
        self._channels: ChannelServer | None = None
        self.calls = 0  # steps asked of the actors, through Dask or a round channel
        self.channel_steps = 0  # of them over round channels
        self.payloads_in_files = 0  # round payloads that crossed in files, both ways

    def __call__(self, party: Any, inputs: list[InputShare]) -> ClusterCircuits:
        if self._actors:
            raise ClusterError("cluster: the circuit's workers were started already")
        # a window's batches use at most BATCHES_IN_FLIGHT workers: actors (and shares) go
        # only to those
        hosts = self.workers[:BATCHES_IN_FLIGHT]
        shares: list[tuple[int, Any]] = []
        for share in inputs:
            arrays = _share_arrays(share)
            mapped = self._write(f"share-{share.source}", 0, arrays)
            shares.append((share.source, arrays if mapped is None else mapped))
        for k, (source, s) in enumerate(shares):
            if not isinstance(s, Mapped):  # no folder, or no room: to each host's actor
                self.sent_bytes += len(hosts) * sum(int(x.nbytes) for x in s.values())
                # one future for the share (a dict's keys would name its arrays' futures)
                shares[k] = (source, self._scatter([s], hosts)[0])
        gate = (self.folder, self.slots) if self.slots is not None else None
        if self._files is not None:
            with contextlib.suppress(OSError):  # no channels: every step through Dask
                self._channels = ChannelServer(self._files.folder)
        channels = self._channels
        futures = []
        for at, worker in enumerate(hosts):
            channel = None if channels is None else (channels.path, channels.token, at)
            future = self.client.submit(
                CircuitWorker,
                party.index,
                party.params,
                party.keys,
                shares,
                gate,
                self.folder,
                channel,
                actor=True,
                workers=[worker],
                allow_other_workers=False,
            )
            self._futures.append(future)
            futures.append((worker, future))
        self._actors = [
            (worker, self._wait("starting the circuit's actor", worker, future))
            for worker, future in futures
        ]
        self._sets = [0] * len(self._actors)
        if channels is not None:
            try:
                channels.accept(len(self._actors), CHANNEL_TIMEOUT_S)
            except OSError:
                log.warning("circuit: the round channels did not open; its rounds go through Dask")
                channels.close()
                self._channels = None
        return self

    def start(self, jobs: Sequence[BatchJob]) -> list[Step]:
        calls: list[Callable[[], Any]] = []
        placed = place_batches([len(job.rows) for job in jobs], self._sets)
        for job, at in zip(jobs, placed, strict=True):
            worker, actor = self._actors[at]
            self._where[job.batch] = (worker, actor, at)
            file = self._take_file(job.batch, at)
            room = self._filed[file][0] if file >= 0 else 0
            calls.append(self._through_dask(job.batch, "start", job, room, file))
        return self._results(calls, [job.batch for job in jobs])

    def step(self, replies: Sequence[tuple[int, bytes]]) -> list[Step]:
        calls: list[Callable[[], Any]] = []
        for batch, payload in replies:
            at = self._top.get(batch, ROUND_FILE_BYTES) - len(payload)
            if not self._put(batch, payload, at):  # a buffer of its own (``Wire``)
                wired = np.frombuffer(payload, dtype=np.uint8)
                calls.append(self._through_dask(batch, "advance", batch, wired, 0))
                continue
            self._top[batch] = at
            room = min(self._filed[self._file_of[batch]][0], at)  # for its next round
            conn = (
                None
                if self._channels is None
                else self._channels.connections.get(self._where[batch][2])
            )
            if conn is None:
                args = (batch, len(payload), room, at)
                calls.append(self._through_dask(batch, "advance", *args))
            else:
                calls.append(self._over_channel(batch, conn, at, len(payload), room))
        return self._results(calls, [batch for batch, _ in replies])

    def _through_dask(self, batch: int, method: str, *args: Any) -> Callable[[], Any]:
        """Call ``method`` of the batch's actor now; what waits for its result."""
        worker, actor, _ = self._where[batch]
        what = f"batch {batch}"
        future = self._call(what, worker, actor, method, *args)
        return lambda: self._wait(what, worker, future)

    def _over_channel(
        self, batch: int, conn: socket.socket, at: int, length: int, room: int
    ) -> Callable[[], Any]:
        """Ask the batch's actor for its next step over its round channel now (the payload is
        in the batch's file at ``at``); what waits for the answer (``party.round_channel``)."""
        worker, _, _ = self._where[batch]
        what = f"batch {batch}"
        try:
            conn.sendall(ASK.pack(batch, at, length, room))
        except OSError:
            raise self._lost(what, worker) from None
        self.channel_steps += 1
        return lambda: self._hear(what, worker, conn, batch)

    def _hear(self, what: str, worker: str, conn: socket.socket, batch: int) -> Wire:
        """The actor's answer on its round channel: the round in the batch's file, or the step
        it kept, taken through Dask; while waiting, the run's cancel and the worker's presence
        are looked at."""

        def cancelled() -> None:
            if self.cancel is not None and self.cancel.is_set():
                raise MpcCancelled("computation cancelled")

        def waiting() -> None:
            cancelled()
            self._check_alive(what, worker)

        cancelled()  # as ``ClusterTasks._result``: a cancelled run takes no step's answer
        try:
            told, number, length = TELL.unpack(receive(conn, TELL.size, waiting))
        except (OSError, ChannelClosed):
            raise self._lost(what, worker) from None
        if told != batch:
            raise ClusterError(f"cluster: {what} of the circuit: worker {worker} answered another")
        if number < 0:
            return self._through_dask(batch, "take", batch)()
        return batch, number, length

    @staticmethod
    def _lost(what: str, worker: str) -> ClusterError:
        return ClusterError(
            f"cluster: {what} of the circuit was lost with worker {worker} (its round channel "
            "closed)"
        )

    def _take_file(self, batch: int, at: int) -> int:
        """The round file of a batch starting on actor ``at`` (-1: none, without a folder or
        room): one an ended batch held, that actor's first, else a new one; with the largest
        round so far reserved for its head. Its worker writes a round into it only within the
        bytes reserved (``CircuitWorker.advance``)."""
        if self._files is None:
            return -1
        free = self._free.get(at) or next((f for f in self._free.values() if f), None)
        if free:
            file = free.pop()
        else:
            file = self._made
            try:
                self._files.make(file)
            except OSError:
                return -1
            self._made += 1
            self._filed[file] = (0, 0)
        self._file_of[batch] = file
        self._top[batch] = ROUND_FILE_BYTES
        if not self._room(batch, self._largest, 0):
            return -1
        return file

    def _room(self, batch: int, head: int, tail: int) -> bool:
        """The batch's file may hold a round of ``head`` bytes and ``tail`` bytes of replies:
        reserved on the budget; refused: the batch's rounds go through Dask to its end (its file
        stays with it: its worker reads its replies where they are)."""
        file = self._file_of[batch]
        held = self._filed[file]
        want = (max(head, held[0]), max(tail, held[1]))
        if want != held:
            if not self._reserve(sum(want) - sum(held)):
                self._refused.add(batch)
                return False
            self._filed[file] = want
        return True

    def _put(self, batch: int, payload: bytes, at: int) -> bool:
        """The reply ``payload`` into the batch's file at ``at`` (True), if it has one with
        room for it, and for a next round as large as the largest so far."""
        if batch not in self._file_of or batch in self._refused:
            return False
        head = max(len(payload), self._largest)
        if at < max(head, ROUND_FILE_BYTES // 2) or not self._room(
            batch, head, ROUND_FILE_BYTES - at
        ):
            return False
        assert self._files is not None
        if not self._files.write(self._file_of[batch], payload, at):
            self._refused.add(batch)
            return False
        self.payloads_in_files += 1
        return True

    def _call(self, what: str, worker: str, actor: Any, method: str, *args: Any) -> Any:
        """The future of ``actor.method(*args)``; a ClusterError when the actor is known to be
        gone (its worker lost) before the call is made."""
        try:
            return getattr(actor, method)(*args)
        except Exception as exc:  # noqa: BLE001 (Dask's error: its type only)
            raise ClusterError(
                f"cluster: {what} of the circuit failed on worker {worker} ({type(exc).__name__})"
            ) from None

    def _results(self, calls: list[Callable[[], Any]], batches: list[int]) -> list[Step]:
        self.calls += len(calls)
        steps = []
        for wait, batch in zip(calls, batches, strict=True):
            got = wait()
            step = from_wire(got, self._files, self._file_of.get(batch, -1))
            if isinstance(step, Round):
                self._largest = max(self._largest, len(step.payload))
                if not isinstance(got[2], np.ndarray):  # in the file, within its reservation
                    self.payloads_in_files += 1
            else:  # a BatchResult: the batch has ended; its file goes to the next batch
                _, _, at = self._where.pop(batch)
                self._top.pop(batch, None)
                self._refused.discard(batch)
                file = self._file_of.pop(batch, None)
                if file is not None:
                    self._free.setdefault(at, []).append(file)
            steps.append(step)
        return steps

    def _wait(self, what: str, worker: str, future: Any) -> Any:
        """A call's result (``ClusterTasks._result``); a lost worker is found while it waits."""
        return self._result(
            f"{what} of the circuit",
            worker,
            future,
            self.cancel,
            cancelled=lambda: MpcCancelled("computation cancelled"),
            waiting=lambda: self._check_alive(what, worker),
        )

    def _check_alive(self, what: str, worker: str) -> None:
        """ClusterError if ``worker`` has left the cluster: its actor, and the state of its
        batches between their rounds, went with it (not rebuilt: their earlier rounds were
        sent)."""
        if worker not in self.client.scheduler_info()["workers"]:
            raise ClusterError(
                f"cluster: {what} of the circuit was lost with worker {worker} (it left the "
                "cluster)"
            )

    def close(self) -> None:
        if self._channels is not None:
            self._channels.close()  # each actor's channel thread ends
            self._channels = None
        self._where.clear()
        self._actors = []
        self._file_of.clear()
        self._top.clear()
        self._refused.clear()
        self._free.clear()
        for file, held in list(self._filed.items()):  # a call may still run (a failure, a cancel)
            assert self._files is not None
            self._files.remove(file)
            self._remove([], sum(held))
        self._filed.clear()
        super().close()


@contextlib.contextmanager
def circuits_on_cluster(
    cluster: ClusterConfig,
    workers: int | None,
    memory: MemoryGauge | None,
    cancel: threading.Event | None,
    *,
    connect_timeout: float = 60.0,
) -> Iterator[ClusterCircuits]:
    """A compute party's ``ClusterCircuits`` (its ``circuits`` factory) for one run on the
    party's Dask cluster (the embedded cluster: ``workers`` worker processes, started for the
    run and closed after it; a scheduler address: reached within ``connect_timeout`` seconds),
    with the shares' files in a private tmpfs folder."""
    with (
        dask_client(cluster, workers, connect_timeout=connect_timeout) as client,
        scratch_folder(SCRATCH_MIN_BYTES, "pprl-mpc-")
        if cluster.embedded
        else contextlib.nullcontext(None) as folder,
        ClusterCircuits(client, folder=folder, memory=memory, cancel=cancel) as circuits,
    ):
        yield circuits
        log.info(
            "circuit on %d Dask workers: %d steps (%d over round channels), %d round payloads in "
            "files, %.1f MB of shares sent (%.1f MB of them in files the workers map)",
            len(circuits.workers),
            circuits.calls,
            circuits.channel_steps,
            circuits.payloads_in_files,
            circuits.sent_bytes / 1e6,
            circuits.mapped_bytes / 1e6,
        )


def warm_up() -> None:
    """A tiny run of the three compute parties with target any, every batch on ``LocalCircuits``
    over read-only shares (as a worker maps them): loads (or compiles) the gate kernels for the
    types a worker meets, so workers forked after this (the embedded cluster's forkserver) do
    not load them in their first circuit."""
    from party.encoding.records import EncodedRecords
    from party.mpc.driver import drive, run_keys
    from party.mpc.flight import Circuits
    from party.mpc.pairs import PairComputeParty, pair_input_shares

    n, bits = 8, 1024  # enough words for the full adders on whole words (``Gates.wallace``)
    rng = np.random.default_rng(0)
    filters = rng.integers(0, 2**63, size=(n, bits // 64), dtype=np.uint64)
    table = EncodedRecords(tuple(map(str, range(n))), filters, bits, np.ones((n, 1), np.uint64))
    params = ProtocolParameters(("a", "b", "c"), bits, 0.5, 0.0, mode="mpc3", target="any")

    def read_only(party: Any, inputs: list[InputShare]) -> Circuits:
        shares = [
            _share_of(
                s.source, s.target, bits, {k: _frozen(x) for k, x in _share_arrays(s).items()}
            )
            for s in inputs
        ]
        return LocalCircuits(party, shares)

    cps = [PairComputeParty(i, params, k, circuits=read_only) for i, k in enumerate(run_keys())]
    for share in pair_input_shares([table] * 3, params):
        cps[share.target].receive_input(share)
    drive([cp.run() for cp in cps])


def _frozen(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x.flags.writeable = False
    return x
