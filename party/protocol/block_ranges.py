"""Target "all": a range of fast blocks compared from arrays another worker holds (pure, no transport).

``PartyEngine.compare`` compares its fast blocks (``kernel.plan_blocks``) in ranges of consecutive
blocks; each range's ring rows (``kernel.fast_block_rows``) are independent of the others' and the
survivor store sorts them and drops repeats, so a range can be computed anywhere. What a range
reads: every party's segments, popcounts and pseudonyms and the ring columns (``FastInputs``,
the same for every range) and the slice of every party's block index its blocks span, with
which of them are fast (``FastIndex.range``: a ``FastRange``; the plan's arrays of the range
follow from them). ``fast_range_rows`` is the task a worker runs; ``RemoteBlocks`` is where the
engine sends the ranges (``party.cluster_blocks.ClusterBlocks``: the party's Dask workers).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from party.protocol.kernel import BlockPlan, FastBlocks, StageCounts, fast_block_rows


@dataclass(frozen=True)
class FastInputs:
    """What every range of fast blocks reads (per party, in join order: position k is the k-th
    party to join), sent to a worker once."""

    segs: tuple[np.ndarray, ...]  # (n, words) uint64: the comparing party's segment of each row
    pops: tuple[np.ndarray, ...]  # (n,) popcounts of those segments
    keys: tuple[np.ndarray, ...]  # (n,) uint64 pseudonyms
    columns: np.ndarray  # (P,) int64: each party's ring-row column
    seg_bits: int
    threshold: float

    @property
    def nbytes(self) -> int:
        arrays = (*self.segs, *self.pops, *self.keys, self.columns)
        return sum(int(x.nbytes) for x in arrays)


@dataclass(frozen=True)
class FastIndex:
    """Every party's block index (CSR: ``rows[j][starts[j][b]:starts[j][b + 1]]``, party j's
    rows in block b) and which blocks are fast (``kernel.plan_blocks``): what ranges are cut
    from."""

    starts: tuple[np.ndarray, ...]
    rows: tuple[np.ndarray, ...]
    fast: np.ndarray  # (nb,) bool

    def range(self, lo: int, hi: int) -> FastRange:
        """Blocks [lo, hi) as a FastRange."""
        first = [int(s[lo]) for s in self.starts]
        starts = np.stack([s[lo : hi + 1] - a for s, a in zip(self.starts, first, strict=True)])
        ends = [int(s[hi]) for s in self.starts]
        rows = tuple(_narrow(r[a:e]) for r, a, e in zip(self.rows, first, ends, strict=True))
        return FastRange(_narrow(starts), rows, np.ascontiguousarray(self.fast[lo:hi]))


@dataclass(frozen=True)
class FastRange:
    """Blocks [lo, hi) of every party's block index, numbered from the range's first row
    (``rows[j][starts[j, b]:starts[j, b + 1]]``: block lo + b) and which of them are fast.
    Integers in 32 bits where they fit."""

    starts: np.ndarray  # (P, hi - lo + 1)
    rows: tuple[np.ndarray, ...]  # each party's rows (positions in its segments) of the blocks
    fast: np.ndarray  # (hi - lo,) bool

    def plan(self) -> BlockPlan:
        """The range's blocks as a plan of their own (every block fast or not compared)."""
        starts = self.starts.astype(np.int64)
        first, sizes = starts[:, :-1], np.diff(starts, axis=1)
        fast_sizes = np.where(self.fast, sizes, 0)
        sets = np.prod(fast_sizes, axis=0)  # a fast block's are at most SMALL_BLOCK_SETS
        return BlockPlan(np.ascontiguousarray(first), sizes, fast_sizes, sets, ~self.fast)

    @property
    def nbytes(self) -> int:
        return int(self.starts.nbytes + self.fast.nbytes) + sum(int(r.nbytes) for r in self.rows)


def _narrow(a: np.ndarray) -> np.ndarray:
    """Non-negative integers as int32 when they fit (int64 otherwise), contiguous."""
    if a.size == 0 or int(a.max()) < 2**31:
        return np.ascontiguousarray(a, dtype=np.int32)
    return np.ascontiguousarray(a, dtype=np.int64)


def fast_ranges(cum: np.ndarray, size: int) -> list[tuple[int, int]]:
    """Consecutive ranges [lo, hi) of blocks of about ``size`` candidate sets each (a block with
    more: alone), in order, covering at least every block up to the last with sets (``cum``: their
    running sum)."""
    out: list[tuple[int, int]] = []
    lo = 0
    while lo < cum.size and int(cum[-1]) > (int(cum[lo - 1]) if lo else 0):
        base = int(cum[lo - 1]) if lo else 0
        hi = max(lo + 1, int(np.searchsorted(cum, base + size, side="right")))
        out.append((lo, hi))
        lo = hi
    return out


def fast_range_rows(inputs: FastInputs, piece: FastRange) -> tuple[np.ndarray, StageCounts]:
    """``fast_block_rows`` of one range on one thread: its distinct surviving sets as ring rows
    and its stage counts (what a Dask worker runs, ``party.cluster_blocks``)."""
    plan = piece.plan()
    counts = StageCounts.zeros(len(inputs.segs))
    fast = FastBlocks(np.cumsum(plan.fast_sets), inputs.keys, inputs.columns)
    m = int(piece.fast.size)
    args = (inputs.segs, inputs.pops, piece.rows, plan, 0, m, inputs.seg_bits, inputs.threshold)
    rows = fast_block_rows(*args, fast, counts=counts, workers=1)
    return rows, counts


class RemoteBlocks(Protocol):
    """Where ranges of fast blocks are compared instead of the kernel threads
    (``fast_range_rows``; ``party.cluster_blocks.ClusterBlocks``: Dask workers)."""

    @property
    def parts(self) -> int:
        """How many ranges the fast blocks should be cut into (at most)."""
        ...

    def submit(self, inputs: FastInputs, index: FastIndex, ranges: list[tuple[int, int]]) -> None:
        """Start computing the rows of every range [lo, hi) of blocks (``index.range``)."""

    def results(
        self, cancel: threading.Event | None = None
    ) -> Iterator[tuple[np.ndarray, StageCounts]]:
        """The submitted ranges' (rows, stage counts), in order."""
        ...
