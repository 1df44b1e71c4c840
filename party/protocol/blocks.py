"""Common blocks: digest intersection, per-block membership, size statistics and capped sub-blocking.

A record belongs to every block whose non-zero digest appears in its ``block_digests`` row (multi-pass
blocking with B keys puts a record in up to B blocks; digest 0 means "no value"). Only blocks whose
digest is present at every party are compared.

Sub-blocking (``max_block_size = C``). When party j contributes ``n_j > C`` records to a block, its
records, ordered by a per-record key (the run's pseudonyms in the engine), are cut into
``k_j = ceil(n_j / C)`` chunks of near-equal size (record of rank r goes to chunk ``r * k_j // n_j``).
The block becomes ``K = max_j k_j`` sub-blocks; sub-block s takes chunk ``s mod k_j`` of party j.
A candidate set is compared only if all its records fall in the same sub-block, so a true match in
an over-size block is kept with probability about ``prod_j 1/k_j * K`` (it is a safety valve for
pathological blocks, not a recall-neutral optimisation; docs/engine.md has a measured example).
The rule depends only on data every comparing party holds, so all parties cut alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from party.protocol._numba_blocks import (
    SORTED_REACH,
    csr_count,
    csr_fill,
    csr_keys,
    distinct_nonzero_in_place,
    fill_hashed,
    fill_sorted,
    in_two_or_more,
    intersect_sorted,
    range_entry_counts,
    range_entry_keys,
    rows_of_sorted_keys,
    sort_rows_in_place,
    starts_of,
    strictly_increasing,
    table_bits,
    table_positions,
)
from party.protocol.errors import ProtocolError
from party.protocol.threads import run_split, run_tasks, thread_ranges


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values of a 1-D array (sort based; numpy's hash-based unique is slower here).

    The default (introsort, vectorised in numpy >= 2) sort: equal values are indistinguishable, so
    stability buys nothing, and it is about 3x faster than the stable merge sort on uint64."""
    s = np.sort(values)
    if s.size < 2:
        return s
    keep = np.ones(s.size, dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    return s[keep]


def has_duplicates(values: np.ndarray) -> bool:
    """True iff a 1-D array repeats a value."""
    s = np.sort(values)
    return bool(s.size > 1 and np.any(s[1:] == s[:-1]))


class DigestLookup:
    """Finds digests among distinct non-zero uint64 digests (e.g. a run's common blocks) in linear
    time: a hash table built once, then O(1) per digest; the needles are every (record, pass)
    digest of a party, too many to sort on every lookup.

    A sorted haystack (the common blocks, a party's pseudonyms) is placed by its top bits in one
    sequential pass (``_numba_blocks.fill_sorted``: at 16 M digests ~0.13 CPU-s where hashing
    them to random slots took ~0.8-1.0); one clustered in its top bits, or not sorted, is hashed
    (``fill_hashed``). The table is allocated by numpy, which asks the kernel for transparent huge
    pages for it: a probe of a table of hundreds of MiB then misses no TLB entry."""

    def __init__(self, haystack: np.ndarray) -> None:
        self.size = int(np.shape(haystack)[0])
        if self.size >= 2**31:
            raise ProtocolError(f"{self.size} digests are more than a lookup table holds (2^31)")
        hay = np.ascontiguousarray(haystack, dtype=np.uint64)
        self._bits = table_bits(max(1, self.size))
        self._table = np.zeros(3 * ((1 << self._bits) + SORTED_REACH), dtype=np.uint32)
        self._reach = fill_sorted(self._table, self._bits, hay) if strictly_increasing(hay) else -1
        if self._reach < 0:
            self._table[:] = 0
            fill_hashed(self._table, self._bits, hay)

    def positions(self, needles: np.ndarray) -> np.ndarray:
        """int32 array shaped like ``needles``: each needle's index in the haystack, -1 where it
        does not occur (zero never does)."""
        flat = np.ascontiguousarray(needles, dtype=np.uint64).ravel()
        found = table_positions(self._table, self._bits, self._reach, flat)
        return found.reshape(np.shape(needles))  # type: ignore[no-any-return]

    @property
    def sorted(self) -> bool:
        """True iff the table was placed by the digests' top bits (``fill_sorted``)."""
        return self._reach >= 0

    @property
    def nbytes(self) -> int:
        """Bytes of the hash table."""
        return int(self._table.nbytes)

    @staticmethod
    def table_bytes(count: int) -> int:
        """Bytes of the table of ``count`` digests."""
        return 12 * ((1 << int(table_bits(max(1, count)))) + SORTED_REACH)

    def find(self, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(pos, hit) for each needle: ``hit`` iff it occurs in the haystack, at index ``pos``
        (0 where not hit). Zero is never hit."""
        found = self.positions(needles)
        return np.maximum(found, 0), found >= 0


def lookup_digests(haystack: np.ndarray, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``DigestLookup(haystack).find(needles)``: one lookup (keep a DigestLookup for several)."""
    return DigestLookup(haystack).find(needles)


def distinct_digests(digests: np.ndarray) -> np.ndarray:
    """Sorted distinct non-zero digests of an (n, B) uint64 digest matrix.

    One sorted copy of every digest, zeros included (they sort first), is compacted in place
    (``distinct_nonzero_in_place``) and its buffer shrunk to what is kept: no mask, no second
    array."""
    ordered = np.sort(np.asarray(digests, dtype=np.uint64).ravel())  # a new array, ours alone
    kept = distinct_nonzero_in_place(ordered)
    ordered.resize(kept, refcheck=False)  # no view of it exists: shrinks the buffer in place
    return ordered


def common_blocks(digest_sets: Sequence[np.ndarray]) -> np.ndarray:
    """Digests present in every party's set (sorted uint64); each input is 1-D uint64."""
    if len(digest_sets) < 2:
        raise ProtocolError(
            f"common_blocks needs the digests of at least 2 parties, got {len(digest_sets)}"
        )
    distinct: list[np.ndarray] = []
    for i, d in enumerate(digest_sets):
        if not isinstance(d, np.ndarray) or d.ndim != 1 or d.dtype != np.uint64:
            raise ProtocolError(f"block digests of party {i} must be a 1-D uint64 array")
        # what parties send (distinct_digests) is already sorted and distinct: no sort then
        u = d if strictly_increasing(d) else sorted_unique(d)
        distinct.append(u[u != 0] if u.size and u[0] == 0 else u)
    result = min(distinct, key=lambda u: u.size)
    for u in distinct:
        if u is not result:
            result = intersect_sorted(result, u)
    return result


def shared_blocks(digest_sets: Sequence[np.ndarray]) -> np.ndarray:
    """Digests present in at least two parties' sets (sorted uint64): the blocks of target "any"."""
    if len(digest_sets) < 2:
        raise ProtocolError(
            f"shared_blocks needs the digests of at least 2 parties, got {len(digest_sets)}"
        )
    distinct = []
    for i, d in enumerate(digest_sets):
        if not isinstance(d, np.ndarray) or d.ndim != 1 or d.dtype != np.uint64:
            raise ProtocolError(f"block digests of party {i} must be a 1-D uint64 array")
        # what parties send (distinct_digests) is already sorted and distinct: no sort then
        u = d if strictly_increasing(d) else sorted_unique(d)
        distinct.append(u[u != 0] if u.size and u[0] == 0 else u)
    return in_two_or_more(tuple(distinct))  # type: ignore[no-any-return]


def is_digest_set(digests: np.ndarray) -> bool:
    """True iff a 1-D uint64 array is strictly increasing with no zero (one compiled pass)."""
    return digests.size == 0 or bool(digests[0] != 0 and strictly_increasing(digests))


def check_common(common: np.ndarray) -> np.ndarray:
    """Validate a common-block list: 1-D uint64, strictly increasing, no zero."""
    if not isinstance(common, np.ndarray) or common.ndim != 1 or common.dtype != np.uint64:
        raise ProtocolError("common blocks must be a 1-D uint64 array")
    if not is_digest_set(common):
        raise ProtocolError("common blocks must be sorted, unique and non-zero")
    return common


@dataclass(frozen=True)
class BlockIndex:
    """CSR membership: rows of block b (position in ``common``) are ``rows[starts[b]:starts[b+1]]``."""

    starts: np.ndarray  # (len(common) + 1,) int64
    rows: np.ndarray  # int64 row indices, each block's rows sorted by the ordering key

    def members(self, b: int) -> np.ndarray:
        return self.rows[self.starts[b] : self.starts[b + 1]]

    def sizes(self) -> np.ndarray:
        return np.diff(self.starts)


def block_index(
    digests: np.ndarray, common: np.ndarray, keys: np.ndarray | None = None, workers: int = 1
) -> BlockIndex:
    """Which rows of an (n, B) digest matrix belong to each common block.

    Within a block the rows are ordered by ``keys`` (ties and ``None``: by row index).
    """
    return block_index_at(DigestLookup(common).positions(digests), common.size, keys, workers)


def block_index_at(
    positions: np.ndarray,
    blocks: int,
    keys: np.ndarray | None = None,
    workers: int = 1,
    *,
    rows_sorted: bool = False,
    counts: np.ndarray | None = None,
) -> BlockIndex:
    """``block_index`` from an (n, B) matrix of common-block positions (-1: none), as
    ``lookup_digests`` finds them; within a block the rows are ordered by ``keys``, then row.

    The rows of a range of blocks are written as sort keys (block, rank of the row by ``keys``)
    in row order, sorted (numpy's vectorised sort) and reduced to their rows: sequential writes,
    where placing each row at its block's slot is a cache miss per row. With ``workers`` > 1 each
    kernel thread counts and places the rows of one range of blocks (every thread reads all
    positions, each writes only its blocks): the same index as one thread.
    ``rows_sorted``: each row of ``positions`` is sorted (shorter scans). ``counts``: the rows per
    block when the caller has them (``block_counts``), else they are counted here.
    """
    n = positions.shape[0]
    k = np.zeros(0, dtype=np.uint64) if keys is None else np.asarray(keys, dtype=np.uint64)
    identity = n < 2 or not np.any(k[1:] < k[:-1])  # rows visited in row order
    visit = np.arange(n, dtype=np.int64) if identity else np.argsort(k, kind="stable")
    pos = np.ascontiguousarray(positions)
    blocks = int(blocks)
    if counts is None:
        counts = block_counts(pos, blocks, workers, rows_sorted=rows_sorted)
    starts = starts_of(counts)  # numpy's cumsum converting int32 to int64 is ~10x slower
    rows = np.empty(int(starts[blocks]), dtype=np.int64)
    if n >= 2**32:  # ranks do not fit the low 32 bits of a sort key: place each row instead
        run_split(
            workers,
            blocks,
            lambda lo, hi: csr_fill(pos, visit, lo, hi, starts, rows, rows_sorted),
            words=pos.size,
        )
        return BlockIndex(starts, rows)
    rank = visit if identity else np.empty(n, dtype=np.int64)
    if not identity:
        rank[visit] = np.arange(n, dtype=np.int64)

    def fill(lo: int, hi: int) -> None:
        # the range's (block, rank) keys in row order, sorted in place (numpy's vectorised sort,
        # the GIL released), then the rows of those ranks: no random writes
        part = rows[starts[lo] : starts[hi]]
        csr_keys(pos, rank, lo, hi, part, rows_sorted)
        part.sort()
        part &= 0xFFFFFFFF
        if not identity:
            part[:] = visit[part]

    run_split(workers, blocks, fill, words=pos.size)
    return BlockIndex(starts, rows)


def row_block_index(positions: np.ndarray, blocks: int, workers: int = 1) -> BlockIndex:
    """``block_index_at(positions, blocks)`` (within a block the rows in row order, each once)
    without sorting each row first or a per-block counter: the entries are written as sort keys
    ``block << 32 | row`` into one slice per range of blocks (a count, then a pass writing them,
    each over the positions in order and without a branch per entry), each slice sorted (numpy's
    vectorised sort, the GIL released) and reduced to its rows, a row's repeats of a block
    dropped; the block starts come from the sorted keys. With ``workers`` > 1 each kernel thread
    counts and writes the entries of one slice of the rows, then sorts one range of blocks: the
    same index as one thread."""
    return row_block_indexes([positions], blocks, workers)[0]


@dataclass
class _IndexBuild:
    """One party's ``row_block_index`` in the making (``row_block_indexes``)."""

    pos: np.ndarray
    ranges: list[tuple[int, int]]  # ranges of blocks (one sorted slice of keys each)
    cuts: np.ndarray
    slices: list[tuple[int, int]]  # slices of rows (one counting and writing task each)
    counts: np.ndarray  # (slices, ranges) entries of each slice in each range
    at: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    fill: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    keys: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    starts: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    kept: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))


def row_block_indexes(
    positions: Sequence[np.ndarray], blocks: int, workers: int = 1
) -> list[BlockIndex]:
    """``row_block_index`` of each of several position matrices over the same ``blocks``: the
    counting, the writing and the sorting of all of them are each one round of tasks on the
    kernel threads (three hand-offs to the pool in all, not three per matrix), a task the same
    slice of rows (range of blocks) of every matrix. The same indexes as one matrix at a time, on
    any number of threads."""
    blocks = int(blocks)
    out: list[BlockIndex | None] = [None] * len(positions)
    builds: dict[int, _IndexBuild] = {}
    for j, positions_j in enumerate(positions):
        pos = np.ascontiguousarray(positions_j)
        n = pos.shape[0]
        if n >= 2**32:  # rows do not fit the low 32 bits of a sort key
            out[j] = block_index_at(pos, blocks, None, workers)
            continue
        ranges = thread_ranges(workers, blocks, words=pos.size)
        if not ranges:  # no blocks
            out[j] = BlockIndex(np.zeros(blocks + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))
            continue
        cuts = np.array([lo for lo, _ in ranges] + [blocks], dtype=np.int64)
        slices = thread_ranges(workers, n, words=pos.size)
        counts = np.zeros((len(slices), len(ranges)), dtype=np.int64)
        builds[j] = _IndexBuild(pos, ranges, cuts, slices, counts)
    # task s: slice s of every matrix's rows (then range s of its blocks), so each thread takes
    # about one task per round, as one matrix's ranges did; the calling thread alone when every
    # matrix is one slice and one range (too little work to hand off)
    threads = workers if any(len(b.slices) > 1 or len(b.ranges) > 1 for b in builds.values()) else 1
    slice_count = max((len(b.slices) for b in builds.values()), default=0)
    range_count = max((len(b.ranges) for b in builds.values()), default=0)

    def count(s: int) -> None:
        for b in builds.values():
            if s < len(b.slices):
                range_entry_counts(b.pos, *b.slices[s], b.cuts, b.counts[s])

    run_tasks(threads, slice_count, count)
    for b in builds.values():
        b.at = np.concatenate([[0], np.cumsum(b.counts.sum(axis=0))]).astype(np.int64)
        total = int(b.at[-1])
        b.keys = np.empty(total + 1, dtype=np.int64)  # keys[total]: where the -1 entries go
        # slice s's entries of range k go after those of slices 0..s-1
        b.fill = np.full((len(b.slices), len(b.ranges) + 1), total, dtype=np.int64)
        b.fill[:, :-1] = b.at[:-1] + np.cumsum(b.counts, axis=0) - b.counts
        b.starts = np.empty(blocks + 1, dtype=np.int64)
        b.kept = np.zeros(len(b.ranges), dtype=np.int64)

    def write(s: int) -> None:
        for b in builds.values():
            if s < len(b.slices):
                range_entry_keys(b.pos, *b.slices[s], b.cuts, b.fill[s], b.keys)

    run_tasks(threads, slice_count, write)

    def reduce(k: int) -> None:
        for b in builds.values():
            if k < len(b.ranges):
                part = b.keys[b.at[k] : b.at[k + 1]]
                part.sort()
                b.kept[k] = rows_of_sorted_keys(part, *b.ranges[k], b.at[k], b.starts)

    run_tasks(threads, range_count, reduce)
    for j, b in builds.items():
        out[j] = _index_of(b, blocks)
    return [ix for ix in out if ix is not None]


def _index_of(b: _IndexBuild, blocks: int) -> BlockIndex:
    """The BlockIndex of a build whose ranges are sorted and reduced."""
    total = int(b.at[-1])
    b.starts[blocks] = total
    if int(b.kept.sum()) == total:  # no row repeats a block (the common case)
        return BlockIndex(b.starts, b.keys[:total])
    # a row named a block twice: close the ranges' gaps (their starts assumed none)
    rows = np.concatenate([b.keys[b.at[k] : b.at[k] + b.kept[k]] for k in range(len(b.ranges))])
    done = np.concatenate([[0], np.cumsum(b.kept)]).astype(np.int64)
    for k, (lo, hi) in enumerate(b.ranges):
        b.starts[lo:hi] -= b.at[k] - done[k]
    b.starts[blocks] = rows.size
    return BlockIndex(b.starts, rows)


def block_counts(
    positions: np.ndarray, blocks: int, workers: int = 1, *, rows_sorted: bool = False
) -> np.ndarray:
    """(blocks,) int32: rows of the (n, B) position matrix in each block (a row once per block)."""
    pos = np.ascontiguousarray(positions)
    if pos.shape[0] >= 2**31:
        raise ProtocolError(f"{pos.shape[0]} rows are more than a block count holds (2^31)")
    counts = np.zeros(int(blocks) + 1, dtype=np.int32)

    def count(lo: int, hi: int) -> None:
        csr_count(pos, lo, hi, counts, rows_sorted)

    run_split(workers, int(blocks), count, words=pos.size)
    return counts[1:]


def sort_position_rows(positions: np.ndarray, workers: int = 1) -> np.ndarray:
    """An (n, B) int32 position matrix with each row sorted (-1 first), for ``rows_sorted``: sorted
    in place (a block index does not depend on the order within a row) unless it is read-only or
    not int32 C-contiguous (then a sorted copy)."""
    pos = positions if positions.flags.writeable else positions.copy()
    pos = np.ascontiguousarray(pos, dtype=np.int32)
    run_split(workers, pos.shape[0], lambda lo, hi: sort_rows_in_place(pos, lo, hi), words=pos.size)
    return pos


def sub_blocks(members: Sequence[np.ndarray], cap: int | None) -> list[list[np.ndarray]]:
    """Split one block (per-party member rows, already ordered by key) into capped sub-blocks.

    Returns a list of sub-blocks, each a per-party list of row arrays. Without a cap, or when no
    party exceeds it, the block is returned whole.
    """
    if cap is None or all(m.size <= cap for m in members):
        return [list(members)]
    ks = [max(1, -(-m.size // cap)) for m in members]
    chunks: list[list[np.ndarray]] = []
    for m, k in zip(members, ks, strict=True):
        rank = np.arange(m.size, dtype=np.int64)
        which = rank * k // max(m.size, 1)
        bounds = np.searchsorted(which, np.arange(k + 1))
        chunks.append([m[bounds[c] : bounds[c + 1]] for c in range(k)])
    big_k = max(ks)
    return [[chunks[j][s % ks[j]] for j in range(len(members))] for s in range(big_k)]


@dataclass(frozen=True)
class BlockStats:
    """One party's view of the common blocks after set_common_blocks."""

    common_blocks: int
    records: int
    records_in_common_blocks: int
    largest_block: int
    mean_block: float
    median_block: float
    p99_block: float
    blocks_over_cap: int

    @classmethod
    def from_sizes(
        cls, sizes: np.ndarray, records: int, in_blocks: int, cap: int | None
    ) -> BlockStats:
        nz = sizes[sizes > 0]
        if nz.size == 0:
            return cls(int(sizes.size), records, in_blocks, 0, 0.0, 0.0, 0.0, 0)
        median, p99 = np.percentile(nz, [50, 99])  # one partition for both
        return cls(
            common_blocks=int(sizes.size),
            records=records,
            records_in_common_blocks=in_blocks,
            largest_block=int(nz.max()),
            mean_block=float(nz.mean()),
            median_block=float(median),
            p99_block=float(p99),
            blocks_over_cap=0 if cap is None else int(np.count_nonzero(nz > cap)),
        )
