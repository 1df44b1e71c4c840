"""The group solver's per-record state and merge scan, compiled: ``party.protocol.solver``'s rules.

The matched pairs are given as node numbers whose order is the records' ``(party, key)`` order (so
a pair's smaller end, the tie-breaks and a group's smallest member follow node order), and they
arrive in the solver's visiting order (descending Dice, smaller end, larger end) one chunk at a
time (``party.protocol.components`` reads them from a sorted, spilling store). What is kept in
memory is per record only, plus, for the rules that look at a record's other pairs, its matched
partners (``ADJACENCY_BYTES_PER_PAIR``):

- ``GroupState``: each node's group (a node standing for it), the group's members as a linked list
  (next, tail), its size and party bit mask; ``merge_chunk`` visits a chunk of pairs and merges as
  ``solve_groups`` does (the ``guarded`` weak band, ``weakest-link``/``majority`` cross pairs);
- the partners in CSR form (``count_degrees``, ``fill_partners``, ``sort_partners``), each node's
  partners increasing, searched by bisection for "is this cross pair matched";
- ``group_means``: each group's similarity, ``math.fsum`` of its inner pairs' Dice over their count
  (CPython's exact-sum algorithm compiled: the same doubles).

Tested equal to ``solve_groups`` on random pairs with ties and weak-band Dice for every rule, every
chunk size and every store spilled (tests/unit/protocol/test_components.py).
"""

from __future__ import annotations

import numpy as np

from party.numba_jit import jit
from party.protocol.solver import SOLVERS

#: The rule's number in the compiled loop: guarded, weakest-link, majority, greedy.
RULE = {name: i for i, name in enumerate(SOLVERS)}
#: Bytes per node of the state kept during the scan (group, next, tail, size: int32; party mask:
#: uint64; partner offsets: int64) and of the linkage-id numbering (int64), with the temporary
#: fill cursor of the partner lists (int64).
NODE_BYTES = 4 * 4 + 8 + 8 + 8 + 8
#: Bytes per matched pair of the partner lists (each pair is in both ends' lists, as int32).
ADJACENCY_BYTES_PER_PAIR = 8


class GroupState:
    """Per-node state of the merge scan over ``n`` nodes (``party_bit[v]`` = 1 << party of v)."""

    def __init__(self, party_bit: np.ndarray) -> None:
        n = int(party_bit.shape[0])
        self.group = np.arange(n, dtype=np.int32)
        self.nxt = np.full(n, -1, dtype=np.int32)
        self.tail = np.arange(n, dtype=np.int32)
        self.size = np.ones(n, dtype=np.int32)
        self.mask = party_bit.astype(np.uint64)


def needs_partners(solver: str) -> bool:
    """Whether the rule looks at a record's other matched pairs (all but greedy do)."""
    return solver != "greedy"


@jit
def count_degrees(
    starts: np.ndarray, a: np.ndarray, b: np.ndarray, first: int, last: int
) -> None:  # pragma: no cover - compiled
    """starts[v + 1] += the number of pairs of node v, for the nodes v in [first, last) (prefix-
    summed into CSR offsets later; disjoint node ranges can be counted on threads at once)."""
    for i in range(a.shape[0]):
        x, y = a[i], b[i]
        if first <= x < last:
            starts[x + 1] += 1
        if first <= y < last:
            starts[y + 1] += 1


@jit
def fill_partners(
    cursor: np.ndarray, partners: np.ndarray, a: np.ndarray, b: np.ndarray, first: int, last: int
) -> None:  # pragma: no cover - compiled
    """Append each pair's other end to the partner list of each of its ends in [first, last)
    (``cursor``: next free slot): every list gets its partners in pair order, whichever node
    ranges the threads take."""
    for i in range(a.shape[0]):
        x, y = a[i], b[i]
        if first <= x < last:
            partners[cursor[x]] = y
            cursor[x] += 1
        if first <= y < last:
            partners[cursor[y]] = x
            cursor[y] += 1


#: Partner lists up to this long are sorted by insertion in place (most are a few entries);
#: longer ones by numpy's sort, in place too.
SHORT_LIST = 16


@jit
def sort_partners(
    starts: np.ndarray, partners: np.ndarray, first: int, last: int
) -> None:  # pragma: no cover - compiled
    """Sort the partner list of each node in [first, last) in place (no copy per list)."""
    for v in range(first, last):
        lo, hi = starts[v], starts[v + 1]
        if hi - lo > SHORT_LIST:
            partners[lo:hi].sort()
            continue
        for i in range(lo + 1, hi):
            x = partners[i]
            j = i - 1
            while j >= lo and partners[j] > x:
                partners[j + 1] = partners[j]
                j -= 1
            partners[j + 1] = x


@jit
def _is_linked(
    starts: np.ndarray, partners: np.ndarray, x: int, y: int
) -> bool:  # pragma: no cover
    lo, hi = starts[x], starts[x + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if partners[mid] < y:
            lo = mid + 1
        else:
            hi = mid
    return lo < starts[x + 1] and partners[lo] == y


@jit
def merge_chunk(  # pragma: no cover - compiled
    a: np.ndarray,
    b: np.ndarray,
    sims: np.ndarray,
    starts: np.ndarray,
    partners: np.ndarray,
    group: np.ndarray,
    nxt: np.ndarray,
    tail: np.ndarray,
    size: np.ndarray,
    mask: np.ndarray,
    rule: int,
    strong: float,
) -> None:
    """Visit a chunk of pairs (in the solver's order, continuing the previous chunk) and merge as
    the solver does, updating the per-node state."""
    for i in range(a.shape[0]):
        x, y, sim = a[i], b[i], sims[i]
        ga, gb = group[x], group[y]
        if ga == gb or (mask[ga] & mask[gb]) != 0:
            continue
        if sim < strong:
            # guarded's weak band: a lone record whose matched pairs all lead into the other group
            if (size[ga] == 1) == (size[gb] == 1):
                continue
            if size[ga] == 1:
                lone, target = x, gb
            else:
                lone, target = y, ga
            ok = True
            for k in range(starts[lone], starts[lone + 1]):
                if group[partners[k]] != target:
                    ok = False
                    break
            if not ok:
                continue
        if rule == 1 or rule == 2:  # weakest-link, majority: count the matched cross pairs
            cross = size[ga] * size[gb]
            matched = 0
            u = ga
            while u != -1:
                v = gb
                while v != -1:
                    if _is_linked(starts, partners, u, v):
                        matched += 1
                    v = nxt[v]
                u = nxt[u]
            if rule == 2 and 2 * matched < cross:
                continue
            if rule == 1 and matched != cross:
                continue
        v = gb
        while v != -1:
            group[v] = ga
            v = nxt[v]
        nxt[tail[ga]] = gb
        tail[ga] = tail[gb]
        size[ga] += size[gb]
        mask[ga] |= mask[gb]


@jit
def number_groups(
    group: np.ndarray, size: np.ndarray, keep_size: int, label: np.ndarray
) -> int:  # pragma: no cover - compiled
    """label[g] = the linkage id of group g (kept groups of at least ``keep_size`` members,
    numbered by their smallest node), -1 for the others; returns the number of groups."""
    count = 0
    for v in range(group.shape[0]):
        g = group[v]
        if size[g] >= keep_size and label[g] < 0:
            label[g] = count
            count += 1
    return count


@jit
def inner_pairs(  # pragma: no cover - compiled
    a: np.ndarray,
    b: np.ndarray,
    sims: np.ndarray,
    group: np.ndarray,
    label: np.ndarray,
    out_id: np.ndarray,
    out_sim: np.ndarray,
    at: int,
) -> int:
    """Append (linkage id, Dice) of every pair inside a kept group from ``at``; return the end."""
    for i in range(a.shape[0]):
        g = group[a[i]]
        if g == group[b[i]] and label[g] >= 0:
            out_id[at] = label[g]
            out_sim[at] = sims[i]
            at += 1
    return at


@jit
def _fsum(values: np.ndarray, lo: int, hi: int, partials: np.ndarray) -> float:  # pragma: no cover
    """``math.fsum(values[lo:hi])`` for finite values: CPython's algorithm (Shewchuk's exact
    partials, then the sum rounded half-even across partials), so the result is the same double."""
    n = 0
    for j in range(lo, hi):
        x = values[j]
        i = 0
        for k in range(n):
            y = partials[k]
            if abs(x) < abs(y):
                x, y = y, x
            s = x + y
            lo_part = y - (s - x)
            if lo_part != 0.0:
                partials[i] = lo_part
                i += 1
            x = s
        n = i
        if x != 0.0:
            partials[n] = x
            n += 1
    total = 0.0
    if n > 0:
        n -= 1
        total = partials[n]
        rest = 0.0
        while n > 0:
            x = total
            n -= 1
            y = partials[n]
            total = x + y
            rest = y - (total - x)
            if rest != 0.0:
                break
        if n > 0 and (
            (rest < 0.0 and partials[n - 1] < 0.0) or (rest > 0.0 and partials[n - 1] > 0.0)
        ):
            y = rest * 2.0
            x = total + y
            if y == x - total:
                total = x
    return total


@jit
def group_means(ids: np.ndarray, sims: np.ndarray, groups: int) -> np.ndarray:  # pragma: no cover
    """Per group 0..groups-1, ``math.fsum`` of the ``sims[i]`` with ``ids[i]`` = that group, divided
    by their count (0.0 for a group with none): a counting sort by id keeps each group's values in
    their given order, as a stable sort would."""
    count = np.zeros(groups + 1, dtype=np.int64)
    for i in range(ids.shape[0]):
        count[ids[i] + 1] += 1
    longest = 0
    for g in range(groups):
        longest = max(longest, count[g + 1])
        count[g + 1] += count[g]
    cursor = count[:-1].copy()
    by_group = np.empty(sims.shape[0], dtype=np.float64)
    for i in range(ids.shape[0]):
        g = ids[i]
        by_group[cursor[g]] = sims[i]
        cursor[g] += 1
    partials = np.empty(longest + 1, dtype=np.float64)
    out = np.zeros(groups, dtype=np.float64)
    for g in range(groups):
        lo, hi = count[g], count[g + 1]
        if hi > lo:
            out[g] = _fsum(by_group, lo, hi, partials) / (hi - lo)
    return out


@jit
def group_by_party(  # pragma: no cover - compiled
    party: np.ndarray, key: np.ndarray, parties: int, order: np.ndarray, grouped: np.ndarray
) -> np.ndarray:
    """A counting sort of pair ends by party: ``grouped`` holds the keys of party 0, then of party
    1, ... (each in the given order), ``order`` their positions; returns the (parties + 2,)
    offsets of the groups, the last entry counting the ends whose party is outside the run
    (left out)."""
    starts = np.zeros(parties + 2, dtype=np.int64)
    for i in range(party.shape[0]):
        q = party[i]
        if 0 <= q < parties:
            starts[q + 1] += 1
        else:
            starts[parties + 1] += 1
    for q in range(parties):
        starts[q + 1] += starts[q]
    cursor = starts[:parties].copy()
    for i in range(party.shape[0]):
        q = party[i]
        if 0 <= q < parties:
            grouped[cursor[q]] = key[i]
            order[cursor[q]] = i
            cursor[q] += 1
    return starts


@jit
def place_nodes(  # pragma: no cover - compiled
    order: np.ndarray,
    positions: np.ndarray,
    starts: np.ndarray,
    offset: np.ndarray,
    out: np.ndarray,
) -> None:
    """out[order[t]] = offset[q] + positions[t] for the grouped ends t of each party q."""
    for q in range(offset.shape[0] - 1):
        base = offset[q]
        for t in range(starts[q], starts[q + 1]):
            out[order[t]] = base + positions[t]
