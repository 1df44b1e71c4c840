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

import functools
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from party.encoding.bits import popcount_rows
from party.protocol._numba_pairs import pair_rows, plan_pairs, row_visits
from party.protocol.blocks import (
    BlockIndex,
    block_index,
    common_blocks,
    distinct_digests,
    sort_position_rows,
    sub_blocks,
)
from party.protocol.errors import ComparisonCancelled
from party.protocol.kernel import PARALLEL_MIN_PAIRS
from party.protocol.threads import run_split, run_tasks, split_running_sum

_EMPTY_PAIRS = np.zeros((0, 2), dtype=np.int64)

#: kept_pairs cuts each piece into this many ranges per thread (evens out the filtering).
PIECES_PER_THREAD = 16


@dataclass(frozen=True)
class PairSide:
    """One party's inputs to the compiled pair kernel (``kept_pairs``), rows in pseudonym order."""

    column: int  # the party's column in a ring row
    keys: np.ndarray  # (n,) uint64 pseudonyms
    segments: np.ndarray  # (n, words) uint64: the comparing party's segment of each record
    pops: np.ndarray  # (n,) int64 popcounts of those segments
    positions: np.ndarray  # (n, B) int32 common-block positions, each row sorted (-1 first)


def pair_side(
    column: int, keys: np.ndarray, segments: np.ndarray, positions: np.ndarray, workers: int = 1
) -> PairSide:
    """A PairSide; sorts each row of ``positions`` in place (a block index does not depend on the
    order within a row) unless the array is read-only (then a sorted copy)."""
    pos = sort_position_rows(positions, workers)
    segs = np.ascontiguousarray(segments, dtype=np.uint64)
    return PairSide(column, np.ascontiguousarray(keys, np.uint64), segs, popcount_rows(segs), pos)


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
    ) -> None:
        common = common_blocks([distinct_digests(digests_a), distinct_digests(digests_b)])
        self._plan(
            block_index(digests_a, common, keys_a), block_index(digests_b, common, keys_b), cap
        )

    @classmethod
    def from_indexes(cls, index_a: BlockIndex, index_b: BlockIndex, cap: int | None) -> PairPlan:
        """The plan of two parties' block indexes over the same blocks (e.g. the run's blocks
        shared by two or more parties: those the two do not share hold no pair)."""
        plan = cls.__new__(cls)
        plan._plan(index_a, index_b, cap)
        return plan

    def _plan(self, index_a: BlockIndex, index_b: BlockIndex, cap: int | None) -> None:
        self.cap = cap
        self.index_a, self.index_b = index_a, index_b
        whole, total, uncapped, largest = plan_pairs(
            index_a.starts, index_b.starts, -1 if cap is None else int(cap)
        )
        self.whole: np.ndarray = whole
        self.total = int(total)
        #: pairs of all two-party blocks, and of the largest, before sub-blocking
        self.uncapped = int(uncapped)
        self.largest = int(largest)
        for sub_a, sub_b in self._sub_blocks():
            self.total += int(sub_a.size) * int(sub_b.size)

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
        return sum(int(x.nbytes) for x in arrays) + int(self.whole.nbytes)

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
        in order of (key_a, key_b), in pieces of about ``max_pairs`` enumerated pairs (ranges of
        a's rows; a row with more: alone). Yields (row arrays in order, pairs of the piece counted
        once per block, kept pairs counted once per whole block). ``table``:
        ``kernel.threshold_table(2, s_m, ...)``. Each piece's rows are cut into ranges run on
        ``workers`` kernel threads; the rows and their order do not depend on ``workers``."""
        max_pairs = max(1, int(max_pairs))
        check = not bool(self.whole.all())
        starts_b, rows_b = self.index_b.starts, self.index_b.rows
        pos_a = side_a.positions
        per_row = np.empty(pos_a.shape[0], dtype=np.int64)
        run_split(
            workers,
            pos_a.shape[0],
            lambda lo, hi: row_visits(pos_a, starts_b, self.whole, check, lo, hi, per_row),
            words=pos_a.size,
        )
        cum = np.cumsum(per_row, out=per_row)  # running sum in place
        fixed: tuple[Any, ...] = (pos_a, starts_b, rows_b, self.whole, check)
        fixed += (side_a.segments, side_b.segments, side_a.pops, side_b.pops, table)
        fixed += (side_a.keys, side_b.keys, side_a.column, side_b.column, parties)

        def run(cuts: list[tuple[int, int]], k: int) -> tuple[np.ndarray, int, int]:
            lo, hi = cuts[k]
            cap = int(cum[hi - 1]) - (int(cum[lo - 1]) if lo else 0)
            return pair_rows(lo, hi, cap, *fixed)  # type: ignore[no-any-return]

        parts = workers * PIECES_PER_THREAD if workers > 1 else 1
        lo = 0
        while lo < cum.size:
            base = int(cum[lo - 1]) if lo else 0
            hi = max(lo + 1, int(np.searchsorted(cum, base + max_pairs, side="right")))
            pairs = int(cum[hi - 1]) - base
            if pairs:
                if cancel is not None and cancel.is_set():
                    raise ComparisonCancelled("comparison cancelled")
                cuts = split_running_sum(cum, lo, hi, parts if pairs >= PARALLEL_MIN_PAIRS else 1)
                outs = run_tasks(workers, len(cuts), functools.partial(run, cuts))
                found = [o[0] for o in outs if o[0].shape[0]]
                yield found, pairs, sum(int(o[1]) for o in outs)
            lo = hi

    def sub_block_pairs(self) -> Iterator[np.ndarray]:
        """The candidate pairs of the sub-blocked blocks, one (k, 2) array per sub-block."""
        for sub_a, sub_b in self._sub_blocks():
            yield np.stack([np.repeat(sub_a, sub_b.size), np.tile(sub_b, sub_a.size)], axis=1)

    def _sub_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
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
    ka = np.asarray(keys_a, dtype=np.uint64)[rows[:, 0]]
    kb = np.asarray(keys_b, dtype=np.uint64)[rows[:, 1]]
    order = np.lexsort((kb, ka))
    rows, ka, kb = rows[order], ka[order], kb[order]
    first = np.ones(rows.shape[0], dtype=bool)
    first[1:] = (ka[1:] != ka[:-1]) | (kb[1:] != kb[:-1])
    return rows[first]


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
