"""Target any's group solver run from a stream of matched pairs, in memory per record, not per pair.

The solver (``party.protocol.solver``) visits the matched pairs by descending Dice, ties by the
pair's smaller end, then its larger end, and decides each merge from the state of the two groups
(and, for every rule but greedy, the other matched pairs of their records). Memory stays bounded
by the records, however many pairs matched and however large one connected component grows:

1. the pairs are read as a stream of chunks (from the ring's spilling store, or a compute party's
   arrays) and go, as node numbers (the run's pseudonyms, sorted per party, give each record a
   node number whose order is the ``(party, key)`` order) under the key (~Dice bits, smaller end,
   larger end), into a sorted ``RowStore`` (in memory within the stores' gauge, spilled to the
   run's folder and merged by streaming beyond it): an external sort into the solver's order;
   or, while ``gauge`` grants 16 then 8 bytes per pair, one sorted int64 per pair in memory
   (``party.protocol.pair_order``: no lexsort, no merge; the same order);
2. for the rules that look at a record's other pairs, the partner lists of every record are built
   from that store (CSR, ``ADJACENCY_BYTES_PER_PAIR`` per pair: the only per-pair memory);
3. the sorted pairs are read back a chunk at a time through the compiled merge scan
   (``party.protocol._numba_groups``), which keeps only per-record state (``NODE_BYTES``);
4. groups are numbered by their smallest member (one pass over the nodes), the pairs are read a
   last time for each group's inner pairs (the group similarity: the mean of its matched internal
   pairs, ``math.fsum`` / count), and each party's result rows are written, in linkage-id order,
   to a store.

Everything is reserved on ``gauge`` before it is built; a run whose records (or partner lists) do
not fit fails with MemoryBudgetError naming memory_budget_mib. The result equals what
``solve_groups`` gives for all pairs at once, as result rows: per party, columns linkage id (groups
numbered by their smallest member), similarity (float64 bits), the party's member key, group size,
party bit mask, in linkage-id order.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from party.protocol._numba_groups import (
    ADJACENCY_BYTES_PER_PAIR,
    NODE_BYTES,
    RULE,
    GroupState,
    count_degrees,
    fill_partners,
    group_by_party,
    group_means,
    inner_pairs,
    merge_chunk,
    needs_partners,
    number_groups,
    place_nodes,
    sort_partners,
)
from party.protocol.blocks import DigestLookup
from party.protocol.errors import MemoryBudgetError, ProtocolError
from party.protocol.pair_order import MemoryOrder
from party.protocol.solver import _strong_level, check_solver, effective_solver
from party.protocol.spill import MemoryGauge, RowStore
from party.protocol.threads import run_ranges, run_tasks, thread_ranges

#: Bytes per pair inside a kept group, collected for the group similarities (id, Dice, and the
#: sort's permutation and copies).
INNER_BYTES_PER_PAIR = 40
#: Bytes per record of one party while its result rows are made (ids, order, the rows).
RESULT_BYTES_PER_RECORD = 88
#: Bytes per group of the similarity arrays.
GROUP_BYTES = 24
#: Rows read from a store at a time.
CHUNK_ROWS = 1 << 15

RESULT_COLUMNS = 5  # linkage id, similarity bits, pseudonym, group size, party mask
_SORTED = 3  # ~Dice bits, node a, node b

PairChunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]
NewStore = Callable[[int, str, "int | None"], RowStore]


class _Nodes:
    """Node numbers of records: party q's sorted keys ``known[q]`` are nodes offset[q] + position."""

    def __init__(self, known: Sequence[np.ndarray]) -> None:
        self.known = [np.asarray(k, dtype=np.uint64) for k in known]
        sizes = np.array([k.size for k in self.known], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.count = int(self.offset[-1])

        self.lookups: list[DigestLookup] = []  # hash tables of known (use_lookups)

    def lookup_bytes(self) -> int:
        """Bytes of the hash tables ``use_lookups`` builds."""
        return sum(DigestLookup.table_bytes(k.size) for k in self.known)

    def keys_nonzero(self) -> bool:
        """True iff no party's keys include 0 (what a hash table of ``use_lookups`` needs)."""
        return all(k.size == 0 or k[0] != 0 for k in self.known)

    def use_lookups(self, on: bool) -> None:
        """Find keys with a hash table per party (random keys: about 10x faster than a binary
        search, each a cache miss per step), or (off) drop the tables."""
        self.lookups = [DigestLookup(k) for k in self.known] if on else []

    def of(self, party: np.ndarray, key: np.ndarray) -> np.ndarray:
        if self.lookups:
            return self._of_grouped(party, key)
        out = np.empty(party.shape[0], dtype=np.int64)
        for q, keys in enumerate(self.known):
            at = party == q
            if not np.any(at):
                continue
            want = np.ascontiguousarray(key[at], dtype=np.uint64)
            if self.lookups:
                pos = self.lookups[q].positions(want).astype(np.int64)
                if np.any(pos < 0):
                    raise ProtocolError(f"a matched pair names a record party {q} never shared")
            else:
                pos = np.minimum(np.searchsorted(keys, want), max(keys.size - 1, 0))
                if keys.size == 0 or not np.array_equal(keys[pos], want):
                    raise ProtocolError(f"a matched pair names a record party {q} never shared")
            out[at] = self.offset[q] + pos
        if np.any((party < 0) | (party >= len(self.known))):
            raise ProtocolError("a matched pair names a party outside the run")
        return out

    def _of_grouped(self, party: np.ndarray, key: np.ndarray) -> np.ndarray:
        """``of`` through the hash tables: the ends grouped by party in one compiled pass, one
        lookup per party, placed back in one pass (the same nodes and errors as ``of``)."""
        parties, k = len(self.known), party.shape[0]
        order = np.empty(k, dtype=np.int64)
        grouped = np.empty(k, dtype=np.uint64)
        party = np.ascontiguousarray(party, dtype=np.int64)
        key = np.ascontiguousarray(key, dtype=np.uint64)
        starts = group_by_party(party, key, parties, order, grouped)
        positions = np.empty(k, dtype=np.int32)
        for q in range(parties):
            lo, hi = int(starts[q]), int(starts[q + 1])
            if hi == lo:
                continue
            pos = positions[lo:hi] = self.lookups[q].positions(grouped[lo:hi])
            if np.any(pos < 0):
                raise ProtocolError(f"a matched pair names a record party {q} never shared")
        if starts[parties + 1]:
            raise ProtocolError("a matched pair names a party outside the run")
        out = np.empty(k, dtype=np.int64)
        place_nodes(order, positions, starts, self.offset, out)
        return out

    def party_key(self, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(party, key) of node numbers."""
        party = np.searchsorted(self.offset, node, side="right") - 1
        key = np.empty(node.shape[0], dtype=np.uint64)
        for q, keys in enumerate(self.known):
            at = party == q
            key[at] = keys[node[at] - self.offset[q]]
        return party, key

    def party_bits(self) -> np.ndarray:
        """(count,) uint64: 1 << the party of each node."""
        sizes = np.diff(self.offset)
        parties = np.repeat(np.arange(sizes.size, dtype=np.uint64), sizes)
        return np.left_shift(np.uint64(1), parties)


def known_keys(ends: np.ndarray, parties: int) -> list[np.ndarray]:
    """Per party, the sorted distinct keys it has in the pairs ``ends`` ((k, 4) uint64)."""
    out = []
    for q in range(parties):
        keys = [ends[ends[:, 0] == q, 1], ends[ends[:, 2] == q, 3]]
        out.append(np.unique(np.concatenate(keys)))
    return out


def array_chunks(ends: np.ndarray, similarities: np.ndarray, rows: int = CHUNK_ROWS) -> PairChunks:
    """A re-readable chunk source over in-memory matched pairs."""

    def chunks() -> Iterable[tuple[np.ndarray, np.ndarray]]:
        for lo in range(0, ends.shape[0], rows):
            yield ends[lo : lo + rows], similarities[lo : lo + rows]

    return chunks


def _sorted_pairs(
    store: RowStore, rows: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The pairs of the sorted store in the solver's order: (node a, node b, Dice) per chunk."""
    for chunk in store.chunks(rows):
        dice = np.invert(chunk[:, 0]).view(np.float64)
        yield chunk[:, 1].astype(np.int64), chunk[:, 2].astype(np.int64), dice


def group_similarity(ids: np.ndarray, sims: np.ndarray, groups: int) -> np.ndarray:
    """Per group 0..groups-1, the mean of the Dice of its inner pairs ``(ids[i], sims[i])``
    (``math.fsum`` / count, compiled: ``_numba_groups.group_means``; 0.0 for a group without)."""
    return group_means(
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(sims, dtype=np.float64),
        int(groups),
    )


def solve_streamed(
    pair_chunks: PairChunks,
    known: Sequence[np.ndarray],
    min_parties: int,
    solver: str,
    match_threshold: float | None,
    new_store: NewStore,
    gauge: MemoryGauge,
    chunk_rows: int = CHUNK_ROWS,
    memory_order: bool = True,
    workers: int = 1,
) -> tuple[list[RowStore], int]:
    """Per party, a finished store of its (k_q, 5) result rows in linkage-id order (the columns of
    ``group_result_rows``), and the number of groups (module docstring). ``pair_chunks()`` yields
    (ends (k, 4) uint64: party a, key a, party b, key b; Dice (k,) float64) and is read once;
    ``known[q]`` holds every key of party q that a pair can name, sorted, one entry per party of
    the run (at P = 2 every rule is greedy: ``solver.effective_solver``); ``new_store(width, name,
    key_columns)`` makes the spilling stores; ``gauge`` is charged for the per-record state, the
    partner lists, the inner pairs and the result rows while they are held; ``chunk_rows``: pairs
    read from the sorted store at a time. ``memory_order``: hold the visiting order in memory
    (``party.protocol.pair_order``, on ``gauge``) while the gauge grants it, moving it to the
    sorted store when the gauge refuses it or a later step; False: always the store. The groups
    are the same either way. ``workers``: kernel threads for the partner lists and the result
    rows (the same groups and rows on any number). (``StreamedSolver`` takes the pairs as they
    come instead.)"""
    solving = StreamedSolver(
        known,
        min_parties,
        solver,
        match_threshold,
        new_store,
        gauge,
        chunk_rows,
        memory_order,
        workers,
    )
    try:
        for ends, sims in pair_chunks():
            solving.add(ends, sims)
    except BaseException:
        solving.close()
        raise
    return solving.finish()


class StreamedSolver:
    """``solve_streamed`` fed chunk by chunk: ``add`` each chunk of matched pairs as it comes
    (their node numbers and the visiting order, the first step), then ``finish`` (the rest);
    ``close`` gives everything back when the solving is abandoned. Arguments as
    ``solve_streamed``'s; the per-record state is reserved on ``gauge`` at once (MemoryBudgetError
    naming memory_budget_mib when it does not fit)."""

    def __init__(
        self,
        known: Sequence[np.ndarray],
        min_parties: int,
        solver: str,
        match_threshold: float | None,
        new_store: NewStore,
        gauge: MemoryGauge,
        chunk_rows: int = CHUNK_ROWS,
        memory_order: bool = True,
        workers: int = 1,
    ) -> None:
        check_solver(solver)
        self.workers = max(1, int(workers))
        strong = _strong_level(solver, match_threshold)
        self.parties = len(known)
        # greedy at P = 2 (``party.protocol.solver``)
        self.solver = solver = effective_solver(solver, self.parties)
        self.strong = -math.inf if solver == "greedy" else strong
        self.min_parties = min_parties
        self.nodes = nodes = _Nodes(known)
        self.n = n = nodes.count
        if n >= 2**31 - 1:
            raise ProtocolError(f"the group solver supports fewer than 2^31 records, got {n}")
        self.chunk_rows = max(1, int(chunk_rows))
        self.new_store = new_store
        self.gauge = gauge
        self.held = 0
        self.tables = 0  # bytes of the node lookups' hash tables while held
        self.by_dice: RowStore | None = None
        self.order: MemoryOrder | None = MemoryOrder(n, gauge) if memory_order else None
        self.out: list[RowStore] = []
        self.closed = False
        try:
            self._reserve(NODE_BYTES * n, f"the state of {n} records")
            tables = nodes.lookup_bytes()
            # the tables hold non-zero keys (pseudonyms never are 0); else, or without room for
            # them, the binary search finds the records
            if nodes.keys_nonzero() and gauge.try_reserve(tables):
                self.held += tables
                self.tables = tables
                nodes.use_lookups(True)
        except BaseException:
            self.close()
            raise

    def _to_store(self, a: np.ndarray, b: np.ndarray, dice: np.ndarray) -> None:
        if self.by_dice is None:
            self.by_dice = self.new_store(_SORTED, "pairs-by-dice", _SORTED)
        rows = np.empty((a.shape[0], _SORTED), dtype=np.uint64)
        rows[:, 0] = np.invert((dice + 0.0).view(np.uint64))  # descending Dice (+0.0: no -0)
        rows[:, 1] = a
        rows[:, 2] = b
        self.by_dice.append(rows)

    def _finish_store(self) -> RowStore:
        if self.by_dice is None:
            self.by_dice = self.new_store(_SORTED, "pairs-by-dice", _SORTED)
        return self.by_dice.finish()

    def _order_to_store(self) -> bool:
        """Move the pairs held in memory into the sorted store (a finished order in its order,
        so the store stays ordered: no sort, and finish it); False when none were held."""
        order = self.order
        if order is None:
            return False
        done = order.finished
        for a, b, dice in order.chunks(self.chunk_rows) if done else order.drain():
            self._to_store(a, b, dice)
        order.close()
        self.order = None
        if done:
            self._finish_store()
        return True

    def _reserve(self, nbytes: int, what: str) -> None:
        # the order in memory gives its bytes back (to the store) before the solver is refused
        gauge = self.gauge
        if not gauge.try_reserve(nbytes) and not (
            self._order_to_store() and gauge.try_reserve(nbytes)
        ):
            raise MemoryBudgetError(
                f"solving the groups needs about {(self.held + nbytes) // 2**20 + 1} MiB for "
                f"{what}, more than the party's memory budget leaves the solver (half of it, less "
                "what other runs hold): raise the party's memory_budget_mib"
            )
        self.held += nbytes

    def _release(self, nbytes: int) -> None:
        self.gauge.release(nbytes)
        self.held -= nbytes

    def _sorted_pairs(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if self.order is not None:
            return self.order.chunks(self.chunk_rows)
        assert self.by_dice is not None
        return _sorted_pairs(self.by_dice, self.chunk_rows)

    def add(self, ends: np.ndarray, sims: np.ndarray) -> None:
        """Take a chunk of matched pairs (``solve_streamed``'s ``pair_chunks`` items)."""
        if self.closed:
            raise ProtocolError("the group solver is finished")
        pa, pb = ends[:, 0].astype(np.int64), ends[:, 2].astype(np.int64)
        same = np.flatnonzero(pa == pb)
        if same.size:
            raise ProtocolError(f"a matched pair joins two records of party {pa[same[0]]}")
        dice = np.asarray(sims, dtype=np.float64)
        if not np.all((dice >= 0.0) & (dice <= 1.0)):
            raise ProtocolError("a matched pair's Dice is outside [0, 1]")
        a, b = self.nodes.of(pa, ends[:, 1]), self.nodes.of(pb, ends[:, 3])
        lo, hi = np.minimum(a, b), np.maximum(a, b)  # node order is (party, key) order
        if self.order is not None and not self.order.add(lo, hi, dice):
            self._order_to_store()  # the gauge refused: the store takes the pairs from here on
        if self.order is None:
            self._to_store(lo, hi, dice)

    def finish(self) -> tuple[list[RowStore], int]:
        """The result stores and the number of groups (``solve_streamed``); closes the solver."""
        try:
            return self._finish()
        except BaseException:
            for store in self.out:
                store.close()
            raise
        finally:
            self.close()

    def close(self) -> None:
        """Release everything still held (the result stores ``finish`` returned stay open)."""
        self.closed = True
        self.nodes.use_lookups(False)
        self.gauge.release(self.held)
        self.held = 0
        if self.by_dice is not None:
            self.by_dice.close()
        if self.order is not None:
            self.order.close()
            self.order = None

    def _finish(self) -> tuple[list[RowStore], int]:
        if self.closed:
            raise ProtocolError("the group solver is finished")
        nodes, n, solver, parties = self.nodes, self.n, self.solver, self.parties
        chunk_rows, new_store, out = self.chunk_rows, self.new_store, self.out
        if nodes.lookups:  # every pair has its node numbers: the tables are done
            nodes.use_lookups(False)
            self._release(self.tables)
        if self.order is not None and not self.order.finish():
            self._order_to_store()
        pairs = self.order.pairs if self.order is not None else self._finish_store().rows

        state = GroupState(nodes.party_bits())
        starts = np.zeros(n + 1, dtype=np.int64)
        partners = np.zeros(0, dtype=np.int32)
        adjacency = 0
        if needs_partners(solver):
            adjacency = ADJACENCY_BYTES_PER_PAIR * pairs
            self._reserve(adjacency, f"the partner lists of {pairs} matched pairs")
            # each kernel thread takes the ends in its own range of nodes (disjoint writes: the
            # same lists in the same order on any number of threads)
            ranges = thread_ranges(self.workers, n, words=2 * pairs)

            def on_ranges(fn: Callable[[int, int], None]) -> None:
                run_ranges(self.workers, ranges, lambda _, lo, hi: fn(lo, hi))

            for a, b, _ in self._sorted_pairs():
                on_ranges(functools.partial(count_degrees, starts, a, b))
            np.cumsum(starts, out=starts)
            cursor = starts[:-1].copy()
            partners = np.empty(2 * pairs, dtype=np.int32)
            for a, b, _ in self._sorted_pairs():
                on_ranges(functools.partial(fill_partners, cursor, partners, a, b))
            del cursor
            on_ranges(functools.partial(sort_partners, starts, partners))
        strong_value = -math.inf if self.strong == -math.inf else float(self.strong)
        for a, b, dice in self._sorted_pairs():
            merge_chunk(
                a,
                b,
                dice,
                starts,
                partners,
                state.group,
                state.nxt,
                state.tail,
                state.size,
                state.mask,
                RULE[solver],
                strong_value,
            )
        del partners, starts
        self._release(adjacency)

        label = np.full(n, -1, dtype=np.int64)
        count = int(number_groups(state.group, state.size, max(2, self.min_parties), label))
        kept = state.size[np.flatnonzero(label >= 0)].astype(np.int64)
        inner = int(np.sum(kept * (kept - 1) // 2))
        del kept
        self._reserve(
            INNER_BYTES_PER_PAIR * inner + GROUP_BYTES * count,
            f"the similarities of {count} groups",
        )
        ids = np.empty(inner, dtype=np.int64)
        sims_in = np.empty(inner, dtype=np.float64)
        at = 0
        for a, b, dice in self._sorted_pairs():
            at = int(inner_pairs(a, b, dice, state.group, label, ids, sims_in, at))
        if self.by_dice is not None:
            self.by_dice.close()
        if self.order is not None:
            self.order.close()
            self.order = None
        similarity = group_similarity(ids[:at], sims_in[:at], count)
        del ids, sims_in
        self._release(INNER_BYTES_PER_PAIR * inner)

        def rows_of(q: int) -> np.ndarray:
            lo, hi = int(nodes.offset[q]), int(nodes.offset[q + 1])
            group = state.group[lo:hi]
            lid = label[group]
            at_q = np.flatnonzero(lid >= 0)
            # a group holds at most one record per party (merges of groups sharing a party are
            # refused): party q's linkage ids are distinct, so any sort orders them alike
            at_q = at_q[np.argsort(lid[at_q])]
            g = group[at_q]
            rows = np.empty((at_q.size, RESULT_COLUMNS), dtype=np.uint64)
            rows[:, 0] = label[g]
            rows[:, 1] = similarity[label[g]].view(np.uint64)
            rows[:, 2] = nodes.known[q][at_q]
            rows[:, 3] = state.size[g]
            rows[:, 4] = state.mask[g]
            return rows

        def store_rows(q: int, rows: np.ndarray) -> None:
            store = new_store(RESULT_COLUMNS, f"groups-{q}", None)
            out.append(store)
            for first in range(0, rows.shape[0], chunk_rows):
                store.append(rows[first : first + chunk_rows])
            store.finish()

        needs = [
            RESULT_BYTES_PER_RECORD * int(nodes.offset[q + 1] - nodes.offset[q])
            for q in range(parties)
        ]
        if self.workers > 1 and parties > 1 and self.gauge.try_reserve(sum(needs)):
            # every party's rows at once on the kernel threads; the stores take them in order
            # in this thread (their spill folder is not for two threads)
            self.held += sum(needs)
            made = run_tasks(self.workers, parties, rows_of)
            for q in range(parties):
                store_rows(q, made[q])
                made[q] = np.zeros((0, RESULT_COLUMNS), dtype=np.uint64)
            self._release(sum(needs))
            return out, count
        for q in range(parties):
            size = int(nodes.offset[q + 1] - nodes.offset[q])
            self._reserve(needs[q], f"the result rows of {size} records of party {q}")
            store_rows(q, rows_of(q))
            self._release(needs[q])
        return out, count
