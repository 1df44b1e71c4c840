"""In-process driver: P PartyEngines and an in-memory transport run the whole protocol in one process.

Used by tests and simulation sweeps. The transport is the only thing the network layer replaces:
here "sending" an object is handing the same (immutable) arrays to the receiving engine.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.protocol.any_driver import GroupRow
from party.protocol.blocks import BlockStats
from party.protocol.classify import Classification, MatchRow
from party.protocol.engine import ComparisonStats, PartyEngine
from party.protocol.errors import ProtocolError
from party.protocol.kernel import DEFAULT_KERNEL
from party.protocol.pair_engine import PairEngine
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable


@dataclass
class RunMetrics:
    """Per-party block and comparison statistics, ring survivors and wall time per step."""

    block_stats: list[BlockStats] = field(default_factory=list)
    comparison: list[ComparisonStats] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)
    sets_summed: int = 0
    above_threshold: int = 0
    matches: int = 0


@dataclass
class InProcessRun:
    """Outcome of run_in_process: per-party match rows, metrics, and the run's pseudonyms."""

    matches: Sequence[Sequence[MatchRow | GroupRow]]
    metrics: RunMetrics
    classification: Classification
    pseudonyms: list[np.ndarray]  # per party: (n,) uint64 pseudonym of each record, 0 = not shared
    mpc_stats: list[Any] = field(default_factory=list)  # mode mpc3: each compute party's MpcStats


def run_in_process(
    tables: Sequence[EncodedTable],
    params: ProtocolParameters,
    *,
    progress: Callable[[int, int, int], None] | None = None,
    cancel: threading.Event | None = None,
    kernel: str = DEFAULT_KERNEL,
    workers: int = 1,
    spill_dir: str | os.PathLike[str] | None = None,
    spill_limit_bytes: int | None = None,
) -> InProcessRun:
    """Run steps 4-7 for P in-process parties (target any: PairEngines, whose ``matches`` are
    GroupRows and ``classification`` the matched pairs); ``progress(party, done, total)`` during compare;
    each party's comparison uses ``workers`` kernel threads.

    ``spill_dir``/``spill_limit_bytes``: where the engines spill and how much (PartyEngine).
    """
    p = params.party_count
    if len(tables) != p:
        raise ProtocolError(f"{len(tables)} tables for {p} parties")
    metrics = RunMetrics()
    steps = metrics.step_seconds

    t0 = time.perf_counter()
    engine_class = PairEngine if params.target == "any" else PartyEngine
    engines = [
        engine_class(
            i,
            params,
            tables[i],
            kernel=kernel,
            workers=workers,
            spill_dir=spill_dir,
            spill_limit_bytes=spill_limit_bytes,
        )
        for i in range(p)
    ]
    try:
        built = time.perf_counter() - t0  # counted with the blocks, as before
        metrics.block_stats = exchange_in_process(engines, steps)
        steps["blocks"] += built

        t0 = time.perf_counter()
        for e in engines:
            cb = None
            if progress is not None:
                cb = _bind(progress, e.index)
            metrics.comparison.append(e.compare(progress=cb, cancel=cancel))
        steps["compare"] = time.perf_counter() - t0

        # Ring and results stream chunk by chunk, as over the network: no party holds a whole
        # message, and survivors, masks, ring output and matches spill beyond the budget.
        t0 = time.perf_counter()
        ring_in_process(engines)
        classification = engines[0].classification()
        steps["ring_and_classify"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        matches = [list(engines[0].resolved_rows(engines[0].result_chunks(0)))]
        for e in engines[1:]:
            for part in engines[0].result_chunks(e.index):
                e.receive_results_chunk(part)
            e.results_end()
            matches.append(list(e.resolved_rows(e.received_results())))
        steps["results"] = time.perf_counter() - t0
        pseudonyms = [e.record_pseudonyms for e in engines]
    finally:
        for e in engines:
            e.close()  # frees stores and removes spill folders, also on failure
    metrics.sets_summed = classification.sets_summed
    metrics.above_threshold = classification.above_threshold
    metrics.matches = classification.matches
    return InProcessRun(
        matches=matches,
        metrics=metrics,
        classification=classification,
        pseudonyms=pseudonyms,
    )


def exchange_in_process(
    engines: Sequence[PartyEngine], steps: dict[str, float] | None = None
) -> list[BlockStats]:
    """Steps 4-5 among in-process engines, ready to compare: the run's common blocks (each
    engine's block stats returned), then every segment share delivered; their wall seconds in
    ``steps`` ("blocks", "segments")."""
    t0 = time.perf_counter()
    common = engines[0].common_of([e.block_digests() for e in engines])
    block_stats = [e.set_common_blocks(common) for e in engines]
    t1 = time.perf_counter()
    for e in engines:
        for share in e.outgoing_shares():
            engines[share.target].receive_share(share)
    if steps is not None:
        steps["blocks"] = t1 - t0
        steps["segments"] = time.perf_counter() - t1
    return block_stats


def ring_in_process(engines: Sequence[PartyEngine]) -> tuple[int, int, int]:
    """The ring among the engines of one process, chunk by chunk as over the network (engines[0]
    initiates); returns the initiator's ``ring_finish_end()`` counts."""
    _, stream = engines[0].ring_start_chunks()
    for e in engines[1:]:
        for chunk in stream:
            e.ring_step_feed(chunk)
        e.ring_step_end()
        stream = e.ring_out_chunks()
    for chunk in stream:
        engines[0].ring_finish_feed(chunk)
    return engines[0].ring_finish_end()


def _bind(fn: Callable[[int, int, int], None], party: int) -> Callable[[int, int], None]:
    return lambda done, total: fn(party, done, total)
