"""Target any's group solver run one batch of connected components at a time, from arrays.

The solver (``party.protocol.solver``) only ever merges the two ends of a matched pair, and its rules
only look at pairs and groups inside one connected component of the matched-pair graph, so solving
the components separately (in any batches of whole components) gives the same groups. Here the
pairs stay in numpy arrays; only one batch of components at a time becomes the solver's Python
objects, so memory follows the largest component instead of the run's matched pairs. The result is
``group_result_rows(solve_groups(all pairs), P)``: per party, its rows in linkage-id order, linkage
ids numbered by each group's smallest member ``(party, key)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from party.numba_jit import jit
from party.protocol.errors import MemoryBudgetError
from party.protocol.solver import Group, solve_groups
from party.protocol.spill import LocalGauge

#: Bytes per matched pair of the arrays held while solving (ends and Dice 40, node ids 16, component
#: labels and order 16, unique-node temporaries 32, result rows of up to two members 80, and margin;
#: tracemalloc peak of the whole solve of 678,647 pairs in batches of 65,537: 229 per pair in all).
ARRAY_BYTES_PER_PAIR = 224
#: Bytes per matched pair of the solver's Python objects for one batch of components (tuples,
#: dictionaries and groups; tracemalloc peak of solve_groups on 100,000 pairs: 1,341).
SOLVER_BYTES_PER_PAIR = 1400
#: Matched pairs per batch of whole components handed to the solver (a larger component is one batch).
BATCH_PAIRS = 1 << 16

RESULT_COLUMNS = 5  # linkage id, similarity bits, pseudonym, group size, party mask


@jit
def _roots(a: np.ndarray, b: np.ndarray, nodes: int) -> np.ndarray:  # pragma: no cover - compiled
    """Union-find over the edges (a[i], b[i]): each node's root, the smallest node of its component."""
    parent = np.arange(nodes)
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
    for i in range(nodes):
        x = i
        while parent[x] != x:
            x = parent[x]
        parent[i] = x
    return parent


def component_batches(
    ends: np.ndarray, batch_pairs: int = BATCH_PAIRS
) -> tuple[np.ndarray, list[int]]:
    """The pairs' order grouped by component, and cut points (into that order) of batches of whole
    components of about ``batch_pairs`` pairs; ``ends`` is (k, 4): party a, key a, party b, key b."""
    k = int(ends.shape[0])
    if k == 0:
        return np.zeros(0, dtype=np.int64), [0]
    both = np.concatenate([ends[:, 0:2], ends[:, 2:4]])
    _, node = np.unique(both, axis=0, return_inverse=True)
    node = node.reshape(-1).astype(np.int64)
    roots = _roots(node[:k], node[k:], int(node.max()) + 1)
    label = roots[node[:k]]
    order = np.argsort(label, kind="stable")
    starts = np.flatnonzero(np.diff(label[order])) + 1
    cuts = [0]
    for s in starts.tolist():
        if s - cuts[-1] >= batch_pairs:
            cuts.append(s)
    cuts.append(k)
    return order, cuts


def largest_batch(cuts: list[int]) -> int:
    """Pairs in the largest batch of ``component_batches``."""
    return max((b - a for a, b in zip(cuts[:-1], cuts[1:], strict=True)), default=0)


def solve_in_budget(
    load: Callable[[], tuple[np.ndarray, np.ndarray]],
    pairs: int,
    parties: int,
    min_parties: int,
    solver: str,
    match_threshold: float | None,
    gauge: LocalGauge,
) -> tuple[list[np.ndarray], int]:
    """``solve_group_rows`` of the ``pairs`` matched pairs that ``load()`` returns (ends, Dice),
    with ``ARRAY_BYTES_PER_PAIR`` per pair reserved on ``gauge`` before loading them and
    ``SOLVER_BYTES_PER_PAIR`` per pair of the largest batch before solving; MemoryBudgetError,
    naming the counts, when the gauge refuses either. Both are released at the end."""
    held = 0

    def reserve(nbytes: int, largest: int | None) -> None:
        nonlocal held
        if not gauge.try_reserve(nbytes):
            batch = (
                "" if largest is None else f" (largest batch of connected components: {largest})"
            )
            raise MemoryBudgetError(
                f"solving the groups of {pairs} matched pairs{batch} needs about "
                f"{(held + nbytes) // 2**20 + 1} MiB, more than the party's memory budget leaves "
                "the solver (half of it, less what other runs hold): raise the party's "
                "memory_budget_mib (or s_t)"
            )
        held += nbytes

    try:
        reserve(ARRAY_BYTES_PER_PAIR * pairs, None)
        ends, similarities = load()
        batches = component_batches(ends)
        largest = largest_batch(batches[1])
        reserve(SOLVER_BYTES_PER_PAIR * largest, largest)
        return solve_group_rows(
            ends, similarities, parties, min_parties, solver, match_threshold, batches
        )
    finally:
        gauge.release(held)


def solve_group_rows(
    ends: np.ndarray,
    similarities: np.ndarray,
    parties: int,
    min_parties: int,
    solver: str,
    match_threshold: float | None,
    batches: tuple[np.ndarray, list[int]] | None = None,
) -> tuple[list[np.ndarray], int]:
    """Per party, the (k_q, 5) uint64 result rows of the solved groups in linkage-id order (the
    columns of ``pair_engine.group_result_rows``), and the number of groups."""
    order, cuts = batches if batches is not None else component_batches(ends)
    rows: list[list[np.ndarray]] = [[] for _ in range(parties)]
    firsts: list[tuple[int, int]] = []
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        pick = order[lo:hi]
        part = ends[pick].tolist()
        sims = similarities[pick].tolist()
        groups = solve_groups(
            ((a, ka, b, kb, s) for (a, ka, b, kb), s in zip(part, sims, strict=True)),
            min_parties,
            solver,
            match_threshold,
        )
        for q, table in enumerate(group_result_rows(groups, parties, first_id=len(firsts))):
            rows[q].append(table)
        firsts.extend(g.members[0] for g in groups)
    count = len(firsts)
    first = np.array(firsts, dtype=np.uint64).reshape(-1, 2)
    rank = np.empty(count, dtype=np.uint64)
    rank[np.lexsort((first[:, 1], first[:, 0]))] = np.arange(count, dtype=np.uint64)
    out = []
    for q in range(parties):
        table = (
            np.concatenate(rows[q]) if rows[q] else np.zeros((0, RESULT_COLUMNS), dtype=np.uint64)
        )
        table[:, 0] = rank[table[:, 0].astype(np.int64)]
        out.append(table[np.argsort(table[:, 0], kind="stable")])
    return out, count


def group_result_rows(groups: Sequence[Group], parties: int, first_id: int = 0) -> list[np.ndarray]:
    """Per party q, the result rows of the groups it is in, in list order: (k_q, 5) uint64 columns
    linkage id (``first_id`` + the group's index), similarity (float64 bits), q's member pseudonym,
    group size, party bit mask."""
    per_party: list[list[tuple[int, float, int, int, int]]] = [[] for _ in range(parties)]
    for gid, g in enumerate(groups, start=first_id):
        mask = sum(1 << p for p in set(g.parties))
        for q, key in g.members:
            per_party[q].append((gid, g.similarity, key, len(g.members), mask))
    out = []
    for rows in per_party:
        table = np.zeros((len(rows), RESULT_COLUMNS), dtype=np.uint64)
        if rows:
            gid_, sim_, key_, size_, mask_ = zip(*rows, strict=True)
            table[:, 0] = gid_
            table[:, 1] = np.array(sim_, dtype=np.float64).view(np.uint64)
            table[:, 2] = np.array(key_, dtype=np.uint64)
            table[:, 3] = size_
            table[:, 4] = np.array(mask_, dtype=np.uint64)
        out.append(table)
    return out
