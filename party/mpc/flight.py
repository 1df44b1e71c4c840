"""Batches in flight (pure): the circuits of consecutive batches evaluated side by side, their
rounds interleaved in an order the three compute parties share.

Order (part of the protocol, docs/protocol.md "Mode mpc3"): a run's batches are taken in windows
of ``BATCHES_IN_FLIGHT`` consecutive batch numbers (the last window may be shorter). Within a
window, round by round: round r of every batch of the window that is still running, in batch
order, before round r + 1 of any. A batch whose circuit has ended leaves the rotation (every batch
of a run has the same number of rounds, so they end together). The next window starts when every
batch of this one has ended.

Where the circuits of a window run is a ``Circuits``: ``LocalCircuits`` steps them one after the
other in this process (each layer on the compute party's threads); ``party.cluster_mpc`` keeps
each on a Dask worker of the party and steps them all at once.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from party.mpc.errors import MpcError
from party.mpc.gates import Gates, Round, checked_reply

if TYPE_CHECKING:
    from party.mpc.inputs import InputShare

#: Batches whose rounds interleave (the three compute parties must use the same value).
BATCHES_IN_FLIGHT = 4


@dataclass(frozen=True)
class BatchJob:
    """One batch of the circuit: its number, the data parties whose inputs it reads (all of
    them, or the pair (a, b) of target any) and its candidate rows, (n, len(sources)) int64."""

    batch: int
    sources: tuple[int, ...]
    rows: np.ndarray

    def __repr__(self) -> str:  # never print rows
        return f"BatchJob(batch={self.batch}, sources={self.sources}, sets={len(self.rows)})"


@dataclass(frozen=True)
class GateCounts:
    """What the gates of batches did: rounds, AND words, bytes each way, seconds computing."""

    rounds: int = 0
    and_words: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    busy_seconds: float = 0.0

    @classmethod
    def of(cls, gates: Gates) -> GateCounts:
        return cls(**{f.name: getattr(gates, f.name) for f in fields(cls)})

    def __add__(self, other: GateCounts) -> GateCounts:
        return GateCounts(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class BatchResult:
    """A batch's outcome: the match bit of each set, and c and x of the matched sets."""

    hit: np.ndarray
    common: np.ndarray
    total: np.ndarray
    counts: GateCounts

    def __repr__(self) -> str:
        return f"BatchResult(sets={len(self.hit)}, matched={len(self.common)})"


Step = Round | BatchResult


class Circuits(Protocol):
    """Evaluates the circuits of a window's batches (module docstring)."""

    def start(self, jobs: Sequence[BatchJob]) -> list[Step]:
        """Start one circuit per job: each one's first round (or its result, if it has none)."""
        ...

    def step(self, replies: Sequence[tuple[int, bytes]]) -> list[Step]:
        """Give each (batch, payload) its circuit's incoming round: the next round or result."""
        ...

    def close(self) -> None:
        """Drop every circuit still running (a failed or cancelled run)."""
        ...


class BatchCircuit(Protocol):
    """What evaluates one batch: ``ComputeParty`` (``batch_circuit``, ``new_gates``)."""

    def new_gates(self, batch: int) -> Gates: ...

    def batch_circuit(
        self, inputs: list[InputShare], rows: np.ndarray, gates: Gates
    ) -> Generator[Round, bytes, tuple[np.ndarray, np.ndarray, np.ndarray]]: ...


class LocalCircuits:
    """A window's circuits in this process, stepped one after the other; also what a Dask
    worker runs for the batches it holds (``party.cluster_mpc``)."""

    def __init__(self, party: BatchCircuit, inputs: Sequence[InputShare]) -> None:
        self._party = party
        self._inputs = list(inputs)
        self._running: dict[int, tuple[Generator[Round, bytes, Any], Gates]] = {}

    def start(self, jobs: Sequence[BatchJob]) -> list[Step]:
        return [self.start_one(job) for job in jobs]

    def start_one(self, job: BatchJob) -> Step:
        if job.batch in self._running:
            raise MpcError(f"batch {job.batch} is already running")
        gates = self._party.new_gates(job.batch)
        inputs = [self._inputs[s] for s in job.sources]
        self._running[job.batch] = (self._party.batch_circuit(inputs, job.rows, gates), gates)
        return self.advance(job.batch, None)

    def step(self, replies: Sequence[tuple[int, bytes]]) -> list[Step]:
        return [self.advance(batch, payload) for batch, payload in replies]

    def advance(self, batch: int, payload: bytes | memoryview | None) -> Step:
        """Send ``payload`` into batch ``batch``'s circuit: its next round, or its result."""
        try:
            circuit, gates = self._running[batch]
        except KeyError:
            raise MpcError(f"batch {batch} is not running here") from None
        try:
            return circuit.send(payload)  # type: ignore[arg-type]
        except StopIteration as stop:
            del self._running[batch]
            hit, common, total = stop.value
            return BatchResult(hit, common, total, GateCounts.of(gates))
        except BaseException:
            del self._running[batch]
            raise

    def close(self) -> None:
        running, self._running = self._running, {}
        for circuit, _ in running.values():
            circuit.close()


def windows(jobs: Iterable[BatchJob], size: int = BATCHES_IN_FLIGHT) -> Iterator[list[BatchJob]]:
    """``jobs`` (in batch order) in windows of ``size`` consecutive batches."""
    window: list[BatchJob] = []
    for job in jobs:
        window.append(job)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def run_window(
    circuits: Circuits, jobs: Sequence[BatchJob]
) -> Generator[Round, bytes, list[BatchResult]]:
    """The rounds of one window's batches in the shared order; their results in batch order."""
    batches = [job.batch for job in jobs]
    if batches != sorted(set(batches)):
        raise MpcError("a window's batches must be distinct and in order")
    results: dict[int, BatchResult] = {}
    current = dict(zip(batches, circuits.start(jobs), strict=True))
    while True:
        running: list[tuple[int, Round]] = []
        for batch, step in current.items():  # in batch order
            if isinstance(step, BatchResult):
                results[batch] = step
            else:
                if step.batch != batch:
                    raise MpcError(f"the circuit of batch {batch} sent a round of {step.batch}")
                running.append((batch, step))
        if not running:
            return [results[b] for b in batches]
        replies = []
        for batch, rnd in running:
            reply = checked_reply(rnd, (yield rnd))  # refused at once, not at the next step
            replies.append((batch, reply if isinstance(reply, bytes) else bytes(reply)))
        current = dict(zip([b for b, _ in replies], circuits.step(replies), strict=True))
