"""PairEngine: one party's side of a run of target "any" in the segment mode (pairs on the ring).

The call order and the streamed ring/results API are PartyEngine's (``party.protocol.engine``);
what differs (docs/protocol.md, "Target any over the network"):

- Blocks: ``common_of`` keeps the digests present at two or more parties; a party shares (and
  sends segment j of, to party j) every record in such a block.
- Comparison: party i enumerates, for every pair of parties (a, b), a < b, the candidate pairs
  of the blocks a and b share (``party.protocol.pairwise.PairPlan``, in pieces of bounded size),
  counts c_i on its segment and keeps the pairs passing the segment filter. A pair travels as a
  ring row of P pseudonyms holding the two records' pseudonyms in columns a and b and 0 (never a
  pseudonym) elsewhere, so the ring's message format, sorting, streaming, spilling and
  intersection are those of target all unchanged.
- Ring: every party adds its c_i to every row; a party adds its record's 1-bit count x only to
  the rows it is a member of (the non-members add 0). The initiator unmasks c and x and computes
  the pairwise Dice 2c / x (``records_per_row`` = 2).
- Classification: the initiator keeps the pairs with Dice >= s_t, solves the groups with the
  agreed solver (``party.protocol.solver``; groups identical to the oracle's at s_m = 0) and
  sends each party, per group it is in, the linkage id (the group's number), the group
  similarity, the group's size and parties (a bit mask), and that party's own pseudonym only.
  ``one_to_one`` does not apply: a record is in at most one group by construction.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from party.encoding.bits import popcount_rows
from party.protocol._numba_pairs import merge_partner_range, merge_partner_rows, partner_cuts
from party.protocol._numba_ring import own_counts, pair_ends
from party.protocol.any_driver import GroupRow
from party.protocol.blocks import row_block_indexes, shared_blocks
from party.protocol.classify import PartyResults, ResolvedMatches
from party.protocol.components import StreamedSolver
from party.protocol.engine import ComparisonStats, PartyEngine
from party.protocol.errors import (
    ComparisonCancelled,
    MemoryBudgetError,
    ProtocolError,
    ResultsError,
    RingError,
)
from party.protocol.kernel import threshold_table
from party.protocol.pairwise import (
    IndexedSide,
    PairPlan,
    RemotePairs,
    pair_sides,
    segment_pair_counts,
)
from party.protocol.params import MAX_ANY_PARTIES, ProtocolParameters
from party.protocol.records import EncodedTable
from party.protocol.spill import LocalGauge, RowStore
from party.protocol.threads import run_tasks, thread_ranges

logger = logging.getLogger(__name__)

#: Bit masks of the parties in a group are uint64, so target any supports at most 64 parties.


@dataclass(frozen=True)
class GroupResults(PartyResults):
    """What a party receives in target any: per group it is in, also the group's size and parties."""

    group_sizes: np.ndarray  # (k,) uint64, 2..P
    group_parties: np.ndarray  # (k,) uint64 bit mask, bit q = party index q


def party_pairs(parties: int) -> list[tuple[int, int]]:
    """Every pair of party indices (a, b), a < b, in lexicographic order."""
    return [(a, b) for a in range(parties) for b in range(a + 1, parties)]


def party_mask(parties: Iterable[int]) -> int:
    """The bit mask of a set of party indices."""
    mask = 0
    for q in parties:
        mask |= 1 << int(q)
    return mask


def mask_parties(mask: int, parties: int) -> tuple[int, ...]:
    """The party indices of a bit mask, increasing."""
    return tuple(q for q in range(parties) if mask >> q & 1)


def group_results(rows: np.ndarray, party: int) -> GroupResults:
    """GroupResults of party ``party`` from its result rows (``components`` result-row columns)."""
    return GroupResults(
        party=party,
        linkage_ids=rows[:, 0].copy(),
        similarities=rows[:, 1].view(np.float64).copy(),
        pseudonyms=rows[:, 2].copy(),
        group_sizes=rows[:, 3].copy(),
        group_parties=rows[:, 4].copy(),
    )


def _merged(runs: list[list[np.ndarray]], a: int, workers: int = 1) -> list[np.ndarray]:
    """Party a's kept rows with its partners (``runs[k]``: with party a + 1 + k, in order) in the
    store's order (``_numba_pairs.merge_partner_rows``), as arrays to append in turn; empties
    ``runs``. With ``workers`` > 1, ranges of a's pseudonyms merge on the kernel threads (the
    same rows in the same order)."""
    sizes = [sum(int(x.shape[0]) for x in run) for run in runs]
    if sum(1 for size in sizes if size) <= 1:  # one partner's rows: in order already
        parts = [x for run in runs for x in run]
        runs.clear()
        return parts
    pieces = [x for run in runs for x in run]
    runs.clear()
    rows = _joined(pieces, workers)
    del pieces
    at = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ranges = max(1, len(thread_ranges(workers, rows.shape[0], words=rows.size)))
    cuts = partner_cuts(rows, at, a, ranges)
    firsts = (cuts - at[:-1]).sum(axis=1)  # range k's first row in the merged rows
    out = np.empty_like(rows)
    run_tasks(
        workers,
        ranges,
        lambda k: merge_partner_range(rows, cuts[k], cuts[k + 1], a, out, firsts[k]),
    )
    return [out]


#: rows a partner's spilled run is read back by while it merges (``_merged_from_stores``)
MERGE_BLOCK_ROWS = 1 << 16


def _merged_from_stores(
    stores: list[RowStore], a: int, block_rows: int = MERGE_BLOCK_ROWS
) -> Iterator[np.ndarray]:
    """``_merged`` of party a's kept rows with its partners when they waited in stores (each a
    sequential store of one partner's rows, in order, spilled beyond the gauge): read back
    ``block_rows`` at a time and merged a block at a time, each step the rows of every partner
    whose pseudonym of a (column ``a``, non-decreasing in each partner's rows) is below the
    smallest one a partner still being read ends its block with; the same rows in the same
    order, in increasing pieces."""
    readers = [store.finish().chunks(block_rows) for store in stores]
    width = stores[0].width if stores else 0
    bufs = [np.zeros((0, width), dtype=np.uint64) for _ in stores]
    more = [True] * len(stores)

    def read(k: int) -> None:  # the next block of partner k behind what it holds
        got = next(readers[k], None)
        if got is None:
            more[k] = False
        else:
            bufs[k] = np.concatenate([bufs[k], got]) if bufs[k].shape[0] else got

    while True:
        for k in range(len(stores)):
            while more[k] and bufs[k].shape[0] == 0:
                read(k)
        being_read = [k for k in range(len(stores)) if more[k]]
        if being_read:
            bound = min(bufs[k][-1, a] for k in being_read)
            cuts = [int(np.searchsorted(buf[:, a], bound, side="left")) for buf in bufs]
            if not any(cuts):  # every row held is at the bound or above: read on where it ends
                for k in being_read:
                    if bufs[k][-1, a] == bound:
                        read(k)
                continue
        else:
            cuts = [buf.shape[0] for buf in bufs]
            if not any(cuts):
                return
        parts = [buf[:cut] for buf, cut in zip(bufs, cuts, strict=True)]
        bufs = [buf[cut:] for buf, cut in zip(bufs, cuts, strict=True)]
        if sum(1 for part in parts if part.shape[0]) == 1:
            yield next(part for part in parts if part.shape[0])
            continue
        at = np.concatenate([[0], np.cumsum([part.shape[0] for part in parts])]).astype(np.int64)
        yield merge_partner_rows(np.concatenate(parts), at, a)


def _joined(pieces: list[np.ndarray], workers: int = 1) -> np.ndarray:
    """``np.concatenate(pieces)`` (row arrays of one width), the pieces copied into place on the
    kernel threads (numpy's copies release the GIL) when there is enough to copy; empties
    ``pieces``."""
    sizes = np.array([int(x.shape[0]) for x in pieces], dtype=np.int64)
    ends = np.cumsum(sizes)
    words = sum(int(x.size) for x in pieces)
    if len(pieces) <= 1 or len(thread_ranges(workers, int(ends[-1]), words=words)) <= 1:
        rows = np.concatenate(pieces)
        pieces.clear()
        return rows
    rows = np.empty((int(ends[-1]), pieces[0].shape[1]), dtype=pieces[0].dtype)
    starts = ends - sizes

    def copy(i: int) -> None:
        rows[starts[i] : ends[i]] = pieces[i]

    run_tasks(workers, len(pieces), copy)
    pieces.clear()
    return rows


class PairEngine(PartyEngine):
    """PartyEngine for target "any" (see the module docstring)."""

    RESULT_COLUMNS = 5  # linkage id, Dice bits, own pseudonym, group size, party mask
    TARGET = "any"
    SURVIVORS_REPEAT = False  # a pair is kept once, in its canonical block (sub-blocks aside)

    def __init__(
        self, index: int, params: ProtocolParameters, records: EncodedTable, **options: Any
    ) -> None:
        """As PartyEngine (``options``: its keyword arguments); ``params.target`` must be any."""
        if not isinstance(params, ProtocolParameters) or params.target != "any":
            raise ProtocolError("PairEngine needs ProtocolParameters with target 'any'")
        if params.party_count > MAX_ANY_PARTIES:
            raise ProtocolError(f"target 'any' supports at most {MAX_ANY_PARTIES} parties")
        super().__init__(index, dataclasses.replace(params, one_to_one=False), records, **options)
        self.records_per_row = 2
        self._group_rows: list[
            RowStore
        ] = []  # initiator: per party (lid, sim, pseudonym, size, mask)
        # initiator: the group solver fed as the ring returns (None: not started, or refused
        # by the memory budget, then it solves from the matches store at the end)
        self._solving: StreamedSolver | None = None
        self._solve_early = True
        # initiator, more than one kernel thread: the returning chunks' matched pairs are kept
        # on a thread of their own, one chunk behind the classification (``_keep_above``)
        self._keeper: ThreadPoolExecutor | None = None
        self._keeping: concurrent.futures.Future[None] | None = None

    def common_of(self, digest_sets: list[np.ndarray]) -> np.ndarray:
        """Blocks of target any: digests present at two or more parties."""
        return shared_blocks(digest_sets)

    # ----------------------------------------------------------------- comparison
    def _partner_store(self) -> RowStore:
        """A store of one partner's kept rows of a party, in order, waiting for their merge
        (sequential: held within the gauge, spilled beyond it by appending)."""
        return RowStore(self.parties + 1, gauge=self._gauge, folder=self._folder, name="partner")

    def compare(
        self,
        progress: Callable[[int, int], None] | None = None,
        cancel: threading.Event | None = None,
        remote: RemotePairs | None = None,
    ) -> ComparisonStats:
        """Enumerate the candidate pairs of every pair of parties on this party's segment and keep
        those passing the segment filter (rows as in the module docstring, spilled beyond the
        budget). ``progress``/``cancel`` as PartyEngine.compare. ``remote``: the whole blocks'
        pairs computed there (buckets of a's rows, every pair of parties submitted first), not on
        the kernel threads; the same rows, stats and order."""
        common = self._ready_to_compare()
        t0 = time.perf_counter()
        p = self.parties
        pseud, _, segs = self._party_columns()
        cap = self.params.max_block_size
        stats = ComparisonStats(party=self.index, blocks=int(common.size))

        n = int(common.size)
        # every party's inputs (segment popcounts), then its records by the run's blocks (their
        # positions, found when the shares arrived; rows in pseudonym order), each built once: a
        # block two parties do not share holds no pair of theirs. Each step one round of tasks on
        # the kernel threads for all parties (a hand-off to the pool per step, not per party)
        sides = pair_sides(pseud, segs, [self._positions[j] for j in range(p)], self.workers)
        indexes = row_block_indexes([sd.positions for sd in sides], n, self.workers)

        def plan_of(a: int, b: int) -> PairPlan:
            return PairPlan.from_indexes(indexes[a], indexes[b], cap, self.workers)

        # the pairs per block from the plans (their passes over the blocks in one round of tasks;
        # with a cap, also the sub-blocks). Without a cap a plan holds no per-block array: kept
        # for the kernel; with one, made again there (one plan's flags held at a time after the
        # counts; a byte per block each while they are counted)
        plan_bytes = 0
        plans: dict[tuple[int, int], PairPlan] = {}
        every = party_pairs(p)
        made = PairPlan.from_index_pairs(
            [(indexes[a], indexes[b]) for a, b in every], cap, self.workers
        )
        for (a, b), plan in zip(every, made, strict=True):
            # whole blocks, the running sum of a's rows' pairs (kept_pairs)
            plan_bytes = max(plan_bytes, (n + 1) + 8 * int(pseud[a].size))
            stats.candidate_sets += plan.total
            stats.candidate_sets_uncapped += plan.uncapped
            stats.largest_block_sets = max(stats.largest_block_sets, plan.largest)
            if cap is None:
                plans[(a, b)] = plan
        total = stats.candidate_sets
        held = sum(int(ix.rows.nbytes) + int(ix.starts.nbytes) for ix in indexes)
        held += sum(int(sd.records.nbytes) for sd in sides)  # the segments copied with more
        budget = max(0, self.working_budget() - plan_bytes - held)
        # a piece of the compiled path holds at most one kept row per pair, in a quarter of what
        # the working budget leaves beside one plan (a sub-block, at most cap^2 pairs, is one piece)
        piece = max(4096, budget // 4 // (8 * (p + 1)))
        table = threshold_table(2, float(self.params.segment_threshold), 2 * self.segment_bits)
        if remote is not None:  # every pair's ranges start now, in the order taken below
            by_pair = dict(zip(every, made, strict=True))
            for a in range(p - 2, -1, -1):
                for b in range(a + 1, p):
                    side_a = IndexedSide.of(sides[a], indexes[a])
                    side_b = IndexedSide.of(sides[b], indexes[b])
                    remote.submit((a, b), by_pair[(a, b)], side_a, side_b, table, p, piece)
            del by_pair, side_a, side_b
            if cap is None:  # the remote has what the pairs need: the indexes can go now
                plans.clear()
                indexes.clear()
        del made, plan
        store = self._survivor_store()
        done = kept_total = 0
        if progress is not None:
            progress(0, total)
        # Party a's kept rows with each partner b come in order of (a's pseudonym, b's); merged
        # (``merge_partner_rows``), a's partners' rows are in the store's order, and with the
        # parties a from last to first (a row whose first pseudonym is in a later column sorts
        # first) every append continues that order: the store keeps them without a sort. The
        # rows wait for the merge on the memory gauge; refused, each partner's rows wait in a
        # store of their own that spills in order, and are merged from there a block at a time
        # (``_merged_from_stores``): the survivor store still needs no sort. With sub-blocks
        # (whose pairs may repeat a whole block's) they go to the store as they come, which
        # sorts them.
        # Every party's pseudonyms are distinct and not 0 (drawn so, or checked by
        # ``validate_share``) and in increasing order (``_party_columns``): the kept rows of a pair
        # of parties (distinct (row of a, row of b) in order) and their partner merge have
        # strictly increasing keys by construction, so the store checks only where each chunk
        # starts (``RowStore.append(increasing=True)``), not every row.
        merging = cap is None
        waiting = 0  # gauge bytes of the rows waiting for their merge
        # once the gauge refuses a's rows their wait, each partner's rows wait in a store of
        # their own that spills in order, and are merged from there (the store stays ordered)
        stores: list[RowStore] = []
        try:
            for a in range(p - 2, -1, -1):
                runs: list[list[np.ndarray]] = []  # a's kept rows per partner, b increasing
                for b in range(a + 1, p):
                    runs.append([])
                    if stores:
                        stores.append(self._partner_store())
                    # the plan: for the kernel threads, or the sub-blocks (with a cap)
                    pair_plan: PairPlan | None = None
                    if remote is None or cap is not None:
                        pair_plan = plans.pop((a, b)) if (a, b) in plans else plan_of(a, b)
                    if remote is None:
                        assert pair_plan is not None
                        kept_rows = pair_plan.kept_pairs(
                            sides[a], sides[b], p, table, piece, self.workers, cancel
                        )
                    else:
                        kept_rows = remote.kept_pairs((a, b), cancel)
                    for found, pairs, kept in kept_rows:
                        for rows in found:
                            if stores:
                                stores[-1].append(rows)
                                continue
                            # the rows and their merged copy
                            if merging and self._gauge.try_reserve(2 * int(rows.nbytes)):
                                waiting += 2 * int(rows.nbytes)
                                runs[-1].append(rows)
                                continue
                            if merging:  # no room to wait in memory: in stores, in order
                                self._gauge.release(waiting)
                                waiting = 0
                                stores = [self._partner_store() for _ in runs]
                                for partner, run in zip(stores, runs, strict=True):
                                    for part in run:
                                        partner.append(part)
                                runs = [[] for _ in runs]
                                stores[-1].append(rows)
                                continue
                            store.append(rows, increasing=True)
                        kept_total += kept
                        done += pairs
                        if progress is not None:
                            progress(done, total)
                    subs = pair_plan.sub_block_pairs() if pair_plan is not None else iter(())
                    for rows in subs:
                        if cancel is not None and cancel.is_set():
                            raise ComparisonCancelled("comparison cancelled")
                        c, keep = segment_pair_counts(
                            segs[a], segs[b], rows, self.params.segment_threshold
                        )
                        rows = rows[keep]
                        out = np.zeros((rows.shape[0], p + 1), dtype=np.uint64)
                        out[:, a] = pseud[a][rows[:, 0]]
                        out[:, b] = pseud[b][rows[:, 1]]
                        out[:, p] = c[keep]
                        store.append(out)
                        kept_total += int(rows.shape[0])
                        done += int(keep.size)
                        if progress is not None:
                            progress(done, total)
                if stores:
                    for rows in _merged_from_stores(stores, a):
                        store.append(rows, increasing=True)
                    for partner in stores:
                        partner.close()
                    stores = []
                elif merging:
                    merged = _merged(runs, a, self.workers)
                    self._gauge.release(waiting)  # the store reserves what it keeps
                    waiting = 0
                    for rows in merged:
                        store.append(rows, increasing=True)
                    del merged
        except BaseException:
            self._gauge.release(waiting)
            for partner in stores:
                partner.close()
            store.close()
            raise
        stats.survivors_with_duplicates = kept_total
        for inputs in (segs, sides, indexes):  # the survivors' sort gets their memory
            inputs.clear()
        return self._finish_compare(store, stats, t0, "pairs")

    # ----------------------------------------------------------------- ring
    def _own_x(self, own_pseudonyms: np.ndarray) -> np.ndarray:
        """This party's records' 1-bit counts for the rows it is a member of, 0 for the others."""
        if self._known:  # after compare: every pseudonym looked up (0 is none), counts compiled
            positions = self._known_positions(self.index, own_pseudonyms)
            counts = np.empty(own_pseudonyms.shape[0], dtype=np.uint64)
            own_counts(positions, self._shared_rows, self._x, counts)
            return counts
        out = np.zeros(own_pseudonyms.shape[0], dtype=np.uint64)
        member = own_pseudonyms != 0
        if np.any(member):
            out[member] = super()._own_x(own_pseudonyms[member])
        return out

    def _check_known(self, candidates: np.ndarray) -> None:
        if candidates.shape[0] and not np.all(np.count_nonzero(candidates, axis=1) == 2):
            raise RingError("ring message rows of target any must name exactly two records")
        for j in range(self.parties):
            col = candidates[:, j]
            if col.size and np.any((self._known_positions(j, col) < 0) & (col != 0)):
                raise RingError(f"ring message names an unknown pseudonym of party {j}")

    def _solver(self) -> StreamedSolver:
        # The solver works after the comparison, in the half of the budget the comparison used,
        # sorting the matched pairs into its order (in memory, or on disk) and scanning them
        # keeping per-record state (party.protocol.components); its stores spill like the ring's.
        return StreamedSolver(
            self._known,
            self.params.min_parties,
            self.params.solver,
            self.params.match_threshold,
            self._store,
            LocalGauge(self.params.memory_budget_bytes // 2, outer=self._gauge.outer),
            workers=self.workers,
        )

    def _keep_above(self, rows: np.ndarray) -> None:
        """Keep the chunk's matched pairs (``_keep_now``): with more than one kernel thread, on
        the engine's keeper thread while the caller unmasks and classifies the next chunk (one
        chunk in flight, in order, its rows held on the gauge; in the calling thread when the
        gauge refuses them). A keeper's failure is raised by the next feed or by the end."""
        self._wait_keeping()
        if self.workers <= 1 or not self._gauge.try_reserve(rows.nbytes):
            self._keep_now(rows)
            return
        if self._keeper is None:
            self._keeper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pprl-keeper")
        try:
            self._keeping = self._keeper.submit(self._keep_held, rows)
        except BaseException:
            self._gauge.release(rows.nbytes)
            raise

    def _keep_held(self, rows: np.ndarray) -> None:
        try:
            self._keep_now(rows)
        finally:
            self._gauge.release(rows.nbytes)

    def _wait_keeping(self) -> None:
        """Wait for the chunk in flight on the keeper thread (raising its failure)."""
        keeping, self._keeping = self._keeping, None
        if keeping is not None:
            keeping.result()

    def _stop_keeper(self) -> None:
        """Wait for the keeper thread's chunk, whatever its outcome, and end the thread."""
        keeping, self._keeping = self._keeping, None
        if keeping is not None:
            concurrent.futures.wait([keeping])
        if self._keeper is not None:
            self._keeper.shutdown(wait=True)
            self._keeper = None

    def _keep_now(self, rows: np.ndarray) -> None:
        """Keep the chunk's matched pairs, and hand them to the group solver at once: its first
        step (node numbers, visiting order) runs while the ring is still returning. Where the
        budget refuses the solver that early, it starts from the matches store at the end."""
        super()._keep_above(rows)
        if not self._solve_early:
            return
        try:
            if self._solving is None:
                self._solving = self._solver()
            self._solving.add(*self._matched_pairs(rows))
        except MemoryBudgetError:
            if self._solving is not None:
                self._solving.close()
            self._solving, self._solve_early = None, False

    def ring_finish_end(self) -> tuple[int, int, int]:
        """Initiator: classify the pairs (as PartyEngine), then solve the groups and prepare each
        party's results; returns (pairs summed, matched pairs, rows of all parties' results)."""
        try:
            self._wait_keeping()
        finally:
            self._stop_keeper()
        summed, matched_count, _ = super().ring_finish_end()
        assert self._matches is not None
        t0, c0 = time.perf_counter(), time.process_time()
        solving, self._solving = self._solving, None
        if solving is None:  # no pair came back, or the solver was refused while they came
            solving = self._solver()
            try:
                for ends, sims in self._matched_chunks():
                    solving.add(ends, sims)
            except BaseException:
                solving.close()
                raise
        self._group_rows, group_count = solving.finish()
        self.group_count = group_count
        self.timings["groups"] = time.perf_counter() - t0
        self.timings["cpu.groups"] = time.process_time() - c0  # the process's, all threads
        logger.info(
            "party 0: %d pairs summed, %d matched, %d groups", summed, matched_count, group_count
        )
        return summed, matched_count, sum(s.rows for s in self._group_rows)

    def _matched_chunks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The matched pairs chunk by chunk (``_matched_pairs``)."""
        assert self._matches is not None
        for rows in self._matches.chunks(self._chunk_rows(self.parties + 1)):
            yield self._matched_pairs(rows)

    def _matched_pairs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Matched rows (pseudonyms..., Dice bits) as (k, 4) uint64 ends (party a, pseudonym,
        party b, pseudonym; a < b) and their (k,) Dice."""
        p = self.parties
        ends = np.empty((rows.shape[0], 4), dtype=np.uint64)
        pair_ends(np.ascontiguousarray(rows, dtype=np.uint64), p, ends)  # compiled, one pass
        return ends, rows[:, p].view(np.float64).copy()

    def close(self) -> None:
        """As PartyEngine.close, and the group solver's memory if a run ends while it is fed."""
        self._stop_keeper()
        if self._solving is not None:
            self._solving.close()
            self._solving = None
        super().close()

    # ----------------------------------------------------------------- results
    def result_count(self, party: int) -> int:
        """Initiator: the number of groups ``party`` is in."""
        self._check_party(party)
        return self._group_rows[party].rows

    def _check_party(self, party: int) -> None:
        if isinstance(party, bool) or not isinstance(party, int) or not 0 <= party < self.parties:
            raise ResultsError(f"party index must be in 0..{self.parties - 1}, got {party!r}")
        if not self._group_rows:
            raise ResultsError("the groups are not solved yet (ring_finish_end runs first)")

    def result_chunks(self, party: int) -> Iterator[PartyResults]:
        """Initiator -> party ``party``: its GroupResults chunk by chunk, in linkage-id order."""
        self._check_party(party)
        empty = True
        for rows in self._group_rows[party].chunks(self._chunk_rows(self.RESULT_COLUMNS)):
            empty = False
            yield self._results_of(rows, party)
        if empty:
            yield self._results_of(np.zeros((0, self.RESULT_COLUMNS), np.uint64), party)

    def _results_of(self, rows: np.ndarray, party: int | None = None) -> GroupResults:
        return group_results(rows, self.index if party is None else party)

    def _result_columns(self, results: PartyResults) -> np.ndarray:
        assert isinstance(results, GroupResults)
        return np.column_stack(
            [
                results.linkage_ids,
                results.similarities.view(np.uint64),
                results.pseudonyms,
                results.group_sizes,
                results.group_parties,
            ]
        )

    def _check_results(self, results: PartyResults) -> np.ndarray:
        """PartyEngine's checks, and: group sizes in 2..P equal to the number of parties in the
        mask, the mask names only parties of the run and includes this party."""
        if not isinstance(results, GroupResults):
            raise ResultsError("results of target any must carry group sizes and parties")
        rows = super()._check_results(results)
        k = results.linkage_ids.shape[0]
        sizes, masks = results.group_sizes, results.group_parties
        for name, arr in (("group sizes", sizes), ("group parties", masks)):
            if not isinstance(arr, np.ndarray) or arr.dtype != np.uint64 or arr.shape != (k,):
                raise ResultsError(f"results: {name} must be a ({k},) uint64 array")
        if k == 0:
            return rows
        p = self.parties
        counts = popcount_rows(masks.reshape(k, 1))
        if (
            np.any(sizes < max(2, self.params.min_parties))
            or np.any(sizes > p)
            or np.any(counts != sizes)
            or (p < 64 and np.any(masks >> np.uint64(p)))
            or np.any((masks >> np.uint64(self.index)) & np.uint64(1) == 0)
        ):
            raise ResultsError(
                "results name a group whose size or parties are inconsistent with the run"
            )
        return rows

    def resolved_chunks(self, chunks: Iterable[PartyResults]) -> Iterator[ResolvedMatches]:
        """Result chunks resolved to this party's record ids, with each group's size and the
        names of its parties (in party order), chunk by chunk in linkage-id order."""
        names = self.params.parties
        by_mask: dict[int, tuple[str, ...]] = {}  # few distinct masks: name each once
        for results in chunks:
            rows = self._check_results(results)
            assert isinstance(results, GroupResults)
            for mask in np.unique(results.group_parties).tolist():
                if mask not in by_mask:
                    by_mask[mask] = tuple(names[q] for q in mask_parties(mask, self.parties))
            yield ResolvedMatches(
                results.linkage_ids,
                results.similarities,
                self._record_ids_at(rows),
                results.group_sizes,
                [by_mask[m] for m in results.group_parties.tolist()],
            )

    def resolved_rows(self, chunks: Iterable[PartyResults]) -> Iterator[GroupRow]:  # type: ignore[override]
        """GroupRows of result chunks in linkage-id order (own record id, group size, parties)."""
        for resolved in self.resolved_chunks(chunks):
            assert resolved.group_sizes is not None and resolved.group_parties is not None
            for label, sim, rid, size, parties in zip(
                resolved.labels(),
                resolved.similarities.tolist(),
                resolved.record_ids,
                resolved.group_sizes.tolist(),
                resolved.group_parties,
                strict=True,
            ):
                yield GroupRow(label, sim, rid, size, parties)
