"""Target "any" in mode mpc3: the pairwise circuit over every two data parties' candidate pairs (pure).

The data parties' steps are mode mpc3's (``party.mpc.inputs``) with two differences: the blocks are
those present at two or more parties (``PairEngine.common_of``: a party shares every record that
can form a pair), and the count terms are those of the pair test (``threshold_test(2,
l, s_t)``, offset at every party: ``party.mpc.threshold``).

A ``PairComputeParty`` enumerates, for every pair of data parties (a, b), a < b in that order, the
candidate pairs of the segment mode (``party.protocol.pairwise.pair_candidates``: records of a and b
sharing a block of the two, sub-blocked with the cap, ordered by pseudonym tuple) and evaluates on
them the circuit of ``party.mpc.compute`` with P = 2 (AND of the two filters, popcount c, the exact
integer test 2c / (x_a + x_b) >= s_t). Batches never mix pairs of parties: the batches of (0, 1)
come first, numbered from 0 across the whole run, then those of (0, 2), and so on, so the three
compute parties cut identical batches. Opened, as in mode mpc3: the match bit of every candidate
pair, and for matched pairs only c and S (hence x = x_a + x_b and Dice = 2c/x). Nothing else.

The matched pairs (party a, pseudonym, party b, pseudonym, Dice), identical at the three compute
parties, feed the deterministic group solver (``party.protocol.solver.solve_groups``); only the
compute party that delivers the results (CP 0) needs to run it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.mpc.compute import ComputeParty, MpcStats, batch_ranges
from party.mpc.driver import compute_in_process, run_keys
from party.mpc.errors import MpcError
from party.mpc.flight import BatchJob, BatchResult
from party.mpc.gates import Round
from party.mpc.inputs import InputShare, input_shares
from party.mpc.keys import ComputeKeys
from party.protocol.any_driver import AnyRun, AnyRunStats, group_rows
from party.protocol.classify import dice
from party.protocol.components import (
    array_chunks,
    known_keys,
    solve_streamed,
)
from party.protocol.errors import MemoryBudgetError, ProtocolError
from party.protocol.pair_engine import PairEngine
from party.protocol.pairwise import pair_candidates
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable
from party.protocol.solver import Group, solve_groups
from party.protocol.spill import LocalGauge, RowStore, SpillFolder

MatchedPair = tuple[int, int, int, int, float]  # (party a, pseudonym, party b, pseudonym, Dice)


#: Bytes per matched pair of the Python solver's objects (``solve_groups``: tuples, dictionaries,
#: groups; tracemalloc peak on 100,000 pairs: 1,341), what the in-process run's solve needs.
PYTHON_SOLVER_BYTES_PER_PAIR = 1400
#: Bytes a compute party holds per matched pair until the run ends (4 uint64 + 1 float64).
MATCHED_PAIR_BYTES = 40


@dataclass(frozen=True)
class PairOutcome:
    """Matched pairs (identical at the three CPs, by party pair, then pseudonyms) and this CP's
    statistics: ``ends`` (k, 4) uint64 rows (party a, pseudonym, party b, pseudonym), a < b, and
    their Dice ``similarities`` (k,) float64."""

    ends: np.ndarray
    similarities: np.ndarray
    stats: MpcStats

    def pairs(self) -> list[MatchedPair]:
        """The matched pairs as the solver's (party a, pseudonym, party b, pseudonym, Dice)."""
        return [
            (a, ka, b, kb, s)
            for (a, ka, b, kb), s in zip(
                self.ends.tolist(), self.similarities.tolist(), strict=True
            )
        ]


def solve_pair_groups(outcome: PairOutcome, params: ProtocolParameters) -> list[Group]:
    """The groups of a run's matched pairs (at the compute party that delivers the results);
    MemoryBudgetError, before solving, when the solver's working set exceeds half the budget
    (``PYTHON_SOLVER_BYTES_PER_PAIR``)."""
    k = int(outcome.ends.shape[0])
    if PYTHON_SOLVER_BYTES_PER_PAIR * k > params.memory_budget_bytes // 2:
        raise MemoryBudgetError(
            f"solving the groups of {k} matched pairs needs about "
            f"{PYTHON_SOLVER_BYTES_PER_PAIR * k // 2**20 + 1} MiB, more than half of the memory budget: "
            "raise the party's memory_budget_mib (or s_t)"
        )
    return solve_groups(
        outcome.pairs(),
        params.min_parties,
        params.solver,
        params.match_threshold,
        parties=params.party_count,
    )


def solve_pair_rows(
    outcome: PairOutcome, params: ProtocolParameters, spill_dir: str | None = None
) -> list[np.ndarray]:
    """Compute party 0 of a networked run: per data party, the result rows of the groups
    (``components`` result-row columns), solved from the matched pairs sorted on disk and scanned
    with per-record state within half the budget (``party.protocol.components``; its stores hold a
    quarter of the budget and spill to a private folder under ``spill_dir`` beyond it);
    MemoryBudgetError, before its arrays are built, when the budget cannot hold them."""
    p = params.party_count
    folder = SpillFolder(spill_dir)
    stores_gauge = LocalGauge(params.memory_budget_bytes // 4)

    def new_store(width: int, name: str, key_columns: int | None) -> RowStore:
        return RowStore(
            width,
            gauge=stores_gauge,
            folder=folder,
            key_columns=key_columns,
            name=name,
            merge_bytes=params.memory_budget_bytes // 8,
        )

    try:
        stores, _ = solve_streamed(
            array_chunks(outcome.ends, outcome.similarities),
            known_keys(outcome.ends, p),
            params.min_parties,
            params.solver,
            params.match_threshold,
            new_store,
            LocalGauge(params.memory_budget_bytes // 2),
        )
        rows = []
        for store in stores:
            parts = list(store.chunks(1 << 16))
            rows.append(np.concatenate(parts) if parts else np.zeros((0, 5), dtype=np.uint64))
            store.close()
        return rows
    finally:
        folder.close()


class PairComputeParty(ComputeParty):
    """Compute party ``index`` of an mpc3 run with target "any" (see the module docstring)."""

    def __init__(
        self, index: int, params: ProtocolParameters, keys: ComputeKeys, **options: Any
    ) -> None:
        """As ``ComputeParty`` (the same keyword options), for parameters with target "any"."""
        if isinstance(params, ProtocolParameters) and params.target != "any":
            raise MpcError(f"parameters are for target {params.target!r}, not 'any'")
        super().__init__(index, params, keys, **options)

    def run(  # type: ignore[override]  # same rounds and driving; the outcome is a PairOutcome
        self,
        progress: Callable[[int, int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Generator[Round, bytes, PairOutcome]:
        """Evaluate the pairwise circuit on every candidate pair; return the matched pairs."""
        t0 = time.perf_counter()
        inputs = self._take_inputs()
        work: list[tuple[int, int, np.ndarray]] = []
        held = 0
        for a, b in itertools.combinations(range(self.parties), 2):
            rows = pair_candidates(
                inputs[a].block_digests,
                inputs[b].block_digests,
                inputs[a].pseudonyms,
                inputs[b].pseudonyms,
                self.params.max_block_size,
            )
            held += rows.nbytes
            self._check_budget(held, sum(r.shape[0] for _, _, r in work) + rows.shape[0])
            work.append((a, b, rows))
        total = sum(int(r.shape[0]) for _, _, r in work)
        ends: list[np.ndarray] = []
        sims: list[np.ndarray] = []
        matched = batches = done = 0
        if progress is not None:
            progress(0, total)

        def jobs() -> Iterator[BatchJob]:
            batch = 0
            while work:
                a, b, rows = work.pop(0)
                for lo, hi in batch_ranges(int(rows.shape[0]), self.batch_sets):
                    yield BatchJob(batch, (a, b), rows[lo:hi])
                    batch += 1

        def take(job: BatchJob, result: BatchResult) -> None:
            nonlocal matched, batches, done
            a, b = job.sources
            similarity = dice(2, result.common, result.total)
            if np.any(similarity < self.params.match_threshold):
                raise MpcError("a matched pair has Dice below s_t: the computation is inconsistent")
            found = job.rows[result.hit]
            matched += int(found.shape[0])
            if held + MATCHED_PAIR_BYTES * matched > self.budget:
                raise MemoryBudgetError(
                    f"compute party {self.index}: the candidate pairs and more than "
                    f"{matched} matched pairs exceed memory_budget_bytes={self.budget}; raise "
                    "the budget (or s_t)"
                )
            rows_out = np.empty((found.shape[0], 4), dtype=np.uint64)
            rows_out[:, 0], rows_out[:, 2] = a, b
            rows_out[:, 1] = inputs[a].pseudonyms[found[:, 0]]
            rows_out[:, 3] = inputs[b].pseudonyms[found[:, 1]]
            ends.append(rows_out)
            sims.append(similarity)
            batches += 1
            done += int(job.rows.shape[0])
            if progress is not None:
                progress(done, total)

        yield from self._evaluate(inputs, jobs(), take, cancel)
        return PairOutcome(
            np.concatenate(ends) if ends else np.zeros((0, 4), dtype=np.uint64),
            np.concatenate(sims) if sims else np.zeros(0, dtype=np.float64),
            self._stats(total, batches, t0),
        )


def pair_input_shares(
    tables: Sequence[EncodedTable], params: ProtocolParameters
) -> list[InputShare]:
    """Every data party's three input shares for target any, made in process (each table's
    ``PairEngine``, blocks at two or more parties): for benchmarks, tests and warm-ups."""
    engines = [PairEngine(i, params, t) for i, t in enumerate(tables)]
    try:
        shared = engines[0].common_of([e.block_digests() for e in engines])
        for e in engines:
            e.set_common_blocks(shared)
        return [share for e in engines for share in input_shares(e)]
    finally:
        for e in engines:
            e.close()


def compute_party_class(params: ProtocolParameters) -> type[ComputeParty]:
    """The compute party of a run: P-way sets (target "all") or pairs (target "any")."""
    return PairComputeParty if params.target == "any" else ComputeParty


@dataclass
class Mpc3AnyRun(AnyRun):
    """``AnyRun`` of an in-process mpc3 run, with the three compute parties' statistics and the
    seconds of its steps (``input_shares``, ``compute``: the circuit, ``solve``: the groups)."""

    mpc_stats: list[MpcStats] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)


def run_mpc3_any_in_process(
    tables: Sequence[EncodedTable],
    params: ProtocolParameters,
    *,
    progress: Callable[[int, int, int], None] | None = None,
    cancel: threading.Event | None = None,
    batch_sets: int | None = None,
) -> Mpc3AnyRun:
    """Run mpc3 with target "any" for P in-process data parties and three compute parties."""
    if params.mode != "mpc3" or params.target != "any":
        raise ProtocolError(
            f"run_mpc3_any_in_process needs mode 'mpc3' and target 'any', got "
            f"{params.mode!r} and {params.target!r}"
        )
    p = params.party_count
    if len(tables) != p:
        raise ProtocolError(f"{len(tables)} tables for {p} parties")
    steps: dict[str, float] = {}
    engines = [PairEngine(i, params, tables[i]) for i in range(p)]
    try:
        shared = engines[0].common_of([e.block_digests() for e in engines])
        for e in engines:
            e.set_common_blocks(shared)
        cps: list[object] = [
            PairComputeParty(i, params, keys, batch_sets=batch_sets)
            for i, keys in enumerate(run_keys())
        ]
        outcomes: list[PairOutcome] = compute_in_process(
            engines, cps, steps, progress=progress, cancel=cancel
        )
        pseudonyms = [e.record_pseudonyms for e in engines]
    finally:
        for e in engines:
            e.close()
    first = outcomes[0]
    if any(
        not (
            np.array_equal(o.ends, first.ends)
            and np.array_equal(o.similarities, first.similarities)
        )
        for o in outcomes
    ):
        raise MpcError("compute parties reached different matched pairs")
    t0 = time.perf_counter()
    matched = first.pairs()
    groups = solve_pair_groups(first, params)
    steps["solve"] = time.perf_counter() - t0
    total = first.stats.candidate_sets
    return Mpc3AnyRun(
        matches=group_rows(groups, params, tables, pseudonyms),
        groups=groups,
        matched_pairs=matched,
        pseudonyms=pseudonyms,
        stats=AnyRunStats(
            candidate_pairs=total,
            pairs_summed=total,
            matched_pairs=len(matched),
            groups=len(groups),
        ),
        mpc_stats=[o.stats for o in outcomes],
        step_seconds=steps,
    )


__all__ = [
    "Mpc3AnyRun",
    "PairComputeParty",
    "PairOutcome",
    "compute_party_class",
    "pair_input_shares",
    "run_mpc3_any_in_process",
]
