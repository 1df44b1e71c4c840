"""PartyEngine: one party's side of one protocol run (steps 4-7), pure and transport-free.

Call order for party i (the transport moves the returned objects between parties):

1. ``block_digests()`` -> sent to whoever intersects; ``set_common_blocks(common)``.
2. ``outgoing_shares()`` -> share j goes to party j; ``receive_share(share)`` for each of the P-1
   shares addressed to party i.
3. ``compare()`` (CPU heavy; run it off the event loop) keeps the surviving candidate sets inside.
4. Ring, streamed in chunks of about 1 MiB: the initiator (index 0) sends the chunks of
   ``ring_start_chunks()``; party 1..P-1 in order call ``ring_step_feed(chunk)`` on each chunk of
   the previous party's message, ``ring_step_end()``, and pass ``ring_out_chunks()`` on (or,
   passing each chunk on as it comes, ``ring_step_chunk(chunk)`` -> outgoing chunk and
   ``ring_step_close()``); the initiator calls ``ring_finish_feed(chunk)`` per returning chunk
   and ``ring_finish_end()``.
5. The initiator sends the chunks of ``result_chunks(j)`` to party j, which calls
   ``receive_results_chunk`` per chunk and ``results_end()``; each party writes
   ``resolved_rows(...)`` (its ``MatchRow``s, in linkage-id order).
6. ``close()`` when the run ends: frees every store and removes the spill folder.

Whole-message variants (``ring_start``, ``ring_step``, ``ring_finish`` -> ``Classification``,
``results_for``, ``resolve_results``) do the same in memory, for tests and small tools. Everything
that grows with the candidate sets lives in spilling row stores (``party.protocol.spill``).

Candidate sets are identified by their tuple of pseudonyms (one per party), which is the same at
every party, so a set found in several blocks (multi-pass blocking, B > 1) or sub-blocks is one
candidate set: survivors are de-duplicated by that tuple before the ring.
"""

from __future__ import annotations

import logging
import os
import pathlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.encoding.bits import popcount_rows
from party.protocol._numba_blocks import (
    block_sizes,
    rows_in_blocks,
    strictly_increasing,
)
from party.protocol._numba_ring import start_rows, step_rows
from party.protocol._numba_segments import cut_segments
from party.protocol.block_ranges import FastIndex, FastInputs, RemoteBlocks, fast_ranges
from party.protocol.blocks import (
    BlockStats,
    DigestLookup,
    block_index_at,
    check_common,
    common_blocks,
    distinct_digests,
    has_duplicates,
    sort_position_rows,
    sub_blocks,
)
from party.protocol.classify import (
    ChunkedOneToOne,
    Classification,
    MatchRow,
    PartyResults,
    ResolvedMatches,
    dice,
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
    FastBlocks,
    StageCounts,
    compare_block_batch,
    compare_small_blocks,
    fast_block_rows,
    iter_block,
    plan_blocks,
)
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable, validate_table
from party.protocol.ring import (
    RingMessage,
    random_masks,
    sort_rows,
    sub_mod64,
    validate_message,
)
from party.protocol.ring_cursor import RingCursor
from party.protocol.segments import SegmentShare, pseudonyms_in_order, validate_share
from party.protocol.spill import (
    LocalGauge,
    MemoryGauge,
    RowStore,
    SpillFolder,
    count_at_most,
)
from party.protocol.threads import run_split, split_running_sum

logger = logging.getLogger(__name__)

#: Blocks with at most this many candidate sets are compared in vectorised batches of many blocks.
SMALL_BLOCK_SETS = 4096
#: Rows of survivors, ring messages and results are produced and consumed about this many bytes at
#: a time (the wire's chunk size).
CHUNK_BYTES = 2**20


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
    spilled_bytes: int = 0  # survivor bytes written to the spill folder (0: all in memory)
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

    Memory: the run's resident structures (encodings, pseudonyms, block positions, received
    segments: ``resident_bytes()``) are reserved on ``memory`` (the node's buffer account) while they
    are held, and those only the comparison needs are freed when it ends; what they leave of
    ``memory_budget_bytes`` is the comparison's working budget (``working_budget()``, at least a
    quarter of the budget, else MemoryBudgetError naming memory_budget_mib), of which its working
    set stays within about half; survivors, masks, the ring's output and the matches are kept in row stores
    (``party.protocol.spill``) that hold at most a quarter of it in memory, also charged to
    ``memory`` (the node's buffer account) when given, and spill the rest to a private folder
    under ``spill_dir`` (default: the system temporary folder), at most ``spill_limit_bytes``
    (default: 80% of its free space) before MemoryBudgetError. ``close()`` frees them all.
    """

    #: Records whose filters one ring row's Dice compares (target all: one per party, P).
    records_per_row: int
    #: uint64 columns kept per received result row (linkage id, Dice bits, own pseudonym).
    RESULT_COLUMNS = 3
    #: The linkage target this engine runs (PairEngine runs "any").
    TARGET = "all"

    def __init__(
        self,
        index: int,
        params: ProtocolParameters,
        records: EncodedTable,
        *,
        random_bytes: Callable[[int], bytes] = os.urandom,
        kernel: str = DEFAULT_KERNEL,
        workers: int = 1,
        memory: MemoryGauge | None = None,
        spill_dir: str | os.PathLike[str] | None = None,
        spill_limit_bytes: int | None = None,
    ) -> None:
        if not isinstance(params, ProtocolParameters):
            raise ProtocolError("params must be ProtocolParameters")
        if params.target != self.TARGET:
            raise ProtocolError(
                f"{type(self).__name__} runs target {self.TARGET!r}, got parameters of target "
                f"{params.target!r} (target 'all' needs target='all' in ProtocolParameters)"
            )
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
        self.records_per_row = params.party_count
        self.segment_bits = params.segment_bits
        self._records = records
        self._random_bytes = random_bytes
        self.kernel = kernel
        self.workers = max(1, int(workers))  # kernel threads; results do not depend on it
        self._x = popcount_rows(records.filters)
        self._memory = memory
        self._held: dict[str, int] = {}  # bytes of resident structures reserved on ``memory``
        self._hold("record ids and 1-bit counts", _ids_bytes(records.record_ids) + self._x.nbytes)
        self._hold("encodings", records.filters.nbytes + records.block_digests.nbytes)
        self._filters_freed = False
        self._digest_width = int(records.block_digests.shape[1])
        self._common: np.ndarray | None = None
        self._shared_rows = np.zeros(0, dtype=np.int64)  # table rows sent, sorted by pseudonym
        self._pseudonyms = np.zeros(0, dtype=np.uint64)  # pseudonym of each shared row (sorted)
        self._shares: dict[int, SegmentShare] = {}
        # per party (own and received): the common-block position of each shared record's digests
        # (-1: none), rows as in its share; the comparison's block index is built from them
        self._positions: dict[int, np.ndarray] = {}
        self._known: list[np.ndarray] = []  # sorted pseudonyms per party (after compare)
        self._known_lookups: dict[int, DigestLookup] = {}  # hash tables of _known, lazily
        self._known_tables_refused = False  # the gauge had no room for one of them
        self._gauge = LocalGauge(params.memory_budget_bytes // 4, outer=memory)
        self._folder = SpillFolder(spill_dir, spill_limit_bytes)
        self._stores: list[RowStore] = []
        self._survivors: RowStore | None = None  # (pseudonyms..., c), sorted by pseudonyms
        self._sent: RowStore | None = None  # initiator: (pseudonyms..., mask_c, mask_x)
        self._sent_rows = 0
        self._sent_cursor: RingCursor | None = None
        self._own_cursor: RingCursor | None = None
        self._ring_out: RowStore | None = None  # (pseudonyms..., c_masked, x_masked)
        self._piped_rows = -1  # pipelined ring step: rows passed on so far (-1: not started)
        self._ring_closed = False  # pipelined ring step: ring_step_close ran
        self._ring_last: np.ndarray | None = None  # last incoming ring row (order check)
        self._above: RowStore | None = None
        self._matches: RowStore | None = None  # initiator: (pseudonyms..., Dice bits)
        self._sets_summed = 0
        self._above_count = 0
        self._results_in: RowStore | None = None  # (linkage id, Dice bits, own pseudonym)
        self._last_result_id: int | None = None
        self._record_id_array: np.ndarray | None = None  # record ids as objects, for resolving
        self._finished = False
        self.timings: dict[str, float] = {}
        self.comparison_stats: ComparisonStats | None = None

    # ----------------------------------------------------------------- blocks, pseudonyms
    def block_digests(self) -> np.ndarray:
        """This party's distinct non-zero block digests (sorted uint64)."""
        return distinct_digests(self._records.block_digests)

    def common_of(self, digest_sets: list[np.ndarray]) -> np.ndarray:
        """The run's common blocks from every party's digests (target all: present at all P)."""
        return common_blocks(digest_sets)

    def set_common_blocks(self, common: np.ndarray) -> BlockStats:
        """Record the common blocks, draw pseudonyms for the records in them, return block sizes."""
        self.use_common_blocks(common)
        return self.block_stats()

    def use_common_blocks(self, common: np.ndarray) -> int:
        """``set_common_blocks`` without the block-size statistics (what a node needs: the sizes
        of millions of blocks only feed ``block_stats``); returns the records shared."""
        if self._common is not None:
            raise StateError("common blocks are already set for this run")
        t0 = time.perf_counter()
        common = check_common(common).copy()
        digests = self._records.block_digests
        n = digests.shape[0]
        # the shares carry positions, not digests: the hash table is needed only here
        lookup = DigestLookup(common)
        self._hold("common-block lookup table", lookup.nbytes)
        at = lookup.positions(digests)  # one lookup of every (record, pass) digest
        del lookup
        self._let_go("common-block lookup table")
        rows = rows_in_blocks(at)
        pseud, order = pseudonyms_in_order(rows.size, self._random_bytes)
        self._shared_rows = rows[order]
        self._pseudonyms = pseud[order]
        # the shared rows' positions (their digests, for mode mpc3 only: ``shared_records``)
        self._positions[self.index] = at[self._shared_rows]
        del at
        self._common = common
        self._hold(
            "pseudonyms and common blocks",
            self._pseudonyms.nbytes + self._shared_rows.nbytes + common.nbytes,
        )
        self._hold("own block positions", self._positions[self.index].nbytes)
        self.timings["blocks"] = time.perf_counter() - t0
        logger.info(
            "party %d: %d common blocks, %d of %d records shared",
            self.index,
            common.size,
            rows.size,
            n,
        )
        return int(rows.size)

    def block_stats(self) -> BlockStats:
        """Sizes of the common blocks from this party's records (after ``use_common_blocks``,
        before the comparison frees its positions)."""
        own = self._positions.get(self.index)
        if self._common is None or own is None:
            raise StateError("block_stats needs the common blocks and this party's positions")
        sizes = block_sizes(own, self._common.size)
        n = len(self._records.record_ids)
        shared = int(self._shared_rows.size)
        return BlockStats.from_sizes(sizes, n, shared, self.params.max_block_size)

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
        pos = self._positions[self.index]
        digests = np.zeros(pos.shape, dtype=np.uint64)  # 0: not a common block
        named = pos >= 0
        digests[named] = self._common[pos[named]]
        return (
            self._pseudonyms.copy(),
            digests,
            self._records.filters[rows],
            self._x[rows].copy(),
        )

    def _segment(self, j: int) -> np.ndarray:
        return self._segments([j])[0]

    def _segments(self, targets: list[int]) -> np.ndarray:
        """(len(targets), shared rows, words) uint64: segment ``targets[t]`` of every shared
        record, in pseudonym order (``cut_segments``: each filter row read once for all)."""
        if self._filters_freed:
            raise StateError("this party's filters were freed when its comparison ended")
        rows = self._shared_rows
        filters = self._records.filters
        words = -(-self.segment_bits // 64)
        out = np.empty((len(targets), rows.size, words), dtype=np.uint64)
        starts = np.array([j * self.segment_bits for j in targets], dtype=np.int64)

        def cut(first: int, last: int) -> None:  # ranges of rows on the threads (nogil loop)
            cut_segments(filters, rows, starts, self.segment_bits, out, first, last)

        run_split(self.workers, int(rows.size), cut, words=int(rows.size) * filters.shape[1])
        return out

    # ----------------------------------------------------------------- segment exchange
    def outgoing_shares(self) -> list[SegmentShare]:
        """One share per other party j: segment j of every record in a common block."""
        if self._common is None:
            raise StateError("set_common_blocks must be called before outgoing_shares")
        if self._filters_freed:  # after the comparison (which also drops the own positions)
            raise StateError("this party's filters were freed when its comparison ended")
        # the pseudonyms and positions are the same for every target: read-only views, not copies
        pseudonyms = _read_only(self._pseudonyms)
        positions = _read_only(self._positions[self.index])
        targets = [j for j in range(self.parties) if j != self.index]
        segments = self._segments(targets)
        return [
            SegmentShare(
                source=self.index,
                target=j,
                segment_bits=self.segment_bits,
                pseudonyms=pseudonyms,
                block_positions=positions,
                segments=segments[t],
            )
            for t, j in enumerate(targets)
        ]

    def receive_share(self, share: SegmentShare, held_bytes: int = 0) -> None:
        """Validate and store the share another party sent this party. ``held_bytes``: bytes the
        caller already reserved on the engine's ``memory`` gauge for this share; the engine now owns
        them and releases them when it frees the share (after the comparison, or at close)."""
        if self._common is None:
            raise StateError("set_common_blocks must be called before receive_share")
        if self._survivors is not None:
            raise StateError("shares arrived after the comparison")
        at = validate_share(
            share,
            target=self.index,
            parties=self.parties,
            segment_bits=self.segment_bits,
            common_count=int(self._common.size),
            digest_width=self._digest_width,
        )
        if int(share.source) in self._shares:
            raise StateError(f"party {self.index} already has the share of party {share.source}")
        # the comparison sorts each row in place: never in an array the sender still holds (an
        # in-process share is a read-only view of the sender's own positions)
        if not at.flags.writeable:
            at = at.copy()
            self._hold("received block positions", at.nbytes)  # beyond the share's own bytes
        self._positions[int(share.source)] = at
        self._shares[int(share.source)] = share
        self._held["received segments"] = self._held.get("received segments", 0) + held_bytes

    # ----------------------------------------------------------------- comparison
    def _ready_to_compare(self) -> np.ndarray:
        """The common blocks, once everything compare needs is there (else StateError)."""
        if self._common is None:
            raise StateError("set_common_blocks must be called before compare")
        if self._survivors is not None:
            raise StateError("compare already ran for this run")
        missing = [j for j in range(self.parties) if j != self.index and j not in self._shares]
        if missing:
            raise StateError(f"party {self.index} is missing the shares of parties {missing}")
        return self._common

    def _party_columns(self) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """Per party j (own and received): pseudonyms (sorted), common-block positions and segment
        ``self.index`` of its shared records, in pseudonym order; remembers the pseudonyms."""
        pseud: list[np.ndarray] = []
        where: list[np.ndarray] = []
        segs: list[np.ndarray] = []
        for j in range(self.parties):
            if j == self.index:
                pseud.append(self._pseudonyms)
                segs.append(self._segment(self.index))
            else:
                sh = self._shares[j]
                if strictly_increasing(sh.pseudonyms):  # as honest parties send them
                    pseud.append(sh.pseudonyms)
                    segs.append(sh.segments)
                else:
                    order = np.argsort(sh.pseudonyms, kind="stable")
                    pseud.append(sh.pseudonyms[order])
                    segs.append(sh.segments[order])
                    self._positions[j] = self._positions[j][order]
            where.append(self._positions[j])
        self._known = pseud
        return pseud, where, segs

    def compare(
        self,
        progress: Callable[[int, int], None] | None = None,
        cancel: threading.Event | None = None,
        remote: Any = None,
    ) -> ComparisonStats:
        """Enumerate and filter candidate sets on this party's segment; keep the survivors.

        ``progress(done, total)`` is called with candidate-set counts; setting ``cancel`` stops the
        comparison with ComparisonCancelled (nothing is kept; compare may be called again).
        ``remote`` (a ``block_ranges.RemoteBlocks``; numba kernel only; typed Any for
        ``PairEngine.compare``'s own kind): the fast blocks compared there in ranges
        (``block_ranges.fast_range_rows``, every range submitted first, about ``remote.parts``
        of them or the budget's batches if smaller) while the node compares the other blocks;
        the same survivors and stats.
        """
        common = self._ready_to_compare()
        ranges_at: RemoteBlocks | None = remote
        t0 = time.perf_counter()
        p = self.parties
        pseud, _, segs = self._party_columns()
        # Parties join partial sets in increasing order of their number of shared records (ties:
        # index), so the first, unfiltered products are as small as they can be; from here on,
        # position k in these lists is the k-th party to join.
        join = sorted(range(p), key=lambda j: (int(pseud[j].size), j))
        pseud = [pseud[j] for j in join]
        segs = [segs[j] for j in join]
        # each record's block positions sorted in place (shorter scans when indexing)
        positions = [sort_position_rows(self._positions[join[k]], self.workers) for k in range(p)]
        indices = [
            block_index_at(
                positions[k], common.size, keys=pseud[k], workers=self.workers, rows_sorted=True
            )
            for k in range(p)
        ]
        cap = self.params.max_block_size
        stats = ComparisonStats(party=self.index, blocks=int(common.size), join_order=join)
        # "fast" blocks: uncapped and small; compared straight from the CSR indices in batches
        blocks = plan_blocks([ix.starts for ix in indices], cap, SMALL_BLOCK_SETS, self.workers)
        sizes, fast_sets = blocks.sizes, blocks.fast_sets
        slow_ids = np.flatnonzero(blocks.slow)
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
            if cap is not None and int(sizes[:, blk].max()) > cap:
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
        budget = self.working_budget()
        store = self._survivor_store()
        if progress is not None:
            progress(0, total)
        seg_pops = [popcount_rows(s) for s in segs]

        def keep(rows: np.ndarray, c: np.ndarray) -> None:
            # survivors as (pseudonym of party 0..P-1, c), spilled to disk beyond the budget
            found = np.empty((rows.shape[0], p + 1), dtype=np.uint64)
            for k in range(p):
                found[:, join[k]] = pseud[k][rows[:, k]]
            found[:, p] = c
            store.append(found)

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
                kernel=self.kernel,
                distinct=True,
            )
            keep(rows, c)
            tick(batch_total)
            batch, batch_total = [], 0

        try:
            # batches of consecutive blocks (the others have fast_sizes 0: the kernel skips them)
            cum = np.cumsum(fast_sets)
            ranges = fast_ranges(cum, batch_sets)
            remote_sets: list[int] = []
            if ranges_at is not None:  # every range starts now; the node compares the other blocks
                if self.kernel != "numba":
                    raise ProtocolError("comparing on other workers needs the numba kernel")
                parts = max(1, ranges_at.parts)
                if ranges and len(ranges) <= parts:  # remote.parts of equal sets, none over a batch
                    ranges = split_running_sum(cum, 0, ranges[-1][1], parts)
                inputs = FastInputs(
                    tuple(segs),
                    tuple(seg_pops),
                    tuple(pseud),
                    np.array(join, dtype=np.int64),
                    self.segment_bits,
                    float(self.params.segment_threshold),
                )
                index = FastIndex(
                    tuple(ix.starts for ix in indices),
                    tuple(ix.rows for ix in indices),
                    blocks.fast_sets > 0,
                )
                ranges_at.submit(inputs, index, ranges)
                remote_sets = [
                    int(cum[hi - 1]) - (int(cum[lo - 1]) if lo else 0) for lo, hi in ranges
                ]
                del inputs, index
                ranges = []
            fast = FastBlocks(cum, tuple(pseud), np.array(join, dtype=np.int64))
            for lo, hi in ranges:
                if cancel is not None and cancel.is_set():
                    raise ComparisonCancelled("comparison cancelled")
                base = int(cum[lo - 1]) if lo else 0
                if self.kernel == "numba":  # ring rows made on the threads
                    found = fast_block_rows(
                        segs,
                        seg_pops,
                        [ix.rows for ix in indices],
                        blocks,
                        lo,
                        hi,
                        self.segment_bits,
                        self.params.segment_threshold,
                        fast,
                        counts=counts,
                        workers=self.workers,
                    )
                    store.append(found)
                    tick(int(cum[hi - 1]) - base)
                    continue
                rows, c = compare_block_batch(
                    segs,
                    seg_pops,
                    [ix.rows for ix in indices],
                    blocks.first[:, lo:hi],
                    blocks.fast_sizes[:, lo:hi],
                    self.segment_bits,
                    self.params.segment_threshold,
                    counts=counts,
                    workers=self.workers,
                    kernel=self.kernel,
                    distinct=True,
                )
                keep(rows, c)
                tick(int(cum[hi - 1]) - base)

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
            if ranges_at is not None:  # the ranges' rows in order
                taken = ranges_at.results(cancel)
                for (found, stage), sets in zip(taken, remote_sets, strict=True):
                    store.append(found)
                    counts.add(stage)
                    tick(sets)
        except BaseException:
            store.close()  # cancelled or failed: nothing is kept
            raise
        stats.survivors_with_duplicates = counts.survived[p - 1]  # before distinct_sets
        stats.evaluated_per_stage = counts.evaluated
        stats.survived_per_stage = counts.survived
        for held in (segs, seg_pops, indices):  # the survivors' sort gets their memory
            held.clear()
        return self._finish_compare(store, stats, t0, "sets")

    #: Whether the comparison finds most kept rows more than once (target all: a set once per
    #: block it shares; the survivors' store then drops repeats before each sort).
    SURVIVORS_REPEAT = True

    def _survivor_store(self) -> RowStore:
        """A store of (pseudonyms..., c) rows, sorted and distinct by the pseudonyms."""
        return RowStore(
            self.parties + 1,
            gauge=self._gauge,
            folder=self._folder,
            key_columns=self.parties,
            name="survivors",
            merge_bytes=self.params.memory_budget_bytes // 8,
            workers=self.workers,
            repeats=self.SURVIVORS_REPEAT,
        )

    def _finish_compare(
        self, store: RowStore, stats: ComparisonStats, t0: float, what: str
    ) -> ComparisonStats:
        """Free the comparison's inputs, then keep the survivors (sorted, distinct: the sort and
        merge get the freed memory; the caller holds no reference to the segments any more),
        complete and log the comparison's stats."""
        self._positions.clear()  # the comparison is done (a cancelled one may run again)
        self._free_comparison_inputs()
        self._survivors = store.finish()
        stats.survivors = store.rows
        stats.spilled_bytes = self._folder.bytes_written
        stats.seconds = time.perf_counter() - t0
        self.timings["compare"] = stats.seconds
        self.comparison_stats = stats
        logger.info(
            "party %d: %d candidate %s, %d survive the segment filter (RR_f %.4f)",
            self.index,
            stats.candidate_sets,
            what,
            stats.survivors,
            stats.reduction_ratio,
        )
        return stats

    # ----------------------------------------------------------------- ring summation
    def _own_x(self, own_pseudonyms: np.ndarray) -> np.ndarray:
        """The 1-bit counts of this party's records named by ``own_pseudonyms`` (all issued)."""
        if self._known:  # after compare: own pseudonyms are self._known[self.index]
            pos = self._known_positions(self.index, own_pseudonyms)
        else:
            pos = np.searchsorted(self._pseudonyms, own_pseudonyms)
        return self._x[self._shared_rows[pos]].astype(np.uint64)

    def _known_positions(self, j: int, keys: np.ndarray) -> np.ndarray:
        """Each key's position in party j's sorted pseudonyms ``self._known[j]``, -1 where it is
        not one of them (0 never is). Ring chunks name pseudonyms in random order, where a binary
        search is a cache miss per step: a hash table per party (``DigestLookup``, built at its
        first call, held on the memory gauge until the ring ends) answers in about a tenth of
        the time; without room for a table, the binary search."""
        lookup = self._known_lookups.get(j)
        known = self._known[j]
        if lookup is None and not self._known_tables_refused:
            table = DigestLookup(known)
            if self._memory is None or self._memory.try_reserve(table.nbytes):
                self._held[_KNOWN_TABLES] = self._held.get(_KNOWN_TABLES, 0) + table.nbytes
                self._known_lookups[j] = lookup = table
            else:
                self._known_tables_refused = True  # binary search for the rest of the ring
        keys = np.ascontiguousarray(keys, dtype=np.uint64)
        if lookup is not None:
            return lookup.positions(keys).astype(np.int64)
        if known.size == 0:
            return np.full(keys.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(known, keys), known.size - 1)
        return np.where(known[pos] == keys, pos, -1)

    def _free_known_lookups(self) -> None:
        """The ring is done: drop the pseudonym hash tables (``_known_positions``)."""
        self._known_lookups = {}
        self._let_go(_KNOWN_TABLES)

    def _check_known(self, candidates: np.ndarray) -> None:
        for j in range(self.parties):
            col = candidates[:, j]
            if col.size == 0:
                continue
            if np.any(self._known_positions(j, col) < 0):
                raise RingError(f"ring message names an unknown pseudonym of party {j}")

    def _store(self, width: int, name: str, key_columns: int | None = None) -> RowStore:
        store = RowStore(
            width,
            gauge=self._gauge,
            folder=self._folder,
            key_columns=key_columns,
            name=name,
            merge_bytes=self.params.memory_budget_bytes // 8,
        )
        self._stores.append(store)
        return store

    def _chunk_rows(self, width: int) -> int:
        return max(1, CHUNK_BYTES // (8 * width))

    @property
    def candidate_set_bound(self) -> int:
        """After compare: no honest ring message or result list has more rows than this (every
        party enumerates the same candidate sets; the count includes duplicates)."""
        if self.comparison_stats is None:
            raise StateError("compare must run first")
        return self.comparison_stats.candidate_sets

    @property
    def ring_rows_sent(self) -> int:
        """Initiator: the number of sets it sent around the ring (what may come back)."""
        if self._sent is None:
            raise StateError("ring_start must run first")
        return self._sent_rows

    def _check_ring_chunk(self, msg: RingMessage, expected_hop: int) -> None:
        """Validate one chunk of the incoming ring: well formed, above the previous chunk (a
        non-initiator then checks the pseudonyms of the rows it does not hold, ``ring_step_feed``;
        the initiator, that every set is one it sent). Changes no state (a refused chunk leaves
        the engine as it was)."""
        validate_message(msg, parties=self.parties, expected_hop=expected_hop, receiver=self.index)
        cand = msg.candidates
        if cand.shape[0] == 0:
            return
        if self._ring_last is not None and count_at_most(cand[:1], self._ring_last) > 0:
            raise RingError("ring message candidate list is not sorted and unique")

    def _advance_ring(self, msg: RingMessage) -> None:
        if msg.candidates.shape[0]:
            self._ring_last = msg.candidates[-1].copy()

    def ring_start_chunks(self) -> tuple[int, Iterator[RingMessage]]:
        """Initiator only: (rows, chunks) of the hop-0 message; masks c_0 and x_0 of every
        surviving set with fresh CSPRNG masks, chunk by chunk (the masks are kept, spilled to disk
        beyond the budget, for ring_finish)."""
        if self.index != 0:
            raise StateError(
                f"party {self.index} is not the initiator; only party 0 starts the ring"
            )
        if self._survivors is None:
            raise StateError("compare must run before ring_start")
        if self._sent is not None:
            raise StateError("ring_start already ran for this run (masks are used once)")
        p = self.parties
        survivors = self._survivors
        sent = self._sent = self._store(p + 2, "sent")
        self._sent_rows = survivors.rows

        def chunks() -> Iterator[RingMessage]:
            t0 = time.perf_counter()
            empty = True
            for rows in survivors.chunks(self._chunk_rows(p + 2)):
                empty = False
                m = rows.shape[0]
                mask_c = random_masks(m, self._random_bytes)
                mask_x = random_masks(m, self._random_bytes)
                cand = np.empty((m, p), dtype=np.uint64)
                kept = np.empty((m, p + 2), dtype=np.uint64)
                c_masked = np.empty(m, dtype=np.uint64)
                start_rows(rows, mask_c, mask_x, p, cand, kept, c_masked)  # compiled, one pass
                sent.append(kept)
                with np.errstate(over="ignore"):
                    x_masked = np.add(mask_x, self._own_x(cand[:, 0]), out=mask_x)
                yield RingMessage(hop=0, candidates=cand, c_masked=c_masked, x_masked=x_masked)
            sent.finish()
            survivors.close()  # the initiator needs its survivors no more
            self._sent_cursor = RingCursor(sent.chunks(self._chunk_rows(p + 2)), p)
            if empty:
                yield _empty_ring(0, p)
            self.timings["ring"] = time.perf_counter() - t0

        return self._sent_rows, chunks()

    def ring_start(self) -> RingMessage:
        """Initiator only: the whole hop-0 message in memory (see ring_start_chunks)."""
        _, chunks = self.ring_start_chunks()
        return _concat_ring(list(chunks), self.parties)

    def ring_step_feed(self, incoming: RingMessage) -> None:
        """Non-initiator, per incoming chunk (in order): keep the sets it also kept, add its own
        c_i and x_i; the outgoing rows are kept (spilled beyond the budget) for ring_out_chunks."""
        self._ring_step_begin(piped=False)
        assert self._ring_out is not None
        self._ring_out.append(self._ring_step_rows(incoming))

    def ring_step_chunk(self, incoming: RingMessage) -> RingMessage:
        """Non-initiator passing the ring on as it comes (pipelined): ``ring_step_feed``'s work on
        one incoming chunk, returning the outgoing chunk (hop = own index) instead of keeping it;
        ``ring_step_close`` when the incoming message is complete."""
        self._ring_step_begin(piped=True)
        rows = self._ring_step_rows(incoming)
        p = self.parties
        self._piped_rows += rows.shape[0]
        return RingMessage(
            hop=self.index,
            candidates=np.ascontiguousarray(rows[:, :p]),
            c_masked=rows[:, p].copy(),
            x_masked=rows[:, p + 1].copy(),
        )

    def ring_step_close(self) -> int:
        """Non-initiator, pipelined: the incoming message is complete (every chunk went through
        ``ring_step_chunk``); return the rows passed on."""
        if self._piped_rows < 0:
            raise StateError("ring_step_chunk received no ring message")
        if self._ring_closed:
            raise StateError("ring_step already ran for this run")
        self._ring_closed = True
        if self._survivors is not None:
            self._survivors.close()
        self._free_known_lookups()
        return self._piped_rows

    def _ring_step_begin(self, piped: bool) -> None:
        """Checks before a ring step chunk; the first one sets up the step (``piped``: chunks are
        returned, not kept; one run uses one of the two ways)."""
        if self.index == 0:
            raise StateError("the initiator calls ring_finish, not ring_step")
        if self._survivors is None:
            raise StateError("compare must run before ring_step")
        if self._ring_closed or (self._ring_out is not None and self._ring_out.finished):
            raise StateError("ring_step already ran for this run")
        started = self._own_cursor is not None
        if started and piped != (self._ring_out is None):
            raise StateError("a ring step is either kept (ring_step_feed) or piped, not both")
        if started:
            return
        p = self.parties
        if piped:
            self._piped_rows = 0
        else:
            self._ring_out = self._store(p + 2, "ring-out")
        self._own_cursor = RingCursor(self._survivors.chunks(self._chunk_rows(p + 1)), p)

    def _ring_step_rows(self, incoming: RingMessage) -> np.ndarray:
        """The outgoing rows (pseudonyms..., c_masked, x_masked) of one incoming chunk."""
        t0 = time.perf_counter()
        p = self.parties
        assert self._own_cursor is not None
        self._check_ring_chunk(incoming, self.index - 1)
        ia, own = self._own_cursor.match(incoming.candidates)
        m = incoming.candidates.shape[0]
        if ia.size < m:
            # the rows it holds name known records by construction (its survivors): only the
            # others are looked up; a refused chunk gives the cursor back its rows
            rest = np.ones(m, dtype=bool)
            rest[ia] = False
            try:
                self._check_known(incoming.candidates[rest])
            except RingError:
                self._own_cursor.rewind()
                raise
        self._advance_ring(incoming)
        # the held rows' pseudonyms are the incoming ones: (pseudonyms, c + c_i, x) compiled,
        # then x + x_i
        out = np.empty((ia.size, p + 2), dtype=np.uint64)
        step_rows(own, ia, incoming.c_masked, incoming.x_masked, p, out)
        x = out[:, p + 1]
        with np.errstate(over="ignore"):
            np.add(x, self._own_x(out[:, self.index]), out=x)
        self.timings["ring"] = self.timings.get("ring", 0.0) + time.perf_counter() - t0
        return out

    def ring_step_end(self) -> int:
        """Non-initiator: the incoming message is complete; return the rows to pass on."""
        if self._ring_out is None:
            raise StateError("ring_step received no ring message")
        self._ring_out.finish()
        if self._survivors is not None:
            self._survivors.close()
        self._free_known_lookups()
        return self._ring_out.rows

    def ring_out_chunks(self) -> Iterator[RingMessage]:
        """Non-initiator: the outgoing message (hop = own index), chunk by chunk."""
        if self._ring_out is None or not self._ring_out.finished:
            raise StateError("ring_step must complete before passing the ring on")
        p = self.parties
        empty = True
        for rows in self._ring_out.chunks(self._chunk_rows(p + 2)):
            empty = False
            yield RingMessage(
                hop=self.index,
                candidates=np.ascontiguousarray(rows[:, :p]),
                c_masked=rows[:, p].copy(),
                x_masked=rows[:, p + 1].copy(),
            )
        if empty:
            yield _empty_ring(self.index, p)

    def ring_step(self, incoming: RingMessage) -> RingMessage:
        """Non-initiator, whole message in memory (see ring_step_feed)."""
        self.ring_step_feed(incoming)
        self.ring_step_end()
        return _concat_ring(list(self.ring_out_chunks()), self.parties)

    def _require_unfinished_ring(self) -> RingCursor:
        if self.index != 0:
            raise StateError(
                f"party {self.index} is not the initiator; only party 0 finishes the ring"
            )
        if self._sent_cursor is None:
            raise StateError("ring_start must run before ring_finish")
        if self._finished:
            raise StateError("ring_finish already ran for this run")
        return self._sent_cursor

    def ring_finish_feed(self, incoming: RingMessage) -> None:
        """Initiator, per returning chunk (in order): unmask the sums, compute Dice, keep the sets
        with Dice >= s_t (spilled beyond the budget)."""
        sent_cursor = self._require_unfinished_ring()
        t0 = time.perf_counter()
        p = self.parties
        if self._above is None:
            # one-to-one visits sets by decreasing Dice: key (~Dice bits, tuple); else tuple order
            one = self.params.one_to_one
            self._above = self._store(p + 1, "above", p + 1 if one else None)
        self._check_ring_chunk(incoming, p - 1)
        m = incoming.candidates.shape[0]
        ia, sent = sent_cursor.match(incoming.candidates)
        self._advance_ring(incoming)
        if ia.size != m:
            self._finished = True  # the sent sets were consumed: this run cannot be finished
            raise RingError(
                f"mismatched candidate list: {m - ia.size} of {m} returned sets were never sent"
            )
        cand = incoming.candidates
        sum_c = sub_mod64(incoming.c_masked, sent[:, p]) if m else np.zeros(0, np.uint64)
        sum_x = sub_mod64(incoming.x_masked, sent[:, p + 1]) if m else np.zeros(0, np.uint64)
        l_bits = self.params.filter_bits
        k = self.records_per_row  # records whose filters a row's Dice compares
        bad = (sum_c > np.uint64(l_bits)) | (sum_x > np.uint64(k * l_bits))
        if np.any(bad):
            raise SummationError(
                f"{int(bad.sum())} unmasked sums are out of range (c > l or x > {k}*l): a party "
                "added wrong values or the ring message was altered"
            )
        c64 = sum_c.astype(np.int64)
        x64 = sum_x.astype(np.int64)
        if np.any(k * c64 > x64):
            raise SummationError(
                f"unmasked sums are inconsistent ({k} * c > x): a party added wrong values"
            )
        sim = dice(k, c64, x64)
        above = np.flatnonzero(sim >= self.params.match_threshold)
        self._sets_summed += m
        rows = np.empty((above.size, p + 1), dtype=np.uint64)
        bits = sim[above].view(np.uint64)
        if self.params.one_to_one:
            rows[:, 0] = ~bits  # Dice >= 0: bit patterns order like values; ~ reverses
            rows[:, 1:] = cand[above]
        else:
            rows[:, :p] = cand[above]
            rows[:, p] = bits
        self._keep_above(rows)
        self.timings["classify"] = self.timings.get("classify", 0.0) + time.perf_counter() - t0

    def _keep_above(self, rows: np.ndarray) -> None:
        """Keep one returning chunk's sets with Dice >= s_t (``ring_finish_feed``'s rows)."""
        assert self._above is not None
        self._above.append(rows)

    def ring_finish_end(self) -> tuple[int, int, int]:
        """Initiator: the returning message is complete; apply one-to-one; return
        (sets summed, sets with Dice >= s_t, matches). Matches are then read by result_chunks."""
        self._require_unfinished_ring()
        self._free_known_lookups()  # the table of its own pseudonyms (ring_start's x counts)
        t0 = time.perf_counter()
        p = self.parties
        if self._above is None:
            self._above = self._store(p + 1, "above", p + 1 if self.params.one_to_one else None)
        above = self._above.finish()
        above_count = self._above_count = above.rows
        if self.params.one_to_one:
            greedy = ChunkedOneToOne(self._known)  # every returning set was sent: all known
            chosen: list[np.ndarray] = []
            for rows in above.chunks(self._chunk_rows(p + 1)):
                try:
                    kept = greedy.keep(np.ascontiguousarray(rows[:, 1:]))
                except ValueError as exc:
                    raise RingError(str(exc)) from None
                chosen.append(rows[kept])
            above.close()
            picked = np.concatenate(chosen) if chosen else np.zeros((0, p + 1), np.uint64)
            # matches in pseudonym-tuple order, as (tuple, Dice bits); at most one per record
            flat = np.empty_like(picked)
            flat[:, :p] = picked[:, 1:]
            flat[:, p] = ~picked[:, 0]
            matches = self._store(p + 1, "matches")
            matches.append(flat[sort_rows(flat[:, :p])])
            self._matches = matches.finish()
        else:
            self._matches = above
        self._finished = True
        if self._sent is not None:
            self._sent.close()
        self.timings["classify"] = self.timings.get("classify", 0.0) + time.perf_counter() - t0
        return self._sets_summed, above_count, self._matches.rows

    def ring_finish(self, incoming: RingMessage) -> Classification:
        """Initiator, whole message in memory: unmask, Dice, s_t, optional one-to-one."""
        self.ring_finish_feed(incoming)
        self.ring_finish_end()
        return self.classification()

    def classification(self) -> Classification:
        """Initiator, after ring_finish_end: the matches as in-memory arrays."""
        if self._matches is None:
            raise StateError("ring_finish must run first")
        p = self.parties
        rows = list(self._matches.chunks(self._chunk_rows(p + 1)))
        flat = np.concatenate(rows) if rows else np.zeros((0, p + 1), np.uint64)
        return Classification(
            candidates=np.ascontiguousarray(flat[:, :p]),
            similarities=flat[:, p].view(np.float64).copy(),
            linkage_ids=np.arange(1, flat.shape[0] + 1, dtype=np.uint64),
            sets_summed=self._sets_summed,
            above_threshold=self._above_count,
            matches=self._matches.rows,
        )

    # ----------------------------------------------------------------- results
    @property
    def match_count(self) -> int:
        if self._matches is None:
            raise StateError("ring_finish must run first")
        return self._matches.rows

    def result_count(self, party: int) -> int:
        """Initiator: the number of result rows ``result_chunks(party)`` yields."""
        return self.match_count

    def result_chunks(self, party: int) -> Iterator[PartyResults]:
        """Initiator -> party ``party``, chunk by chunk in linkage-id order: linkage ids (numbered
        1.. in pseudonym-tuple order), similarities and that party's pseudonyms only."""
        if isinstance(party, bool) or not isinstance(party, int) or not 0 <= party < self.parties:
            raise ResultsError(f"party index must be in 0..{self.parties - 1}, got {party!r}")
        if self._matches is None:
            raise StateError("ring_finish must run first")
        p = self.parties
        next_id = 1
        empty = True
        for rows in self._matches.chunks(self._chunk_rows(3)):
            empty = False
            k = rows.shape[0]
            yield PartyResults(
                party=party,
                linkage_ids=np.arange(next_id, next_id + k, dtype=np.uint64),
                similarities=rows[:, p].view(np.float64).copy(),
                pseudonyms=rows[:, party].copy(),
            )
            next_id += k
        if empty:
            yield _no_results(party)

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

    def _check_results(self, results: PartyResults) -> np.ndarray:
        """Validate results for this party; return the table rows of its pseudonyms."""
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
            return np.zeros(0, dtype=np.int64)
        if self._pseudonyms.size == 0:
            raise ResultsError("results name pseudonyms this party never issued")
        pos = np.minimum(np.searchsorted(self._pseudonyms, ps), self._pseudonyms.size - 1)
        if not np.all(self._pseudonyms[pos] == ps):
            raise ResultsError("results name pseudonyms this party never issued")
        return self._shared_rows[pos]

    def _record_ids_at(self, rows: np.ndarray) -> list[str]:
        """The record ids of table rows (one fancy index into an object array kept per run)."""
        if self._record_id_array is None:
            self._record_id_array = np.asarray(self._records.record_ids, dtype=object)
        return self._record_id_array[rows].tolist()  # type: ignore[no-any-return]

    def resolve_results(self, results: PartyResults) -> list[MatchRow]:
        """Map this party's pseudonyms in ``results`` back to its record ids (sorted by id)."""
        rows = self._check_results(results)
        order = np.argsort(results.linkage_ids, kind="stable")
        return ResolvedMatches(
            results.linkage_ids[order],
            results.similarities[order],
            self._record_ids_at(rows[order]),
        ).match_rows()

    def receive_results_chunk(self, results: PartyResults) -> None:
        """Validate one chunk of the results sent to this party (linkage ids strictly increasing
        across chunks) and keep it (spilled beyond the budget) for resolved_rows."""
        if self._results_in is not None and self._results_in.finished:
            raise StateError("results were already received")
        self._check_results(results)
        ids = results.linkage_ids
        if ids.size:
            if np.any(ids[1:] <= ids[:-1]) or (
                self._last_result_id is not None and int(ids[0]) <= self._last_result_id
            ):
                raise ResultsError("results are not in increasing linkage-id order")
            self._last_result_id = int(ids[-1])
        if self._results_in is None:
            self._results_in = self._store(self.RESULT_COLUMNS, "results")
        self._results_in.append(self._result_columns(results))

    def _result_columns(self, results: PartyResults) -> np.ndarray:
        """The rows kept of one received results chunk (RESULT_COLUMNS uint64 columns)."""
        return np.column_stack(
            [results.linkage_ids, results.similarities.view(np.uint64), results.pseudonyms]
        )

    def results_end(self) -> int:
        """The results stream is complete; return the number of rows received."""
        if self._results_in is None:
            self._results_in = self._store(self.RESULT_COLUMNS, "results")
        return self._results_in.finish().rows

    def received_results(self) -> Iterator[PartyResults]:
        """The results received through receive_results_chunk, chunk by chunk."""
        if self._results_in is None or not self._results_in.finished:
            raise StateError("results_end must run first")
        for rows in self._results_in.chunks(self._chunk_rows(self.RESULT_COLUMNS)):
            yield self._results_of(rows)

    def _results_of(self, rows: np.ndarray) -> PartyResults:
        """PartyResults of kept result rows (the inverse of ``_result_columns``)."""
        return PartyResults(
            party=self.index,
            linkage_ids=rows[:, 0].copy(),
            similarities=rows[:, 1].view(np.float64).copy(),
            pseudonyms=rows[:, 2].copy(),
        )

    def resolved_chunks(self, chunks: Iterable[PartyResults]) -> Iterator[ResolvedMatches]:
        """Result chunks (result_chunks or received_results) resolved to this party's record ids,
        chunk by chunk in linkage-id order (what its matches.csv holds)."""
        for results in chunks:
            rows = self._check_results(results)
            yield ResolvedMatches(
                results.linkage_ids, results.similarities, self._record_ids_at(rows)
            )

    def resolved_rows(self, chunks: Iterable[PartyResults]) -> Iterator[MatchRow]:
        """MatchRows of result chunks in linkage-id order (result_chunks or received_results)."""
        for resolved in self.resolved_chunks(chunks):
            yield from resolved.match_rows()

    # ----------------------------------------------------------------- memory
    def _hold(self, what: str, nbytes: int) -> None:
        """Reserve ``nbytes`` of a resident structure on ``memory`` (MemoryBudgetError naming
        memory_budget_mib when the node's budget cannot hold it)."""
        if self._memory is not None and nbytes and not self._memory.try_reserve(nbytes):
            raise MemoryBudgetError(
                f"party {self.index}: the run's {what} need {nbytes // 2**20 + 1} MiB, more than "
                f"the party's memory budget has left after {self._held_total() // 2**20} MiB of "
                "this run's other resident data (encodings, pseudonyms, received segments) and "
                "what other runs hold: raise the party's memory_budget_mib"
            )
        self._held[what] = self._held.get(what, 0) + nbytes

    @property
    def memory(self) -> MemoryGauge | None:
        """The node's account this run's memory is reserved on (None: not bounded)."""
        return self._memory

    def _let_go(self, what: str) -> None:
        nbytes = self._held.pop(what, 0)
        if self._memory is not None and nbytes:
            self._memory.release(nbytes)

    def _held_total(self) -> int:
        return sum(self._held.values())

    def resident_bytes(self) -> dict[str, int]:
        """The run's resident structures held now, by name, in bytes (what ``memory`` is charged
        for them), and ``row stores in memory`` (survivors, masks, ring, matches, results)."""
        out = {k: v for k, v in self._held.items() if v}
        out["row stores in memory"] = self._gauge.held
        return out

    def working_budget(self) -> int:
        """``memory_budget_bytes`` less the run's resident structures: what the comparison sizes
        its working set (about half of it) and the in-memory stores (a quarter) from;
        MemoryBudgetError naming memory_budget_mib when that is under a quarter of the budget."""
        budget = self.params.memory_budget_bytes
        left = budget - self._held_total()
        if left < budget // 4:
            raise MemoryBudgetError(
                f"party {self.index}: the run's resident data ("
                + ", ".join(f"{k} {v // 2**20} MiB" for k, v in self._held.items() if v)
                + f") leave {max(left, 0) // 2**20} MiB of the memory budget "
                f"({budget // 2**20} MiB) for the comparison, less than the quarter it needs: "
                "raise the party's memory_budget_mib"
            )
        self._gauge.limit_bytes = min(self._gauge.limit_bytes, left // 4)
        return left

    def _free_comparison_inputs(self) -> None:
        """After the comparison: drop what only it needed (the received segments and digests, this
        party's filters, block digests and positions), releasing their bytes."""
        self._shares.clear()  # the pseudonyms stay in self._known
        self._let_go("received segments")
        self._let_go("received block positions")
        self._let_go("own block positions")
        self._records = _RecordIds(self._records.record_ids, self._records.filter_bits)
        self._filters_freed = True
        self._let_go("encodings")
        # the stores' share of memory grows back with what the freed structures leave
        budget = self.params.memory_budget_bytes
        self._gauge.limit_bytes = min(budget // 4, max(0, budget - self._held_total()) // 4)

    @property
    def memory_held(self) -> int:
        """Bytes this engine's stores hold in memory (survivors, masks, ring, matches, results)."""
        return self._gauge.held

    @property
    def spill_folder(self) -> pathlib.Path | None:
        return self._folder.path

    def close(self) -> None:
        """Free every store and remove the run's spill folder (call when the run ends)."""
        for store in self._stores:
            store.close()
        if self._survivors is not None:
            self._survivors.close()
        self._stores.clear()
        self._folder.close()
        self._shares.clear()
        self._positions.clear()
        self._known_lookups = {}
        for what in list(self._held):
            self._let_go(what)


#: What the pseudonym hash tables of the ring (``PartyEngine._known_positions``) are held as.
_KNOWN_TABLES = "pseudonym lookup tables"


@dataclass(frozen=True)
class _RecordIds:
    """What the engine keeps of a party's table once its comparison ended: the record ids."""

    record_ids: tuple[str, ...]
    filter_bits: int

    @property
    def filters(self) -> np.ndarray:
        raise StateError("this party's filters were freed when its comparison ended")

    @property
    def block_digests(self) -> np.ndarray:
        raise StateError("this party's block digests were freed when its comparison ended")


def _ids_bytes(ids: tuple[str, ...]) -> int:
    """Bytes of a tuple of record id strings (the tuple and every string object)."""
    return sys.getsizeof(ids) + sum(map(sys.getsizeof, ids))


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


def _empty_ring(hop: int, parties: int) -> RingMessage:
    return RingMessage(
        hop=hop,
        candidates=np.zeros((0, parties), dtype=np.uint64),
        c_masked=np.zeros(0, dtype=np.uint64),
        x_masked=np.zeros(0, dtype=np.uint64),
    )


def _concat_ring(parts: list[RingMessage], parties: int) -> RingMessage:
    if not parts:
        return _empty_ring(0, parties)
    return RingMessage(
        hop=parts[0].hop,
        candidates=np.concatenate([m.candidates for m in parts]),
        c_masked=np.concatenate([m.c_masked for m in parts]),
        x_masked=np.concatenate([m.x_masked for m in parts]),
    )


def _no_results(party: int) -> PartyResults:
    return PartyResults(
        party=party,
        linkage_ids=np.zeros(0, dtype=np.uint64),
        similarities=np.zeros(0, dtype=np.float64),
        pseudonyms=np.zeros(0, dtype=np.uint64),
    )
