"""PartyEngine: one party's side of one protocol run (steps 4-7), pure and transport-free.

Call order for party i (the transport moves the returned objects between parties):

1. ``block_digests()`` -> sent to whoever intersects; ``set_common_blocks(common)``.
2. ``outgoing_shares()`` -> share j goes to party j; ``receive_share(share)`` for each of the P-1
   shares addressed to party i.
3. ``compare()`` (CPU heavy; run it off the event loop) keeps the surviving candidate sets inside.
4. Ring: the initiator (index 0) calls ``ring_start()``; party 1..P-1 in order call
   ``ring_step(msg)`` on the previous party's message; the initiator calls ``ring_finish(msg)``.
5. The initiator sends ``results_for(classification, j)`` to party j, which calls
   ``resolve_results(results)`` to get its ``MatchRow`` list.

Candidate sets are identified by their tuple of pseudonyms (one per party), which is the same at
every party, so a set found in several blocks (multi-pass blocking, B > 1) or sub-blocks is one
candidate set: survivors are de-duplicated by that tuple before the ring.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from party.encoding.bits import popcount_rows, slice_bits
from party.protocol.blocks import (
    BlockStats,
    block_index,
    check_common,
    distinct_digests,
    has_duplicates,
    lookup_sorted,
    sub_blocks,
)
from party.protocol.classify import (
    Classification,
    MatchRow,
    PartyResults,
    dice,
    greedy_one_to_one,
    linkage_label,
)
from party.protocol.errors import (
    ComparisonCancelled,
    MemoryBudgetError,
    ProtocolError,
    ResultsError,
    RingError,
    StateError,
    SummationError,
)
from party.protocol.kernel import (
    DEFAULT_KERNEL,
    StageCounts,
    compare_block_batch,
    compare_small_blocks,
    iter_block,
)
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable, validate_table
from party.protocol.ring import (
    RingMessage,
    add_mod64,
    intersect_sorted_rows,
    random_masks,
    sub_mod64,
    unique_sorted_rows,
    validate_message,
)
from party.protocol.segments import SegmentShare, new_pseudonyms, validate_share

logger = logging.getLogger(__name__)

#: Blocks with at most this many candidate sets are compared in vectorised batches of many blocks.
SMALL_BLOCK_SETS = 4096


@dataclass
class ComparisonStats:
    """What one party's compare() did (counts are candidate sets, i.e. one record per party)."""

    party: int
    blocks: int = 0
    sub_blocked_blocks: int = 0
    candidate_sets_uncapped: int = 0  # sum over common blocks of prod(block sizes)
    candidate_sets: int = 0  # after sub-blocking (what the kernel enumerated, duplicates included)
    largest_block_sets: int = 0
    # parties in the order they join partial sets (increasing number of shared records)
    join_order: list[int] = field(default_factory=list)
    # index k: partial sets of k + 1 records, i.e. when party join_order[k] joins (index 0 unused)
    evaluated_per_stage: list[int] = field(default_factory=list)
    survived_per_stage: list[int] = field(default_factory=list)
    survivors_with_duplicates: int = 0
    survivors: int = 0  # distinct candidate sets kept by this party
    seconds: float = 0.0

    @property
    def pruned_per_stage(self) -> list[int]:
        return [
            e - s for e, s in zip(self.evaluated_per_stage, self.survived_per_stage, strict=True)
        ]

    @property
    def reduction_ratio(self) -> float:
        """RR_f: fraction of enumerated candidate sets removed by the segment filter."""
        if self.candidate_sets == 0:
            return 0.0
        return 1.0 - self.survivors_with_duplicates / self.candidate_sets


class PartyEngine:
    """One party's side of one run; pure (no I/O, no threads of its own). See the module docstring.

    ``random_bytes`` (pseudonyms and masks; default ``os.urandom``) is replaceable only so tests can
    inject edge-case masks; ``kernel`` picks the comparison kernel ("numba" or "numpy");
    ``workers`` is the number of kernel threads (the results do not depend on it).
    """

    def __init__(
        self,
        index: int,
        params: ProtocolParameters,
        records: EncodedTable,
        *,
        random_bytes: Callable[[int], bytes] = os.urandom,
        kernel: str = DEFAULT_KERNEL,
        workers: int = 1,
    ) -> None:
        if not isinstance(params, ProtocolParameters):
            raise ProtocolError("params must be ProtocolParameters")
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < params.party_count
        ):
            raise ProtocolError(
                f"party index must be in 0..{params.party_count - 1}, got {index!r}"
            )
        validate_table(records, params.filter_bits, f"party {index} encodings")
        self.index = index
        self.params = params
        self.parties = params.party_count
        self.segment_bits = params.segment_bits
        self._records = records
        self._random_bytes = random_bytes
        self.kernel = kernel
        self.workers = max(1, int(workers))  # kernel threads; results do not depend on it
        self._x = popcount_rows(records.filters)
        self._digest_width = int(records.block_digests.shape[1])
        self._common: np.ndarray | None = None
        self._shared_rows = np.zeros(0, dtype=np.int64)  # table rows sent, sorted by pseudonym
        self._pseudonyms = np.zeros(0, dtype=np.uint64)  # pseudonym of each shared row (sorted)
        self._digests_out = np.zeros((0, self._digest_width), dtype=np.uint64)
        self._shares: dict[int, SegmentShare] = {}
        self._known: list[np.ndarray] = []  # sorted pseudonyms per party (after compare)
        self._survivors: np.ndarray | None = None
        self._survivor_c: np.ndarray | None = None
        self._sent: np.ndarray | None = None
        self._mask_c: np.ndarray | None = None
        self._mask_x: np.ndarray | None = None
        self._finished = False
        self.timings: dict[str, float] = {}
        self.comparison_stats: ComparisonStats | None = None

    # ----------------------------------------------------------------- blocks, pseudonyms
    def block_digests(self) -> np.ndarray:
        """This party's distinct non-zero block digests (sorted uint64)."""
        return distinct_digests(self._records.block_digests)

    def set_common_blocks(self, common: np.ndarray) -> BlockStats:
        """Record the common blocks, draw pseudonyms for the records in them, return block sizes."""
        if self._common is not None:
            raise StateError("common blocks are already set for this run")
        t0 = time.perf_counter()
        common = check_common(common).copy()
        digests = self._records.block_digests
        n = digests.shape[0]
        index = block_index(digests, common)
        in_common = np.zeros(n, dtype=bool)
        in_common[index.rows] = True
        rows = np.flatnonzero(in_common).astype(np.int64)
        pseud = new_pseudonyms(rows.size, self._random_bytes)
        order = np.argsort(pseud, kind="stable")
        self._shared_rows = rows[order]
        self._pseudonyms = pseud[order]
        out = digests[self._shared_rows].copy()
        if out.size:
            _, found = lookup_sorted(common, out)
            keep = (out != 0) & found
            out[~keep] = 0
        self._digests_out = out
        self._common = common
        self.timings["blocks"] = time.perf_counter() - t0
        stats = BlockStats.from_sizes(index.sizes(), n, int(rows.size), self.params.max_block_size)
        logger.info(
            "party %d: %d common blocks, %d of %d records shared",
            self.index,
            stats.common_blocks,
            stats.records_in_common_blocks,
            n,
        )
        return stats

    @property
    def record_pseudonyms(self) -> np.ndarray:
        """(n,) uint64: each table row's pseudonym in this run, 0 for rows in no common block."""
        out = np.zeros(len(self._records.record_ids), dtype=np.uint64)
        out[self._shared_rows] = self._pseudonyms
        return out

    def shared_records(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rows in common blocks, by pseudonym: (pseudonyms, common digests, filters, 1-bit counts).

        What mode mpc3 secret-shares instead of segments (``party.mpc.inputs``).
        """
        if self._common is None:
            raise StateError("set_common_blocks must be called before shared_records")
        rows = self._shared_rows
        return (
            self._pseudonyms.copy(),
            self._digests_out.copy(),
            self._records.filters[rows],
            self._x[rows].copy(),
        )

    def _segment(self, j: int) -> np.ndarray:
        a = j * self.segment_bits
        filters = self._records.filters[self._shared_rows]
        return slice_bits(filters, a, a + self.segment_bits)

    # ----------------------------------------------------------------- segment exchange
    def outgoing_shares(self) -> list[SegmentShare]:
        """One share per other party j: segment j of every record in a common block."""
        if self._common is None:
            raise StateError("set_common_blocks must be called before outgoing_shares")
        return [
            SegmentShare(
                source=self.index,
                target=j,
                segment_bits=self.segment_bits,
                pseudonyms=self._pseudonyms.copy(),
                block_digests=self._digests_out.copy(),
                segments=self._segment(j),
            )
            for j in range(self.parties)
            if j != self.index
        ]

    def receive_share(self, share: SegmentShare) -> None:
        """Validate and store the share another party sent this party."""
        if self._common is None:
            raise StateError("set_common_blocks must be called before receive_share")
        if self._survivors is not None:
            raise StateError("shares arrived after the comparison")
        validate_share(
            share,
            target=self.index,
            parties=self.parties,
            segment_bits=self.segment_bits,
            common=self._common,
            digest_width=self._digest_width,
        )
        if int(share.source) in self._shares:
            raise StateError(f"party {self.index} already has the share of party {share.source}")
        self._shares[int(share.source)] = share

    # ----------------------------------------------------------------- comparison
    def compare(
        self,
        progress: Callable[[int, int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> ComparisonStats:
        """Enumerate and filter candidate sets on this party's segment; keep the survivors.

        ``progress(done, total)`` is called with candidate-set counts; setting ``cancel`` stops the
        comparison with ComparisonCancelled (nothing is kept; compare may be called again).
        """
        if self._common is None:
            raise StateError("set_common_blocks must be called before compare")
        missing = [j for j in range(self.parties) if j != self.index and j not in self._shares]
        if missing:
            raise StateError(f"party {self.index} is missing the shares of parties {missing}")
        if self._survivors is not None:
            raise StateError("compare already ran for this run")
        t0 = time.perf_counter()
        p = self.parties
        pseud: list[np.ndarray] = []
        digs: list[np.ndarray] = []
        segs: list[np.ndarray] = []
        for j in range(p):
            if j == self.index:
                pseud.append(self._pseudonyms)
                digs.append(self._digests_out)
                segs.append(self._segment(self.index))
            else:
                sh = self._shares[j]
                order = np.argsort(sh.pseudonyms, kind="stable")
                pseud.append(sh.pseudonyms[order])
                digs.append(sh.block_digests[order])
                segs.append(sh.segments[order])
        self._known = pseud
        # Parties join partial sets in increasing order of their number of shared records (ties:
        # index), so the first, unfiltered products are as small as they can be; from here on,
        # position k in these lists is the k-th party to join.
        join = sorted(range(p), key=lambda j: (int(pseud[j].size), j))
        pseud = [pseud[j] for j in join]
        digs = [digs[j] for j in join]
        segs = [segs[j] for j in join]
        common = self._common
        indices = [block_index(digs[j], common, keys=pseud[j]) for j in range(p)]
        sizes = np.stack([ix.sizes() for ix in indices])  # (P, blocks)
        cap = self.params.max_block_size
        stats = ComparisonStats(party=self.index, blocks=int(common.size), join_order=join)
        nb = int(common.size)
        live = np.all(sizes > 0, axis=0) if nb else np.zeros(0, dtype=bool)
        over_cap = np.zeros(nb, dtype=bool) if cap is None else sizes.max(axis=0, initial=0) > cap
        # "fast" blocks: uncapped and small; compared straight from the CSR indices in batches
        fast = live & ~over_cap & (np.prod(sizes.astype(np.float64), axis=0) <= SMALL_BLOCK_SETS)
        fast_ids = np.flatnonzero(fast)
        fast_sets = np.prod(sizes[:, fast_ids], axis=0).astype(np.int64)
        slow_ids = np.flatnonzero(live & ~fast)
        stats.candidate_sets_uncapped = int(fast_sets.sum())
        stats.candidate_sets = int(fast_sets.sum())
        stats.largest_block_sets = int(fast_sets.max(initial=0))
        # exact Python ints for the others: a block's product of sizes can exceed 2^63
        for blk in slow_ids.tolist():
            full = 1
            for j in range(p):
                full *= int(sizes[j, blk])
            stats.candidate_sets_uncapped += full
            stats.largest_block_sets = max(stats.largest_block_sets, full)
            if over_cap[blk]:
                stats.sub_blocked_blocks += 1
                members = [indices[j].members(blk) for j in range(p)]
                for sub in sub_blocks(members, cap):
                    cnt = 1
                    for m in sub:
                        cnt *= int(m.size)
                    stats.candidate_sets += cnt
            else:
                stats.candidate_sets += full

        def plan() -> Iterator[tuple[list[np.ndarray], int]]:
            """Sub-blocks of the other blocks, generated lazily."""
            for blk in slow_ids.tolist():
                members = [indices[j].members(blk) for j in range(p)]
                for sub in sub_blocks(members, cap):
                    size = 1
                    for m in sub:
                        size *= int(m.size)
                    yield sub, size

        total = stats.candidate_sets
        done = 0

        def tick(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(done, total)

        counts = StageCounts.zeros(p)
        budget = self.params.memory_budget_bytes
        bytes_per_set = 8 * (p + 1)
        limit = budget // 4
        kept_rows: list[np.ndarray] = []
        kept_c: list[np.ndarray] = []
        held = 0
        if progress is not None:
            progress(0, total)
        seg_pops = [popcount_rows(s) for s in segs]

        def keep(rows: np.ndarray, c: np.ndarray) -> None:
            nonlocal held
            held += int(rows.shape[0])
            if held * bytes_per_set > limit:
                raise MemoryBudgetError(
                    f"party {self.index}: more than {held} candidate sets survive the segment "
                    f"filter, which exceeds memory_budget_bytes={budget}; raise the segment "
                    "threshold s_m, set max_block_size, or raise the budget"
                )
            found = np.empty(rows.shape, dtype=np.uint64)
            for k in range(p):
                found[:, join[k]] = pseud[k][rows[:, k]]
            kept_rows.append(found)
            kept_c.append(c)

        # Small blocks go through the vectorised many-blocks path in batches; large ones through
        # the chunked kernel one at a time.
        words = -(-self.segment_bits // 64)
        batch_sets = max(SMALL_BLOCK_SETS, (budget // 4) // (16 * words + 8 * p + 64))
        batch: list[list[np.ndarray]] = []
        batch_total = 0

        def flush() -> None:
            nonlocal batch, batch_total
            if cancel is not None and cancel.is_set():
                raise ComparisonCancelled("comparison cancelled")
            rows, c = compare_small_blocks(
                segs,
                seg_pops,
                batch,
                self.segment_bits,
                self.params.segment_threshold,
                counts=counts,
                workers=self.workers,
            )
            keep(rows, c)
            tick(batch_total)
            batch, batch_total = [], 0

        cum = np.cumsum(fast_sets)
        lo = 0
        while lo < fast_ids.size:
            if cancel is not None and cancel.is_set():
                raise ComparisonCancelled("comparison cancelled")
            base = int(cum[lo - 1]) if lo else 0
            hi = max(lo + 1, int(np.searchsorted(cum, base + batch_sets, side="right")))
            ids = fast_ids[lo:hi]
            rows, c = compare_block_batch(
                segs,
                seg_pops,
                [ix.rows for ix in indices],
                np.stack([ix.starts[ids] for ix in indices]),
                sizes[:, ids],
                self.segment_bits,
                self.params.segment_threshold,
                counts=counts,
                workers=self.workers,
            )
            keep(rows, c)
            tick(int(cum[hi - 1]) - base)
            lo = hi

        for sub, size in plan():
            if size <= SMALL_BLOCK_SETS:
                batch.append(sub)
                batch_total += size
                if batch_total >= batch_sets:
                    flush()
                continue
            block_segs = [segs[j][sub[j]] for j in range(p)]
            block_pops = [seg_pops[j][sub[j]] for j in range(p)]
            for idx, c in iter_block(
                block_segs,
                self.segment_bits,
                self.params.segment_threshold,
                kernel=self.kernel,
                budget_bytes=budget // 2,
                counts=counts,
                cancel=cancel,
                tick=tick,
                pops=block_pops,
                workers=self.workers,
            ):
                glob = np.empty(idx.shape, dtype=np.int64)
                for j in range(p):
                    glob[:, j] = sub[j][idx[:, j]]
                keep(glob, c)
        if batch:
            flush()
        if kept_rows:
            all_rows = np.concatenate(kept_rows)
            all_c = np.concatenate(kept_c)
        else:
            all_rows = np.zeros((0, p), dtype=np.uint64)
            all_c = np.zeros(0, dtype=np.int64)
        stats.survivors_with_duplicates = int(all_rows.shape[0])
        if all_rows.shape[0]:
            first = unique_sorted_rows(all_rows)
            all_rows, all_c = all_rows[first], all_c[first]
        self._survivors = all_rows
        self._survivor_c = all_c
        stats.evaluated_per_stage = counts.evaluated
        stats.survived_per_stage = counts.survived
        stats.survivors = int(all_rows.shape[0])
        stats.seconds = time.perf_counter() - t0
        self.timings["compare"] = stats.seconds
        self.comparison_stats = stats
        logger.info(
            "party %d: %d candidate sets, %d survive the segment filter (RR_f %.4f)",
            self.index,
            stats.candidate_sets,
            stats.survivors,
            stats.reduction_ratio,
        )
        return stats

    # ----------------------------------------------------------------- ring summation
    def _own_x(self, own_pseudonyms: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self._pseudonyms, own_pseudonyms)
        return self._x[self._shared_rows[pos]].astype(np.uint64)

    def _check_known(self, candidates: np.ndarray) -> None:
        for j in range(self.parties):
            known = self._known[j]
            col = candidates[:, j]
            if col.size == 0:
                continue
            if known.size == 0:
                raise RingError(f"ring message names an unknown pseudonym of party {j}")
            pos = np.minimum(np.searchsorted(known, col), known.size - 1)
            if not np.all(known[pos] == col):
                raise RingError(f"ring message names an unknown pseudonym of party {j}")

    def ring_start(self) -> RingMessage:
        """Initiator only: mask c_0 and x_0 of every surviving set with fresh CSPRNG masks."""
        if self.index != 0:
            raise StateError(
                f"party {self.index} is not the initiator; only party 0 starts the ring"
            )
        if self._survivors is None or self._survivor_c is None:
            raise StateError("compare must run before ring_start")
        if self._sent is not None:
            raise StateError("ring_start already ran for this run (masks are used once)")
        t0 = time.perf_counter()
        m = self._survivors.shape[0]
        self._mask_c = random_masks(m, self._random_bytes)
        self._mask_x = random_masks(m, self._random_bytes)
        self._sent = self._survivors
        x0 = self._own_x(self._survivors[:, 0])
        msg = RingMessage(
            hop=0,
            candidates=self._survivors.copy(),
            c_masked=add_mod64(self._mask_c, self._survivor_c.astype(np.uint64)),
            x_masked=add_mod64(self._mask_x, x0),
        )
        self.timings["ring"] = time.perf_counter() - t0
        return msg

    def ring_step(self, incoming: RingMessage) -> RingMessage:
        """Non-initiator: keep the sets it also kept, add its own c_i and x_i, pass on."""
        if self.index == 0:
            raise StateError("the initiator calls ring_finish, not ring_step")
        if self._survivors is None or self._survivor_c is None:
            raise StateError("compare must run before ring_step")
        t0 = time.perf_counter()
        validate_message(
            incoming, parties=self.parties, expected_hop=self.index - 1, receiver=self.index
        )
        self._check_known(incoming.candidates)
        ia, ib = intersect_sorted_rows(incoming.candidates, self._survivors)
        cand = incoming.candidates[ia]
        xi = self._own_x(cand[:, self.index])
        out = RingMessage(
            hop=self.index,
            candidates=cand,
            c_masked=add_mod64(incoming.c_masked[ia], self._survivor_c[ib].astype(np.uint64)),
            x_masked=add_mod64(incoming.x_masked[ia], xi),
        )
        self.timings["ring"] = time.perf_counter() - t0
        return out

    def ring_finish(self, incoming: RingMessage) -> Classification:
        """Initiator: unmask the sums, compute Dice, apply s_t and optional one-to-one."""
        if self.index != 0:
            raise StateError(
                f"party {self.index} is not the initiator; only party 0 finishes the ring"
            )
        if self._sent is None or self._mask_c is None or self._mask_x is None:
            raise StateError("ring_start must run before ring_finish")
        if self._finished:
            raise StateError("ring_finish already ran for this run")
        t0 = time.perf_counter()
        p = self.parties
        validate_message(incoming, parties=p, expected_hop=p - 1, receiver=0)
        m = incoming.candidates.shape[0]
        ia, ib = intersect_sorted_rows(incoming.candidates, self._sent)
        if ia.size != m:
            raise RingError(
                f"mismatched candidate list: {m - ia.size} of {m} returned sets were never sent"
            )
        cand = incoming.candidates[ia]
        sum_c = sub_mod64(incoming.c_masked[ia], self._mask_c[ib])
        sum_x = sub_mod64(incoming.x_masked[ia], self._mask_x[ib])
        l_bits = self.params.filter_bits
        bad = (sum_c > np.uint64(l_bits)) | (sum_x > np.uint64(p * l_bits))
        if np.any(bad):
            raise SummationError(
                f"{int(bad.sum())} unmasked sums are out of range (c > l or x > P*l): a party "
                "added wrong values or the ring message was altered"
            )
        c64 = sum_c.astype(np.int64)
        x64 = sum_x.astype(np.int64)
        if np.any(p * c64 > x64):
            raise SummationError(
                "unmasked sums are inconsistent (P * c > x): a party added wrong values"
            )
        sim = dice(p, c64, x64)
        above = np.flatnonzero(sim >= self.params.match_threshold)
        chosen = above
        if self.params.one_to_one and above.size:
            chosen = above[greedy_one_to_one(cand[above], sim[above])]
        self._finished = True
        self.timings["classify"] = time.perf_counter() - t0
        return Classification(
            candidates=cand[chosen],
            similarities=sim[chosen],
            linkage_ids=np.arange(1, chosen.size + 1, dtype=np.uint64),
            sets_summed=int(m),
            above_threshold=int(above.size),
            matches=int(chosen.size),
        )

    # ----------------------------------------------------------------- results
    def results_for(self, classification: Classification, party: int) -> PartyResults:
        """Initiator -> party ``party``: linkage ids, similarities and that party's pseudonyms only."""
        if isinstance(party, bool) or not isinstance(party, int) or not 0 <= party < self.parties:
            raise ResultsError(f"party index must be in 0..{self.parties - 1}, got {party!r}")
        return PartyResults(
            party=party,
            linkage_ids=classification.linkage_ids.copy(),
            similarities=classification.similarities.copy(),
            pseudonyms=classification.candidates[:, party].copy(),
        )

    def resolve_results(self, results: PartyResults) -> list[MatchRow]:
        """Map this party's pseudonyms in ``results`` back to its record ids."""
        if not isinstance(results, PartyResults):
            raise ResultsError("expected PartyResults")
        if int(results.party) != self.index:
            raise ResultsError(
                f"results for party {results.party} were handed to party {self.index}"
            )
        ids, sims, ps = results.linkage_ids, results.similarities, results.pseudonyms
        k = ids.shape[0] if isinstance(ids, np.ndarray) else -1
        if (
            not isinstance(ids, np.ndarray)
            or ids.dtype != np.uint64
            or ids.ndim != 1
            or not isinstance(sims, np.ndarray)
            or sims.dtype != np.float64
            or sims.shape != (k,)
            or not isinstance(ps, np.ndarray)
            or ps.dtype != np.uint64
            or ps.shape != (k,)
        ):
            raise ResultsError(
                "results must be three equally long 1-D arrays (uint64, float64, uint64)"
            )
        if k and has_duplicates(ids):
            raise ResultsError("results repeat a linkage id")
        if k and not np.all(np.isfinite(sims) & (sims >= 0) & (sims <= 1)):
            raise ResultsError("results contain a similarity outside [0, 1]")
        if k == 0:
            return []
        if self._pseudonyms.size == 0:
            raise ResultsError("results name pseudonyms this party never issued")
        pos = np.minimum(np.searchsorted(self._pseudonyms, ps), self._pseudonyms.size - 1)
        if not np.all(self._pseudonyms[pos] == ps):
            raise ResultsError("results name pseudonyms this party never issued")
        rows = self._shared_rows[pos]
        rid = self._records.record_ids
        order = np.argsort(ids, kind="stable")
        return [
            MatchRow(linkage_label(lid), sim, rid[row])
            for lid, sim, row in zip(
                ids[order].tolist(), sims[order].tolist(), rows[order].tolist(), strict=True
            )
        ]
