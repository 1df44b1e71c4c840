"""Batches in flight: the order of a window's rounds, windows, replies, and LocalCircuits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from party.mpc.compute import BATCH_BYTES, ComputeParty, batch_bytes_per_set, batch_sets_for
from party.mpc.driver import drive, run_keys
from party.mpc.errors import MpcError
from party.mpc.flight import (
    BATCHES_IN_FLIGHT,
    BatchJob,
    BatchResult,
    GateCounts,
    LocalCircuits,
    Step,
    run_window,
    windows,
)
from party.mpc.gates import Round
from party.protocol.errors import MemoryBudgetError
from tests.unit.mpc.helpers import recorded
from tests.unit.mpc.test_parallel_gates import _inputs


class Scripted:
    """Circuits whose batch b runs ``rounds[b]`` rounds; payload = (batch, number) bytes."""

    def __init__(self, rounds: dict[int, int]) -> None:
        self.rounds = rounds
        self.at: dict[int, int] = {}
        self.calls: list[list[int]] = []  # batches of each start / step call
        self.closed = False

    def _next(self, batch: int) -> Step:
        n = self.at[batch]
        if n == self.rounds[batch]:
            return BatchResult(np.zeros(0, bool), np.zeros(0), np.zeros(0), GateCounts(rounds=n))
        self.at[batch] = n + 1
        return Round(batch, n, bytes([batch, n]))

    def start(self, jobs: Sequence[BatchJob]) -> list[Step]:
        self.calls.append([j.batch for j in jobs])
        for j in jobs:
            self.at[j.batch] = 0
        return [self._next(j.batch) for j in jobs]

    def step(self, replies: Sequence[tuple[int, bytes]]) -> list[Step]:
        self.calls.append([b for b, _ in replies])
        for b, payload in replies:
            assert payload == bytes([b, self.at[b] - 1])  # the reply to its own round
        return [self._next(b) for b, _ in replies]

    def close(self) -> None:
        self.closed = True


def _jobs(batches: Sequence[int]) -> list[BatchJob]:
    return [BatchJob(b, (0, 1), np.zeros((1, 2), np.int64)) for b in batches]


def _drive_window(circuits: Scripted, jobs: list[BatchJob]) -> tuple[list[tuple[int, int]], list]:
    order: list[tuple[int, int]] = []
    gen = run_window(circuits, jobs)
    reply = None
    while True:
        try:
            rnd = gen.send(reply)  # type: ignore[arg-type]
        except StopIteration as stop:
            return order, stop.value
        order.append((rnd.batch, rnd.number))
        reply = rnd.payload


def test_rounds_interleave_round_by_round_in_batch_order() -> None:
    circuits = Scripted({4: 3, 5: 3, 6: 3, 7: 3})
    order, results = _drive_window(circuits, _jobs([4, 5, 6, 7]))
    assert order == [(b, r) for r in range(3) for b in (4, 5, 6, 7)]
    assert [r.counts.rounds for r in results] == [3, 3, 3, 3]
    assert circuits.calls == [[4, 5, 6, 7]] * 4  # every batch steps in each call


def test_a_batch_that_ends_early_leaves_the_rotation() -> None:
    """Uneven round counts (also none at all) keep a fixed order: who is still running."""
    circuits = Scripted({0: 2, 1: 0, 2: 4, 3: 1})
    order, results = _drive_window(circuits, _jobs([0, 1, 2, 3]))
    assert order == [(0, 0), (2, 0), (3, 0), (0, 1), (2, 1), (2, 2), (2, 3)]
    assert [r.counts.rounds for r in results] == [2, 0, 4, 1]  # in batch order
    assert circuits.calls == [[0, 1, 2, 3], [0, 2, 3], [0, 2], [2], [2]]


@pytest.mark.parametrize("batches", [[1, 0], [2, 2]])
def test_a_window_needs_distinct_batches_in_order(batches) -> None:
    with pytest.raises(MpcError, match="distinct and in order"):
        next(run_window(Scripted({0: 1, 1: 1, 2: 1}), _jobs(batches)))


@pytest.mark.parametrize("reply", [b"", b"\x00\x00\x00", None, "ab"])
def test_a_reply_of_the_wrong_size_is_refused_at_once(reply) -> None:
    gen = run_window(Scripted({0: 2, 1: 2}), _jobs([0, 1]))
    next(gen)
    with pytest.raises(MpcError, match="round 0 of batch 0: expected a payload of 2 bytes"):
        gen.send(reply)


@pytest.mark.parametrize(("count", "size"), [(0, 4), (1, 4), (4, 4), (5, 4), (9, 4), (3, 1)])
def test_windows_cut_consecutive_batches(count, size) -> None:
    got = [[j.batch for j in w] for w in windows(_jobs(range(count)), size)]
    assert [b for w in got for b in w] == list(range(count))
    assert all(len(w) == size for w in got[:-1]) and all(0 < len(w) <= size for w in got)


def test_the_batches_in_flight_count_against_the_budget() -> None:
    """The budget check counts a whole window of batches (each padded to 64 sets)."""
    params, shares = _inputs(3, 43)
    sets = batch_sets_for(3, params.filter_bits)
    assert sets % 64 == 0 and sets * batch_bytes_per_set(3, params.filter_bits) <= BATCH_BYTES
    cp = ComputeParty(0, params, run_keys()[0], batch_sets=128)
    per_set = batch_bytes_per_set(3, params.filter_bits)
    for total, window in ((0, 0), (1, 64), (128, 128), (129, 192), (511, 512), (5000, 512)):
        cp.budget = 1000 + window * per_set
        cp._check_budget(1000, total)  # fits exactly
        cp.budget -= 1
        with pytest.raises(MemoryBudgetError, match="the batches in flight need"):
            cp._check_budget(1000, total)


def _parties(params, shares, keys, factory=None):  # type: ignore[no-untyped-def]
    cps = [ComputeParty(i, params, keys[i], batch_sets=192, circuits=factory) for i in range(3)]
    for s in shares:
        cps[s.target].receive_input(s)
    return cps


def test_rounds_of_a_run_follow_the_windows() -> None:
    """A whole run: the (batch, round) sequence every compute party sends is the windows' order,
    and its outcome equals the one of circuits stepped by a factory of LocalCircuits."""
    params, shares = _inputs(3, 43)
    keys = run_keys()
    sent: list[list[tuple[int, int, bytes]]] = [[], [], []]
    cps = _parties(params, shares, keys)
    outcomes = drive([recorded(cp.run(), sent[i]) for i, cp in enumerate(cps)])
    batches = outcomes[0].stats.batches
    rounds = outcomes[0].stats.rounds // batches
    assert batches > BATCHES_IN_FLIGHT and batches % BATCHES_IN_FLIGHT  # a short last window
    want = [
        (b, r)
        for lo in range(0, batches, BATCHES_IN_FLIGHT)
        for r in range(rounds)
        for b in range(lo, min(lo + BATCHES_IN_FLIGHT, batches))
    ]
    assert [[(b, r) for b, r, _ in cp] for cp in sent] == [want, want, want]
    made: list[LocalCircuits] = []

    def factory(party, inputs):  # type: ignore[no-untyped-def]
        made.append(LocalCircuits(party, inputs))
        return made[-1]

    again = drive([cp.run() for cp in _parties(params, shares, keys, factory)])
    assert len(made) == 3
    for x, y in zip(outcomes, again, strict=True):
        assert np.array_equal(x.classification.candidates, y.classification.candidates)
        assert np.array_equal(x.classification.similarities, y.classification.similarities)
        assert x.stats.rounds == y.stats.rounds and x.stats.and_gates == y.stats.and_gates


def test_local_circuits_refuse_unknown_and_repeated_batches() -> None:
    params, shares = _inputs(2, 41)
    keys = run_keys()
    cp = _parties(params, shares, keys)[0]
    inputs = cp._take_inputs()
    circuits = LocalCircuits(cp, inputs)
    job = BatchJob(0, (0, 1), np.zeros((3, 2), np.int64))
    first = circuits.start_one(job)
    assert isinstance(first, Round) and (first.batch, first.number) == (0, 0)
    with pytest.raises(MpcError, match="batch 0 is already running"):
        circuits.start_one(job)
    with pytest.raises(MpcError, match="batch 9 is not running here"):
        circuits.advance(9, b"")
    with pytest.raises(MpcError, match="expected a payload of"):
        circuits.advance(0, b"x")
    with pytest.raises(MpcError, match="batch 0 is not running here"):  # a failed batch is gone
        circuits.advance(0, first.payload)
    circuits.start_one(job)
    circuits.close()
    with pytest.raises(MpcError, match="not running"):
        circuits.advance(0, first.payload)
