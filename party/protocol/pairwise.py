"""Target "any", segment mode: candidate pairs of two parties, and one segment holder's pair counts.

For every pair of parties (a, b), a < b, the candidate pairs are the record pairs (one record of a,
one of b) sharing a block of the two parties: a non-zero digest present at both (in any of the B
columns; a block need not be present at the other parties). Sub-blocking with cap C applies to
each such two-party block exactly as for sets (``party.protocol.blocks.sub_blocks``). A pair found
in several blocks is one pair; pairs are ordered by the pseudonym tuple (key_a, key_b).

Party i, holding segment i of every party's records, counts for each candidate pair
``c_i`` = popcount(seg_i(A) AND seg_i(B)) and keeps the pair iff ``2 * c_i >= s_m * s_i`` with
``s_i`` = popcount(seg_i(A)) + popcount(seg_i(B)) in IEEE double (s_m = 0 keeps every pair). A
pair is summed on the ring when every party kept it; the sums are ``c = sum_i c_i`` and
``x = |A| + |B|`` (each owner adds its own record's 1-bits), and the pair matches iff
``2c / x >= s_t`` (``classify.dice`` with 2 parties).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from party.encoding.bits import popcount_rows
from party.protocol._numba_pairs import (
    block_cuts,
    bucket_rows,
    count_keys,
    emit_keys,
    kept_of_runs,
    pack_records,
    plan_ranges,
    row_visits,
)
from party.protocol.blocks import (
    BlockIndex,
    block_index,
    common_blocks,
    distinct_digests,
    sort_position_rows,
    sub_blocks,
)
from party.protocol.errors import ComparisonCancelled, ProtocolError
from party.protocol.kernel import PARALLEL_MIN_PAIRS, read_only
from party.protocol.threads import run_split, run_tasks, split_range, task_ranges, thread_ranges

_EMPTY_PAIRS = np.zeros((0, 2), dtype=np.int64)

#: ranges of blocks per kernel thread of a plan (their pairs cut the pair kernel's block ranges)
PLAN_RANGES_PER_THREAD = 8

#: a row index of either party must fit the 32 bits of its half of a pair's sort key
MAX_PAIR_ROWS = 2**32


class _Records:
    """A party's ``records`` (n, words + 2) uint64, row r: the words of its segment of record r,
    their popcount, then r's pseudonym (``party.protocol._numba_pairs``: the pair kernel reads
    the three side by side), and views of each."""

    records: np.ndarray

    @property
    def keys(self) -> np.ndarray:
        """(n,) uint64 pseudonyms (a view)."""
        return self.records[:, -1]

    @property
    def segments(self) -> np.ndarray:
        """(n, words) uint64 segments (a view)."""
        return self.records[:, :-2]

    @property
    def pops(self) -> np.ndarray:
        """(n,) uint64 popcounts of the segments (a view)."""
        return self.records[:, -2]


@dataclass(frozen=True)
class PairSide(_Records):
    """One party's inputs to the compiled pair kernel (``kept_pairs``), rows in pseudonym order."""

    column: int  # the party's column in a ring row
    records: np.ndarray  # (n, words + 2) uint64 (``_Records``; read-only)
    positions: np.ndarray  # (n, B) int32 common-block positions (-1: none)


@dataclass(frozen=True)
class IndexedSide(_Records):
    """A party's records (``_Records``) and its block index over the run's blocks
    (``rows[starts[x]:starts[x + 1]]``: its rows in block x): what the tasks of a pair of parties
    on other processes read (``bucket_keys`` and ``kept_rows_of_keys``)."""

    column: int
    records: np.ndarray
    starts: np.ndarray
    rows: np.ndarray

    @classmethod
    def of(cls, side: PairSide, index: BlockIndex) -> IndexedSide:
        return cls(side.column, side.records, index.starts, index.rows)

    @property
    def nbytes(self) -> int:
        return sum(int(x.nbytes) for x in (self.records, self.starts, self.rows))


class RemotePairs(Protocol):
    """Where a pair of parties' kept rows are computed instead of the kernel threads
    (``party.cluster_pairs.ClusterPairs``: Dask workers): keys of ranges of blocks put in buckets
    of a's rows (``bucket_keys``), each bucket's pairs kept (``kept_rows_of_keys``)."""

    def submit(
        self,
        pair: tuple[int, int],
        plan: PairPlan,
        side_a: IndexedSide,
        side_b: IndexedSide,
        table: np.ndarray,
        parties: int,
        max_pairs: int,
    ) -> None:
        """Start computing pair (a, b)'s rows."""

    def kept_pairs(
        self, pair: tuple[int, int], cancel: threading.Event | None = None
    ) -> Iterator[tuple[list[np.ndarray], int, int]]:
        """The submitted pair's rows, as ``PairPlan.kept_pairs`` yields them."""
        ...


def pair_side(
    column: int,
    keys: np.ndarray,
    segments: np.ndarray,
    positions: np.ndarray,
    workers: int = 1,
    sort: bool = True,
) -> PairSide:
    """A PairSide; ``sort``: sorts each row of ``positions`` in place (for ``block_index_at``'s
    ``rows_sorted``; a block index does not depend on the order within a row) unless the array is
    read-only (then a sorted copy). ``row_block_index`` and the pair kernel take rows in any
    order."""
    if sort:
        pos = sort_position_rows(positions, workers)
    else:
        pos = np.ascontiguousarray(positions, dtype=np.int32)
    return PairSide(column, party_records([keys], [segments], workers)[0], pos)


def pair_sides(
    keys: list[np.ndarray],
    segments: list[np.ndarray],
    positions: list[np.ndarray],
    workers: int = 1,
) -> list[PairSide]:
    """``pair_side(j, keys[j], segments[j], positions[j], workers, sort=False)`` of every party j
    (its column), all parties' records made at once (``party_records``)."""
    records = party_records(keys, segments, workers)
    return [
        PairSide(j, records[j], np.ascontiguousarray(positions[j], dtype=np.int32))
        for j in range(len(records))
    ]


#: a record row's words beyond its segment: the popcount and the pseudonym
RECORD_EXTRA_WORDS = 2


def party_records(
    keys: list[np.ndarray], segments: list[np.ndarray], workers: int = 1
) -> list[np.ndarray]:
    """Each party j's records (``_Records``) of pseudonyms ``keys[j]`` and (n, words) uint64
    ``segments[j]``: read-only, 64-byte aligned (a record of 6 segment words fills one cache
    line), made in one round of tasks on the kernel threads (one hand-off to the pool, not one
    per party; a task the same range of rows of every party)."""
    segs = [np.ascontiguousarray(x, dtype=np.uint64) for x in segments]
    keyed = [np.ascontiguousarray(x, dtype=np.uint64) for x in keys]
    out = [_aligned_rows(x.shape[0], x.shape[1] + RECORD_EXTRA_WORDS) for x in segs]
    parts = [thread_ranges(workers, int(x.shape[0]), words=int(x.size)) for x in segs]

    def pack(k: int) -> None:  # range k of every party's rows
        for j, ranges in enumerate(parts):
            if k < len(ranges):
                pack_records(keyed[j], segs[j], *ranges[k], out[j])

    run_tasks(
        workers if any(len(ranges) > 1 for ranges in parts) else 1,
        max((len(ranges) for ranges in parts), default=0),
        pack,
    )
    for x in out:
        x.flags.writeable = False  # as mapped on a worker: one compiled variant of each loop
    return out


def _filter_args(
    side_a: PairSide | IndexedSide,
    side_b: PairSide | IndexedSide,
    table: np.ndarray,
    parties: int,
) -> tuple[Any, ...]:
    """``kept_of_runs``' arguments after the runs: both sides' records and the threshold table
    as read-only views whatever the caller passes (``party_records``, mapped files and arrays
    Dask delivers already are), then the two columns and P; so the loop has one compiled
    variant, the one the workers' warm-up loads (a warm-up with a writable table once left a
    worker's first comparison to load a second)."""
    return (
        read_only(side_a.records, np.uint64),
        read_only(side_b.records, np.uint64),
        read_only(table, np.int64),
        side_a.column,
        side_b.column,
        parties,
    )


def _aligned_rows(n: int, width: int, align: int = 64) -> np.ndarray:
    """An uninitialised (n, width) uint64 array starting on an ``align``-byte boundary."""
    spare = align // 8
    flat = np.empty(n * width + spare, dtype=np.uint64)
    skip = (-flat.ctypes.data % align) // 8
    return flat[skip : skip + n * width].reshape(n, width)


class PairPlan:
    """The candidate pairs of parties a and b, enumerated in pieces of bounded size.

    ``total`` counts the pairs the pieces hold together (a pair found in several blocks is counted,
    and produced, once per block); ``pieces(max_pairs)`` yields (k, 2) int64 arrays (row of a, row
    of b), each of at most ``max(max_pairs, largest block of b)`` rows (a capped run: or one
    sub-block, at most cap^2).
    """

    def __init__(
        self,
        digests_a: np.ndarray,
        digests_b: np.ndarray,
        keys_a: np.ndarray,
        keys_b: np.ndarray,
        cap: int | None,
        workers: int = 1,
    ) -> None:
        common = common_blocks([distinct_digests(digests_a), distinct_digests(digests_b)])
        self._start(
            block_index(digests_a, common, keys_a),
            block_index(digests_b, common, keys_b),
            cap,
            workers,
        )
        run_tasks(workers, len(self._ranges), lambda k: self._pass(k, k + 1))
        self._finish()

    @classmethod
    def from_indexes(
        cls, index_a: BlockIndex, index_b: BlockIndex, cap: int | None, workers: int = 1
    ) -> PairPlan:
        """The plan of two parties' block indexes over the same blocks (e.g. the run's blocks
        shared by two or more parties: those the two do not share hold no pair); ``workers``:
        kernel threads its pass over the blocks uses."""
        return cls.from_index_pairs([(index_a, index_b)], cap, workers)[0]

    @classmethod
    def from_index_pairs(
        cls,
        index_pairs: list[tuple[BlockIndex, BlockIndex]],
        cap: int | None,
        workers: int = 1,
    ) -> list[PairPlan]:
        """``from_indexes`` of each pair of block indexes, the passes over the blocks of all of
        them in one round of tasks on the kernel threads (one hand-off to the pool, not one per
        plan): the same plans."""
        plans = [cls.__new__(cls) for _ in index_pairs]
        tasks: list[tuple[PairPlan, int, int]] = []
        for plan, (index_a, index_b) in zip(plans, index_pairs, strict=True):
            plan._start(index_a, index_b, cap, workers)
            # a task: a thread's share of the plan's ranges, passed in one compiled call (the
            # ranges are many for the pair kernel's cuts; the passes cost the same per block)
            tasks.extend((plan, k0, k1) for k0, k1 in split_range(len(plan._ranges), workers))
        run_tasks(
            workers if any(len(plan._ranges) > 1 for plan in plans) else 1,
            len(tasks),
            lambda t: tasks[t][0]._pass(tasks[t][1], tasks[t][2]),
        )
        for plan in plans:
            plan._finish()
        return plans

    def _start(
        self, index_a: BlockIndex, index_b: BlockIndex, cap: int | None, workers: int = 1
    ) -> None:
        """The plan's ranges of blocks and their outputs, before the passes (``_pass``)."""
        self.cap = cap
        self.index_a, self.index_b = index_a, index_b
        blocks = int(index_a.starts.shape[0]) - 1
        # ranges of blocks (several per thread); their whole blocks' pairs also cut the pair
        # kernel's block ranges (``block_ranges``)
        self._ranges = task_ranges(workers, blocks, PLAN_RANGES_PER_THREAD) or [(0, 0)]
        # without a cap every block is whole: no per-block flags (the kernels do not read them)
        self._whole = np.empty(0 if cap is None else blocks, dtype=np.bool_)
        self._sums = np.zeros((len(self._ranges), 3), dtype=np.int64)
        self._cuts = np.array([lo for lo, _ in self._ranges] + [blocks], dtype=np.int64)

    def _pass(self, k0: int, k1: int) -> None:
        """The plan's pass over its ranges of blocks k0..k1-1 (``plan_pairs`` of each)."""
        limit = -1 if self.cap is None else int(self.cap)
        starts_a, starts_b = self.index_a.starts, self.index_b.starts
        plan_ranges(starts_a, starts_b, limit, self._cuts, k0, k1, self._whole, self._sums)

    def _finish(self) -> None:
        """The plan's totals from its passes."""
        whole, sums = self._whole, self._sums
        #: some block is sub-blocked (else ``whole`` need not be read)
        self.check = not bool(whole.all())
        #: the plan's ranges of blocks (cuts[k]..cuts[k+1]-1) and the pairs of their whole blocks
        self.range_cuts = self._cuts
        self.range_pairs = sums[:, 0].copy()
        #: pairs of the whole blocks (each counted once per block)
        self.whole_pairs = int(sums[:, 0].sum())
        self.total = self.whole_pairs
        #: pairs of all two-party blocks, and of the largest, before sub-blocking
        self.uncapped = int(sums[:, 1].sum())
        self.largest = int(sums[:, 2].max())
        for sub_a, sub_b in self._sub_blocks():
            self.total += int(sub_a.size) * int(sub_b.size)

    @property
    def whole(self) -> np.ndarray:
        """(blocks,) bool: the blocks compared whole (not sub-blocked)."""
        if self.cap is None:
            return np.ones(int(self.range_cuts[-1]), dtype=np.bool_)
        return self._whole

    @property
    def na(self) -> np.ndarray:
        """a's rows per block."""
        return self.index_a.sizes()

    @property
    def nb(self) -> np.ndarray:
        """b's rows per block."""
        return self.index_b.sizes()

    @property
    def nbytes(self) -> int:
        """Bytes of the plan's arrays (the two block indexes and per-block sizes)."""
        arrays = (self.index_a.rows, self.index_a.starts, self.index_b.rows, self.index_b.starts)
        return sum(int(x.nbytes) for x in arrays) + int(self._whole.nbytes)

    def kept_pairs(
        self,
        side_a: PairSide,
        side_b: PairSide,
        parties: int,
        table: np.ndarray,
        max_pairs: int,
        workers: int = 1,
        cancel: threading.Event | None = None,
    ) -> Iterator[tuple[list[np.ndarray], int, int]]:
        """The pairs of the whole (not sub-blocked) blocks passing the segment filter, each once
        (``party.protocol._numba_pairs``), as ring rows of ``parties`` pseudonym columns and c,
        in order of (row of a, row of b) (with rows in key order: of (key_a, key_b)), in pieces of
        about ``max_pairs`` enumerated pairs (ranges of a's rows; a row with more: alone). Yields
        (row arrays in order, pairs of the piece counted once per block, kept pairs counted once
        per whole block). ``table``: ``kernel.threshold_table(2, s_m, ...)``.

        A piece's pairs are emitted as sort keys by ``workers`` kernel threads, each over a range
        of blocks (about equal pairs), and sorted there; then each thread merges the sorted runs
        over one range of a's rows and keeps the pairs passing the filter. The rows and their
        order do not depend on ``workers``. All of a's rows are one piece when the whole blocks'
        pairs are at most ``max_pairs`` (the common case); else each row's pairs are counted
        first (``row_visits``) to cut the pieces."""
        max_pairs = max(1, int(max_pairs))
        n_a = int(side_a.keys.shape[0])
        if max(n_a, int(side_b.keys.shape[0])) > MAX_PAIR_ROWS:
            raise ProtocolError(f"a party of a pair has more than {MAX_PAIR_ROWS} rows")
        check = self.check
        starts_b, whole = self.index_b.starts, self._whole
        if self.whole_pairs <= max_pairs:
            pieces = [(0, n_a, self.whole_pairs)] if n_a and self.whole_pairs else []
        else:
            pos_a = side_a.positions
            per_row = np.empty(n_a, dtype=np.int64)
            run_split(
                workers,
                n_a,
                lambda lo, hi: row_visits(pos_a, starts_b, whole, check, lo, hi, per_row),
                words=pos_a.size,
            )
            cum = np.cumsum(per_row, out=per_row)  # running sum in place
            pieces = []
            lo = 0
            while lo < n_a:
                base = int(cum[lo - 1]) if lo else 0
                hi = max(lo + 1, int(np.searchsorted(cum, base + max_pairs, side="right")))
                if int(cum[hi - 1]) > base:
                    pieces.append((lo, hi, int(cum[hi - 1]) - base))
                lo = hi
        fixed = _filter_args(side_a, side_b, table, parties)
        parts = workers if workers > 1 and self.whole_pairs >= PARALLEL_MIN_PAIRS else 1
        cuts, offsets = self.block_ranges(parts)
        for lo, hi, pairs in pieces:
            if cancel is not None and cancel.is_set():
                raise ComparisonCancelled("comparison cancelled")
            runs = offsets if (lo, hi) == (0, n_a) else None
            outs = self._kept_piece(lo, hi, cuts, runs, fixed, workers)
            found = [o[0] for o in outs if o[0].shape[0]]
            yield found, pairs, sum(int(o[1]) for o in outs)

    def block_ranges(self, parts: int) -> tuple[np.ndarray, np.ndarray]:
        """The pair kernel's ``parts`` ranges of blocks, of about equal pairs of whole blocks (all
        of a's rows): (cuts, offsets) as ``block_cuts`` gives them, cut at the plan's range
        boundaries nearest to equal shares (no pass over the blocks) when the plan has at least
        ``PLAN_RANGES_PER_THREAD`` ranges per part, else by ``block_cuts``."""
        blocks = int(self.range_cuts[-1])
        if parts == 1:
            return (
                np.array([0, blocks], dtype=np.int64),
                np.array([0, self.whole_pairs], dtype=np.int64),
            )
        if self.range_pairs.size < PLAN_RANGES_PER_THREAD * parts:
            return block_cuts(  # type: ignore[no-any-return]
                self.index_a.starts,
                self.index_b.starts,
                self._whole,
                self.check,
                self.whole_pairs,
                parts,
            )
        running = np.concatenate([[0], np.cumsum(self.range_pairs)]).astype(np.int64)
        at = [0]
        for k in range(1, parts):
            want = self.whole_pairs * k / parts
            i = int(np.argmin(np.abs(running - want)))
            at.append(max(at[-1], i))
        at.append(running.size - 1)
        index = np.array(at, dtype=np.int64)
        return self.range_cuts[index], running[index]

    def _kept_piece(
        self,
        lo: int,
        hi: int,
        cuts: np.ndarray,
        at: np.ndarray | None,
        fixed: tuple[Any, ...],
        workers: int,
    ) -> list[tuple[np.ndarray, int, int]]:
        """``kept_of_runs``' outputs of a's rows [lo, hi) in order: the keys of block range k
        (blocks cuts[k]..cuts[k+1]-1) emitted and sorted in a task of their own, at at[k] of one
        array (None: counted first), then merged and filtered over ranges of a's rows."""
        check = self.check
        starts_a, rows_a = self.index_a.starts, self.index_a.rows
        starts_b, rows_b = self.index_b.starts, self.index_b.rows
        whole = self._whole
        parts = int(cuts.size) - 1
        if at is None:  # a's rows [lo, hi) only: count each range's keys
            sizes = run_tasks(
                workers,
                parts,
                lambda k: count_keys(
                    cuts[k], cuts[k + 1], lo, hi, starts_a, rows_a, starts_b, whole, check
                ),
            )
            at = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        keys = np.empty(int(at[-1]), dtype=np.uint64)

        def emit(k: int) -> None:
            assert at is not None
            run = keys[at[k] : at[k + 1]]
            args = (starts_a, rows_a, starts_b, rows_b, whole, check, run)
            if emit_keys(cuts[k], cuts[k + 1], lo, hi, *args) != run.size:
                raise AssertionError("emit_keys wrote another number of keys than counted")
            run.sort()  # numpy's vectorised sort, the GIL released

        run_tasks(workers, parts, emit)
        bounds = _run_bounds(keys, at, parts)
        width = int(fixed[-1]) + 1  # parties + 1 columns

        def keep(k: int) -> tuple[np.ndarray, int, int]:
            # a row per key at most: untouched beyond the rows written (the piece's budget
            # counts a kept row per pair), then the rows copied off so the rest is freed
            out = np.empty((int((bounds[k + 1] - bounds[k]).sum()), width), dtype=np.uint64)
            written, repeats, evaluated = kept_of_runs(keys, bounds[k], bounds[k + 1], *fixed, out)
            return (out if written == out.shape[0] else out[:written].copy()), repeats, evaluated

        return run_tasks(workers, parts, keep)

    def sub_block_pairs(self) -> Iterator[np.ndarray]:
        """The candidate pairs of the sub-blocked blocks, one (k, 2) array per sub-block."""
        for sub_a, sub_b in self._sub_blocks():
            yield np.stack([np.repeat(sub_a, sub_b.size), np.tile(sub_b, sub_a.size)], axis=1)

    def _sub_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if not self.check:  # every block is whole
            return
        for blk in np.flatnonzero(~self.whole).tolist():
            members = [self.index_a.members(blk), self.index_b.members(blk)]
            for sub_a, sub_b in sub_blocks(members, self.cap):
                if sub_a.size and sub_b.size:
                    yield sub_a, sub_b

    def pieces(self, max_pairs: int) -> Iterator[np.ndarray]:
        """The candidate pairs in pieces (see the class docstring)."""
        max_pairs = max(1, int(max_pairs))
        ia, ib = self.index_a, self.index_b
        ids = np.flatnonzero(self.whole)
        na, nb = self.na[ids], self.nb[ids]
        count = na * nb
        cum = np.cumsum(count)
        lo = 0
        while lo < ids.size:
            base = int(cum[lo - 1]) if lo else 0
            hi = max(lo + 1, int(np.searchsorted(cum, base + max_pairs, side="right")))
            if hi == lo + 1 and int(count[lo]) > max_pairs:
                # one block larger than a piece: slices of a's rows against all of b's
                rows_a = ia.members(int(ids[lo]))
                rows_b = ib.members(int(ids[lo]))
                step = max(1, max_pairs // max(1, rows_b.size))
                for s in range(0, rows_a.size, step):
                    part = rows_a[s : s + step]
                    yield np.stack(
                        [np.repeat(part, rows_b.size), np.tile(rows_b, part.size)], axis=1
                    )
            else:
                sl = slice(lo, hi)
                yield _products(
                    ia.starts[:-1][ids[sl]],
                    na[sl],
                    ia.rows,
                    ib.starts[:-1][ids[sl]],
                    nb[sl],
                    ib.rows,
                )
            lo = hi
        yield from self.sub_block_pairs()


def bucket_step(rows_a: int, buckets: int) -> int:
    """a's rows per bucket when its ``rows_a`` rows are cut into ``buckets`` ranges (a key's
    bucket: its row of a // step; the last bucket may hold fewer rows)."""
    return max(1, -(-int(rows_a) // max(1, int(buckets))))


def bucket_keys(
    side_a: IndexedSide,
    side_b: IndexedSide,
    whole: np.ndarray | None,
    x0: int,
    x1: int,
    count: int,
    buckets: int,
    out: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` keys (``emit_keys``: every row of a, each pair once per whole block; ``count``
    as the plan's ``block_ranges`` give it) of blocks x0..x1-1, put in ``buckets`` buckets of
    consecutive rows of a (``bucket_step``), unsorted: (keys, offsets), bucket j is
    keys[offsets[j]:offsets[j + 1]]. ``out``: where the keys go (e.g. a mapped file), else a
    new array. ``whole``: the plan's flags (None: every block is whole). Pure and
    single-threaded: what a Dask worker runs for a range of blocks (``party.cluster_pairs``)."""
    check = whole is not None
    flags = whole if whole is not None else np.ones(0, dtype=np.bool_)
    emitted = np.empty(int(count), dtype=np.uint64)
    args = (side_a.starts, side_a.rows, side_b.starts, side_b.rows, flags, check, emitted)
    if emit_keys(x0, x1, 0, int(side_a.keys.shape[0]), *args) != emitted.size:
        raise ProtocolError("a range of blocks holds another number of pairs than its plan says")
    keys = np.empty_like(emitted) if out is None else out
    step = bucket_step(int(side_a.keys.shape[0]), buckets)
    offsets = bucket_rows(emitted, np.uint64(step), int(buckets), keys)
    return keys, offsets


def kept_rows_of_keys(
    side_a: IndexedSide, side_b: IndexedSide, keys: np.ndarray, table: np.ndarray, parties: int
) -> tuple[list[np.ndarray], int, int]:
    """``PairPlan.kept_pairs``' rows of a bucket of a's rows: ``keys`` are the bucket's keys from
    every range of blocks (``bucket_keys``), sorted here in place. Returns (kept rows in order,
    pairs counted once per whole block, kept pairs counted once per whole block); the buckets'
    rows in bucket order are ``kept_pairs``' rows. Pure and single-threaded (a Dask worker's
    task)."""
    if max(int(side_a.keys.shape[0]), int(side_b.keys.shape[0])) > MAX_PAIR_ROWS:
        raise ProtocolError(f"a party of a pair has more than {MAX_PAIR_ROWS} rows")
    count = int(keys.shape[0])
    if count == 0:
        return [], 0, 0
    keys.sort()
    # a row per key at most: untouched beyond the rows written
    out = np.empty((count, parties + 1), dtype=np.uint64)
    ends = np.array([count], dtype=np.int64)
    fixed = _filter_args(side_a, side_b, table, parties)
    written, repeats, _ = kept_of_runs(keys, ends - count, ends, *fixed, out)
    if not written:
        return [], count, 0
    return [out[:written].copy() if written < count else out], count, int(repeats)


def _run_bounds(keys: np.ndarray, at: np.ndarray, parts: int) -> np.ndarray:
    """Cut ``parts`` sorted runs of keys (run r: keys[at[r]:at[r+1]]) into ``parts`` ranges of
    rows of a (a key's high 32 bits) of about equal keys: (parts + 1, parts) int64, row k the
    position in each run where range k starts (row parts: the runs' ends)."""
    bounds = np.empty((parts + 1, parts), dtype=np.int64)
    bounds[0] = at[:-1]
    bounds[parts] = at[1:]
    longest = int(np.argmax(np.diff(at)))
    run = keys[at[longest] : at[longest + 1]]
    for k in range(1, parts):
        split = (run[run.size * k // parts] >> np.uint64(32)) << np.uint64(32) if run.size else 0
        for r in range(parts):
            part = keys[at[r] : at[r + 1]]
            bounds[k, r] = at[r] + int(np.searchsorted(part, np.uint64(split), side="left"))
        bounds[k] = np.maximum(bounds[k], bounds[k - 1])
    return bounds


def pair_candidates(
    digests_a: np.ndarray,
    digests_b: np.ndarray,
    keys_a: np.ndarray,
    keys_b: np.ndarray,
    cap: int | None,
) -> np.ndarray:
    """(m, 2) int64 rows (row of a, row of b) of the candidate pairs, ordered by (key_a, key_b)."""
    plan = PairPlan(digests_a, digests_b, keys_a, keys_b, cap)
    parts = list(plan.pieces(max(1, plan.total)))
    if not parts:
        return _EMPTY_PAIRS
    rows = np.concatenate(parts)
    if _ascending(keys_a) and _ascending(keys_b) and max(len(keys_a), len(keys_b)) < 2**32:
        # rows in key order (mode mpc3's input shares): one sort of packed (row of a, row of b)
        packed = rows[:, 0].astype(np.uint64) << np.uint64(32) | rows[:, 1].astype(np.uint64)
        packed.sort()
        packed = packed[np.concatenate(([True], packed[1:] != packed[:-1]))]
        out = np.empty((packed.size, 2), dtype=np.int64)
        out[:, 0] = packed >> np.uint64(32)
        out[:, 1] = packed & np.uint64(0xFFFFFFFF)
        return out
    ka = np.asarray(keys_a, dtype=np.uint64)[rows[:, 0]]
    kb = np.asarray(keys_b, dtype=np.uint64)[rows[:, 1]]
    order = np.lexsort((kb, ka))
    rows, ka, kb = rows[order], ka[order], kb[order]
    first = np.ones(rows.shape[0], dtype=bool)
    first[1:] = (ka[1:] != ka[:-1]) | (kb[1:] != kb[:-1])
    return rows[first]


def _ascending(keys: np.ndarray) -> bool:
    """Strictly ascending keys: row order is key order."""
    k = np.asarray(keys)
    return bool(k.size < 2 or np.all(k[1:] > k[:-1]))


def _products(
    start_a: np.ndarray,
    size_a: np.ndarray,
    rows_a: np.ndarray,
    start_b: np.ndarray,
    size_b: np.ndarray,
    rows_b: np.ndarray,
) -> np.ndarray:
    """Every (row of a, row of b) of many whole blocks at once, (sum size_a * size_b, 2) int64."""
    count = size_a * size_b
    total = int(count.sum())
    if total == 0:
        return _EMPTY_PAIRS
    block = np.repeat(np.arange(count.size), count)
    local = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    width = size_b[block]
    return np.stack(
        [rows_a[start_a[block] + local // width], rows_b[start_b[block] + local % width]], axis=1
    )


def segment_pair_counts(
    segment_a: np.ndarray, segment_b: np.ndarray, rows: np.ndarray, segment_threshold: float
) -> tuple[np.ndarray, np.ndarray]:
    """(c_i uint64, kept bool) for candidate pairs ``rows`` of one segment of parties a and b."""
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=bool)
    sa, sb = segment_a[rows[:, 0]], segment_b[rows[:, 1]]
    common = popcount_rows(sa & sb)
    total = popcount_rows(sa) + popcount_rows(sb)
    kept = 2.0 * common.astype(np.float64) >= segment_threshold * total.astype(np.float64)
    return common.astype(np.uint64), kept
