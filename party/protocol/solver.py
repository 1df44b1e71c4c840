"""The multi-party group solver of target "any": matched pairs -> groups of at most one record per party.

Input: matched pairs ``(party_a, key_a, party_b, key_b, dice)`` with ``party_a != party_b``, where a
key identifies a record at its party (the run's pseudonym: the same at every party, so every party
that solves the same pairs gets the same groups). Every record starts alone; pairs are visited by
descending Dice, ties by the smaller ``(party, key)`` end first, then the other end (the pair's
two ends in increasing ``(party, key)`` order). A pair joins the two groups of its records unless
they are already one group, or the two groups hold a record of the same party, or the solver's rule
rejects the merge:

- ``greedy``: never rejects (single linkage, what anonlink's greedy solver does).
- ``majority``: rejects unless at least half of the cross pairs (one record from each group) are
  matched pairs.
- ``weakest-link``: rejects unless every cross pair is a matched pair, i.e. the merged group's
  weakest link is at or above the match threshold (complete linkage).

A group's similarity is the mean Dice of its matched internal pairs (``math.fsum`` / count, so
the order of summation does not matter). Groups of fewer than ``min_parties`` records are dropped; the rest are ordered by their
smallest member ``(party, key)`` and numbered 0, 1, ... (the linkage id).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from party.protocol.errors import ParameterError

#: Supported solver names; the first is the default (see the module docstring and docs/protocol.md).
SOLVERS = ("weakest-link", "majority", "greedy")
DEFAULT_SOLVER = SOLVERS[0]

Member = tuple[int, int]  # (party index, record key)


@dataclass(frozen=True)
class Group:
    """One solved group: its members by increasing party, and its similarity."""

    members: tuple[Member, ...]
    similarity: float

    @property
    def parties(self) -> tuple[int, ...]:
        return tuple(p for p, _ in self.members)


def check_solver(name: str) -> str:
    """Return ``name`` if it is a supported solver, else raise ParameterError naming it."""
    if name not in SOLVERS:
        raise ParameterError(f"solver must be one of {', '.join(SOLVERS)}, got {name!r}")
    return name


def _accepts(rule: str, matched_cross: int, cross: int) -> bool:
    if rule == "greedy":
        return True
    if rule == "majority":
        return 2 * matched_cross >= cross
    return matched_cross == cross


def solve_groups(
    pairs: Iterable[tuple[int, int, int, int, float]],
    min_parties: int,
    solver: str = DEFAULT_SOLVER,
) -> list[Group]:
    """Groups from matched pairs (see the module docstring for the rules and tie-breaks)."""
    check_solver(solver)
    edges: list[tuple[float, Member, Member]] = []
    for pa, ka, pb, kb, sim in pairs:
        a, b = (int(pa), int(ka)), (int(pb), int(kb))
        if a[0] == b[0]:
            raise ParameterError(f"a matched pair joins two records of party {a[0]}")
        edges.append((float(sim), min(a, b), max(a, b)))
    edges.sort(key=lambda e: (-e[0], e[1], e[2]))
    linked: dict[Member, dict[Member, float]] = {}
    for sim, a, b in edges:
        linked.setdefault(a, {})[b] = sim
        linked.setdefault(b, {})[a] = sim
    group_of: dict[Member, int] = {}
    members: list[list[Member]] = []
    for m in sorted(linked):
        group_of[m] = len(members)
        members.append([m])
    for _, a, b in edges:
        ga, gb = group_of[a], group_of[b]
        if ga == gb:
            continue
        if {p for p, _ in members[ga]} & {p for p, _ in members[gb]}:
            continue
        cross = [(x, y) for x in members[ga] for y in members[gb]]
        matched = [linked[x][y] for x, y in cross if y in linked[x]]
        if not _accepts(solver, len(matched), len(cross)):
            continue
        for m in members[gb]:
            group_of[m] = ga
        members[ga].extend(members[gb])
        members[gb] = []
    out = []
    for ms in members:
        if len(ms) >= max(2, min_parties):
            ms = sorted(ms)
            inner = [linked[x][y] for i, x in enumerate(ms) for y in ms[i + 1 :] if y in linked[x]]
            out.append(Group(tuple(ms), math.fsum(inner) / len(inner)))
    out.sort(key=lambda grp: grp.members[0])
    return out
