"""Target any's group solver run from a stream of matched pairs, one batch of components at a time.

The solver (``party.protocol.solver``) only ever merges the two ends of a matched pair, and its rules
only look at pairs and groups inside one connected component of the matched-pair graph, so solving
the components separately (in any batches of whole components) gives the same groups. Memory stays
bounded however many pairs matched: the pairs are read as a stream of chunks (from the ring's
spilling store, or a compute party's arrays) three times and never held together:

1. union-find over the records (one int64 per record that can be in a pair: the run's pseudonyms,
   sorted per party, give each record a node number) finds every pair's component;
2. the pairs go, with their component's label (its smallest node), into a sorted ``RowStore``
   (in memory within the gauge, spilled to the run's folder and merged by streaming beyond it), so
   they come back grouped by component;
3. whole components are handed to the solver in batches of about ``BATCH_PAIRS`` pairs (the
   solver's rules compiled over arrays, ``party.protocol._numba_groups``: ``SOLVER_BYTES_PER_PAIR``
   per pair of the batch, reserved on the gauge first); each party's result rows go to a store,
   and once every group is known the linkage ids are renumbered by each group's smallest member
   ``(party, key)`` into a sorted store.

The result equals what ``solve_groups`` gives for all pairs at once, as result rows: per party,
columns linkage id (groups numbered by their smallest member), similarity (float64 bits), the
party's member key, group size, party bit mask, in linkage-id order. A component too large for the budget fails with MemoryBudgetError naming
memory_budget_mib before its objects are built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from party.numba_jit import jit
from party.protocol._numba_groups import solve_batch
from party.protocol.errors import MemoryBudgetError, ProtocolError
from party.protocol.spill import MemoryGauge, RowStore

#: Bytes per matched pair of the compiled solver's arrays for one batch of components (edges,
#: adjacency, groups, result rows; tracemalloc peak of a 200,000-pair batch: 146 bytes per pair
#: with 0.4 records per pair, 269 with 2 records per pair, the most a batch can have).
SOLVER_BYTES_PER_PAIR = 320
#: Bytes per node (record) of the union-find arrays (parent, root).
NODE_BYTES = 16
#: Bytes per group of the renumbering arrays (smallest member (party, key), rank).
GROUP_BYTES = 24
#: Matched pairs per batch of whole components handed to the solver (a larger component is one batch).
BATCH_PAIRS = 1 << 16
#: Rows read from a store at a time.
CHUNK_ROWS = 1 << 15

RESULT_COLUMNS = 5  # linkage id, similarity bits, pseudonym, group size, party mask
_LABELLED = 4  # component label, node a, node b, Dice bits

PairChunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]
NewStore = Callable[[int, str, "int | None"], RowStore]


@jit
def _union(parent: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:  # pragma: no cover - compiled
    """Union-find: join the components of nodes a[i] and b[i]; a root is its component's smallest node."""
    for i in range(a.shape[0]):
        x = a[i]
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        y = b[i]
        while parent[y] != y:
            parent[y] = parent[parent[y]]
            y = parent[y]
        if x < y:
            parent[y] = x
        elif y < x:
            parent[x] = y


@jit
def _flatten(parent: np.ndarray) -> None:  # pragma: no cover - compiled
    """Point every node straight at its root (roots are smaller than their members)."""
    for i in range(parent.shape[0]):
        parent[i] = parent[parent[i]]


class _Nodes:
    """Node numbers of records: party q's sorted keys ``known[q]`` are nodes offset[q] + position."""

    def __init__(self, known: Sequence[np.ndarray]) -> None:
        self.known = [np.asarray(k, dtype=np.uint64) for k in known]
        sizes = np.array([k.size for k in self.known], dtype=np.int64)
        self.offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.count = int(self.offset[-1])

    def of(self, party: np.ndarray, key: np.ndarray) -> np.ndarray:
        out = np.empty(party.shape[0], dtype=np.int64)
        for q, keys in enumerate(self.known):
            at = party == q
            if not np.any(at):
                continue
            want = key[at]
            pos = np.minimum(np.searchsorted(keys, want), max(keys.size - 1, 0))
            if keys.size == 0 or not np.array_equal(keys[pos], want):
                raise ProtocolError(f"a matched pair names a record party {q} never shared")
            out[at] = self.offset[q] + pos
        if np.any((party < 0) | (party >= len(self.known))):
            raise ProtocolError("a matched pair names a party outside the run")
        return out

    def party_key(self, node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(party, key) of node numbers."""
        party = np.searchsorted(self.offset, node, side="right") - 1
        key = np.empty(node.shape[0], dtype=np.uint64)
        for q, keys in enumerate(self.known):
            at = party == q
            key[at] = keys[node[at] - self.offset[q]]
        return party, key

    def group_rows(
        self,
        batch: np.ndarray,
        min_parties: int,
        solver: str,
        match_threshold: float | None,
        first_id: int,
    ) -> tuple[list[np.ndarray], np.ndarray]:
        """Solve one batch of whole components (rows of the labelled store): per party its
        result rows (linkage ids from ``first_id`` in group order), and each group's smallest
        member as (k, 2) uint64 (party, key)."""
        a = batch[:, 1].astype(np.int64)
        b = batch[:, 2].astype(np.int64)
        local = np.sort(np.concatenate([a, b]))
        local = local[np.concatenate([[True], local[1:] != local[:-1]])]
        party_of, key_of = self.party_key(local)
        members, starts, similarity = solve_batch(
            np.searchsorted(local, a),
            np.searchsorted(local, b),
            batch[:, 3].view(np.float64),
            party_of,
            min_parties,
            solver,
            match_threshold,
        )
        sizes = np.diff(starts)
        groups = int(sizes.size)
        bits = np.left_shift(np.uint64(1), party_of[members].astype(np.uint64))
        masks = np.bitwise_or.reduceat(bits, starts[:-1]) if groups else bits
        gid = np.repeat(np.arange(groups, dtype=np.uint64), sizes) + np.uint64(first_id)
        rows = np.empty((members.size, RESULT_COLUMNS), dtype=np.uint64)
        rows[:, 0] = gid
        rows[:, 1] = np.repeat(similarity, sizes).view(np.uint64)
        rows[:, 2] = key_of[members]
        rows[:, 3] = np.repeat(sizes, sizes).astype(np.uint64)
        rows[:, 4] = np.repeat(masks, sizes)
        member_party = party_of[members]
        tables = [rows[member_party == q] for q in range(len(self.known))]
        heads = members[starts[:-1]]
        first = np.stack([party_of[heads].astype(np.uint64), key_of[heads]], axis=1)
        return tables, first.reshape(-1, 2)


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


def solve_streamed(
    pair_chunks: PairChunks,
    known: Sequence[np.ndarray],
    min_parties: int,
    solver: str,
    match_threshold: float | None,
    new_store: NewStore,
    gauge: MemoryGauge,
    batch_pairs: int = BATCH_PAIRS,
) -> tuple[list[RowStore], int]:
    """Per party, a finished store of its (k_q, 5) result rows in linkage-id order (the columns of
    ``group_result_rows``), and the number of groups (module docstring). ``pair_chunks()`` yields
    (ends (k, 4) uint64: party a, key a, party b, key b; Dice (k,) float64) and is read three times;
    ``known[q]`` holds every key of party q that a pair can name, sorted; ``new_store(width, name,
    key_columns)`` makes the spilling stores; ``gauge`` is charged for the union-find arrays, each
    batch's solver objects and the renumbering arrays."""
    parties = len(known)
    nodes = _Nodes(known)
    held = 0

    def reserve(nbytes: int, what: str) -> None:
        nonlocal held
        if not gauge.try_reserve(nbytes):
            raise MemoryBudgetError(
                f"solving the groups needs about {(held + nbytes) // 2**20 + 1} MiB for {what}, "
                "more than the party's memory budget leaves the solver (half of it, less what "
                "other runs hold): raise the party's memory_budget_mib (or s_t)"
            )
        held += nbytes

    labelled: RowStore | None = None
    unranked: list[RowStore] = []
    try:
        reserve(NODE_BYTES * nodes.count, f"the union-find over {nodes.count} records")
        parent = np.arange(nodes.count, dtype=np.int64)
        for ends, _ in pair_chunks():
            a = nodes.of(ends[:, 0].astype(np.int64), ends[:, 1])
            b = nodes.of(ends[:, 2].astype(np.int64), ends[:, 3])
            _union(parent, a, b)
        _flatten(parent)
        labelled = new_store(_LABELLED, "pairs-by-component", _LABELLED - 1)
        for ends, sims in pair_chunks():
            a = nodes.of(ends[:, 0].astype(np.int64), ends[:, 1])
            b = nodes.of(ends[:, 2].astype(np.int64), ends[:, 3])
            rows = np.empty((ends.shape[0], _LABELLED), dtype=np.uint64)
            rows[:, 0] = parent[a]
            rows[:, 1] = np.minimum(a, b)  # node order is (party, key) order
            rows[:, 2] = np.maximum(a, b)
            rows[:, 3] = np.asarray(sims, dtype=np.float64).view(np.uint64)
            labelled.append(rows)
        labelled.finish()
        del parent
        gauge.release(NODE_BYTES * nodes.count)
        held -= NODE_BYTES * nodes.count

        unranked = [new_store(RESULT_COLUMNS, f"groups-unranked-{q}", None) for q in range(parties)]
        firsts: list[np.ndarray] = []
        count = 0

        def solve(batch: np.ndarray) -> None:
            nonlocal count, held
            k = int(batch.shape[0])
            reserve(SOLVER_BYTES_PER_PAIR * k, f"a batch of connected components of {k} pairs")
            try:
                tables, first = nodes.group_rows(batch, min_parties, solver, match_threshold, count)
                for q in range(parties):
                    unranked[q].append(tables[q])
                firsts.append(first)
                count += int(first.shape[0])
            finally:
                gauge.release(SOLVER_BYTES_PER_PAIR * k)
                held -= SOLVER_BYTES_PER_PAIR * k

        pending = np.zeros((0, _LABELLED), dtype=np.uint64)
        for rows in labelled.chunks(min(CHUNK_ROWS, batch_pairs)):
            pending = np.concatenate([pending, rows]) if pending.shape[0] else rows
            while pending.shape[0] >= batch_pairs:
                # whole components up to the one holding the batch_pairs-th pair; the last
                # component read may continue in the next chunk: it waits for it
                cut = int(np.searchsorted(pending[:, 0], pending[batch_pairs - 1, 0], "right"))
                if cut == pending.shape[0]:
                    break
                solve(pending[:cut])
                pending = pending[cut:]
        if pending.shape[0]:
            solve(pending)
        labelled.close()

        reserve(GROUP_BYTES * count, f"numbering {count} groups")
        first = np.concatenate(firsts) if firsts else np.zeros((0, 2), dtype=np.uint64)
        firsts.clear()
        rank = np.empty(count, dtype=np.uint64)
        rank[np.lexsort((first[:, 1], first[:, 0]))] = np.arange(count, dtype=np.uint64)
        del first
        out = []
        for q in range(parties):
            store = new_store(RESULT_COLUMNS, f"groups-{q}", 1)
            for rows in unranked[q].finish().chunks(CHUNK_ROWS):
                rows = rows.copy()
                rows[:, 0] = rank[rows[:, 0].astype(np.int64)]
                store.append(rows)
            unranked[q].close()
            out.append(store.finish())
        return out, count
    finally:
        gauge.release(held)
        if labelled is not None:
            labelled.close()
        for store in unranked:
            store.close()
