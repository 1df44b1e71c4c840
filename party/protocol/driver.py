"""In-process driver: P PartyEngines and an in-memory transport run the whole protocol in one process.

Used by tests and simulation sweeps. The transport is the only thing the network layer replaces:
here "sending" an object is handing the same (immutable) arrays to the receiving engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.protocol.blocks import BlockStats, common_blocks
from party.protocol.classify import Classification, MatchRow
from party.protocol.engine import ComparisonStats, PartyEngine
from party.protocol.errors import ProtocolError
from party.protocol.kernel import DEFAULT_KERNEL
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

    matches: list[list[MatchRow]]
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
) -> InProcessRun:
    """Run steps 4-7 for P in-process parties; ``progress(party, done, total)`` during compare;
    each party's comparison uses ``workers`` kernel threads."""
    p = params.party_count
    if len(tables) != p:
        raise ProtocolError(f"{len(tables)} tables for {p} parties")
    metrics = RunMetrics()
    steps = metrics.step_seconds

    t0 = time.perf_counter()
    engines = [PartyEngine(i, params, tables[i], kernel=kernel, workers=workers) for i in range(p)]
    common = common_blocks([e.block_digests() for e in engines])
    metrics.block_stats = [e.set_common_blocks(common) for e in engines]
    steps["blocks"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    for e in engines:
        for share in e.outgoing_shares():
            engines[share.target].receive_share(share)
    steps["segments"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    for e in engines:
        cb = None
        if progress is not None:
            cb = _bind(progress, e.index)
        metrics.comparison.append(e.compare(progress=cb, cancel=cancel))
    steps["compare"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    msg = engines[0].ring_start()
    for e in engines[1:]:
        msg = e.ring_step(msg)
    classification = engines[0].ring_finish(msg)
    steps["ring_and_classify"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    matches = [e.resolve_results(engines[0].results_for(classification, e.index)) for e in engines]
    steps["results"] = time.perf_counter() - t0
    metrics.sets_summed = classification.sets_summed
    metrics.above_threshold = classification.above_threshold
    metrics.matches = classification.matches
    return InProcessRun(
        matches=matches,
        metrics=metrics,
        classification=classification,
        pseudonyms=[e.record_pseudonyms for e in engines],
    )


def _bind(fn: Callable[[int, int, int], None], party: int) -> Callable[[int, int], None]:
    return lambda done, total: fn(party, done, total)
