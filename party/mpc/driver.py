"""In-process mpc3 driver: P data-party engines and three compute parties in one process.

The data parties' steps (blocking, common blocks, pseudonyms) are the segment protocol's; then each
data party secret-shares its records to the three compute parties, which evaluate the circuit in
lockstep (this driver hands each round's payload from CP (i + 1) % 3 to CP i), and CP 0's
classification is handed back to the data parties as results. Returns the same ``InProcessRun`` as
``party.protocol.driver.run_in_process`` so tests and simulations can switch on the mode.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

import numpy as np

from party.mpc.compute import ComputeParty, MpcStats
from party.mpc.errors import MpcError
from party.mpc.gates import Round
from party.mpc.inputs import input_shares
from party.mpc.keys import ComputeKeys, new_key
from party.protocol.blocks import common_blocks
from party.protocol.driver import InProcessRun, RunMetrics
from party.protocol.engine import PartyEngine
from party.protocol.errors import ProtocolError
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable


def run_keys() -> list[ComputeKeys]:
    """Fresh per-run keys of the three compute parties (CP i holds k_i and k_{i+1})."""
    k = [new_key() for _ in range(3)]
    return [ComputeKeys(own=k[i], received=k[(i + 1) % 3]) for i in range(3)]


T = TypeVar("T")


def drive(generators: Sequence[Generator[Round, bytes, T]]) -> list[T]:
    """Run three compute-party generators in lockstep; CP i receives what CP (i + 1) % 3 sent."""
    current: list[Round | None] = [None, None, None]
    incoming: list[bytes | None] = [None, None, None]
    outcomes: list[T | None] = [None, None, None]
    while True:
        for i, gen in enumerate(generators):
            try:
                current[i] = gen.send(incoming[i])  # type: ignore[arg-type]
            except StopIteration as stop:
                outcomes[i] = stop.value
                current[i] = None
        done = [r is None for r in current]
        if all(done):
            return outcomes  # type: ignore[return-value]
        if any(done):
            raise MpcError("compute parties stopped after different numbers of rounds")
        keys = {(r.batch, r.number) for r in current if r is not None}
        if len(keys) != 1:
            raise MpcError("compute parties are at different rounds")
        # bytes of bytes is the same object: a copy only of a view (``Gates.payload_views``)
        incoming = [bytes(current[(i + 1) % 3].payload) for i in range(3)]  # type: ignore[union-attr]


def run_mpc3_in_process(
    tables: Sequence[EncodedTable],
    params: ProtocolParameters,
    *,
    progress: Callable[[int, int, int], None] | None = None,
    cancel: threading.Event | None = None,
    batch_sets: int | None = None,
    workers: int = 1,
) -> InProcessRun:
    """Run mpc3 for P in-process data parties and three compute parties (``progress(cp, done, total)``).

    ``workers`` threads per compute party share each layer of its circuit (the three compute
    parties take turns in this thread, so at most ``workers`` threads run at a time).
    """
    if params.mode != "mpc3":
        raise ProtocolError(f"run_mpc3_in_process needs mode 'mpc3', got {params.mode!r}")
    p = params.party_count
    if len(tables) != p:
        raise ProtocolError(f"{len(tables)} tables for {p} parties")
    metrics = RunMetrics()
    steps = metrics.step_seconds

    t0 = time.perf_counter()
    engines = [PartyEngine(i, params, tables[i]) for i in range(p)]
    try:
        common = common_blocks([e.block_digests() for e in engines])
        metrics.block_stats = [e.set_common_blocks(common) for e in engines]
        steps["blocks"] = time.perf_counter() - t0

        cps = [
            ComputeParty(i, params, keys, batch_sets=batch_sets, workers=workers)
            for i, keys in enumerate(run_keys())
        ]
        outcomes = compute_in_process(engines, cps, steps, progress=progress, cancel=cancel)
        classification = outcomes[0].classification
        for o in outcomes[1:]:
            c = o.classification
            if not (
                np.array_equal(c.candidates, classification.candidates)
                and np.array_equal(c.similarities, classification.similarities)
            ):
                raise MpcError("compute parties reached different classifications")

        t0 = time.perf_counter()
        matches = [
            e.resolve_results(engines[0].results_for(classification, e.index)) for e in engines
        ]
        steps["results"] = time.perf_counter() - t0
        pseudonyms = [e.record_pseudonyms for e in engines]
    finally:
        for e in engines:
            e.close()
    metrics.sets_summed = classification.sets_summed
    metrics.above_threshold = classification.above_threshold
    metrics.matches = classification.matches
    return InProcessRun(
        matches=matches,
        metrics=metrics,
        classification=classification,
        pseudonyms=pseudonyms,
        mpc_stats=[o.stats for o in outcomes],
    )


def compute_in_process(
    engines: Sequence[PartyEngine],
    cps: list[Any],
    steps: dict[str, float],
    *,
    progress: Callable[[int, int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> list[Any]:
    """Share every engine's records to the three compute parties ``cps`` (which it consumes) and
    run their circuits in lockstep; returns their outcomes, times ``input_shares``/``compute``."""
    t0 = time.perf_counter()
    for e in engines:
        for share in input_shares(e):
            cps[share.target].receive_input(share)
    steps["input_shares"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    gens = [
        cp.run(progress=None if progress is None else _bind(progress, i), cancel=cancel)
        for i, cp in enumerate(cps)
    ]
    cps.clear()
    outcomes = drive(gens)
    del gens
    steps["compute"] = time.perf_counter() - t0
    return outcomes


def _bind(fn: Callable[[int, int, int], None], cp: int) -> Callable[[int, int], None]:
    return lambda done, total: fn(cp, done, total)


__all__ = ["MpcStats", "compute_in_process", "drive", "run_keys", "run_mpc3_in_process"]
