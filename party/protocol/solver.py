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
- ``guarded``: greedy for a pair whose Dice is at least ``s_t + WEAK_BAND`` (IEEE double sum; s_t =
  the run's match threshold). A pair in the weak band ``[s_t, s_t + WEAK_BAND)`` merges only a lone
  record into a group of two or more whose records are the only ones it is matched with (every
  matched pair of the lone record leads into that group); it never joins two lone records or two
  groups. Why (docs/benchmarks.md, "Target any"): near the threshold most pairs are a person's
  household member or neighbour, and a corrupted copy of a group's person is told apart from them
  by having no other candidate; two groups joined by a weak pair are almost always two people.

At P = 2 every group is one record of each party, so a merge always joins two lone records: there
every rule is one-to-one greedy (``effective_solver``). ``weakest-link`` and ``majority`` agree with
greedy by construction (the only cross pair is the pair itself); ``guarded``'s weak band, which
never joins two lone records, would drop every pair in it, so it does not apply at P = 2 (what
clkhash + anonlink's greedy solver does and two-party users expect; docs/benchmarks.md, "All pairs
at P = 2").

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
SOLVERS = ("guarded", "weakest-link", "majority", "greedy")
#: Width of the weak band of the ``guarded`` rule, above the match threshold.
WEAK_BAND = 0.02
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


def effective_solver(solver: str, parties: int | None) -> str:
    """The rule a run of ``parties`` parties applies: greedy at P = 2 (module docstring), else
    ``solver``; ``parties`` None: not known, ``solver`` as given."""
    check_solver(solver)
    return "greedy" if parties == 2 else solver


def _accepts(rule: str, matched_cross: int, cross: int) -> bool:
    if rule == "majority":
        return 2 * matched_cross >= cross
    return matched_cross == cross


def _strong_level(solver: str, match_threshold: float | None) -> float:
    """The Dice from which a pair merges by the rule alone (-inf: every matched pair)."""
    if solver != "guarded":
        return -math.inf
    if match_threshold is None or not 0.0 <= match_threshold <= 1.0:
        raise ParameterError(
            f"solver 'guarded' needs the match threshold in [0, 1], got {match_threshold!r}"
        )
    return match_threshold + WEAK_BAND


def _weak_attach(
    a: Member,
    b: Member,
    group_a: list[Member],
    group_b: list[Member],
    group_of: dict[Member, int],
    linked: dict[Member, dict[Member, float]],
) -> bool:
    """Weak-band pair of ``guarded``: a lone record whose matched pairs all lead into the other group."""
    if (len(group_a) == 1) == (len(group_b) == 1):
        return False
    lone, other = (a, b) if len(group_a) == 1 else (b, a)
    target = group_of[other]
    return all(group_of[m] == target for m in linked[lone])


def solve_groups(
    pairs: Iterable[tuple[int, int, int, int, float]],
    min_parties: int,
    solver: str = DEFAULT_SOLVER,
    match_threshold: float | None = None,
    parties: int | None = None,
) -> list[Group]:
    """Groups from matched pairs (see the module docstring for the rules and tie-breaks).

    ``match_threshold`` (the run's s_t) is needed by the ``guarded`` rule only. ``parties``: the
    run's number of parties P (at P = 2 every rule is greedy); None when not known (the rule as
    named).
    """
    check_solver(solver)
    strong = _strong_level(solver, match_threshold)
    solver = effective_solver(solver, parties)
    if solver == "greedy":
        strong = -math.inf
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
    for sim, a, b in edges:
        ga, gb = group_of[a], group_of[b]
        if ga == gb:
            continue
        if {p for p, _ in members[ga]} & {p for p, _ in members[gb]}:
            continue
        if sim < strong and not _weak_attach(a, b, members[ga], members[gb], group_of, linked):
            continue
        if solver in ("majority", "weakest-link"):
            cross = [(x, y) for x in members[ga] for y in members[gb]]
            matched = sum(1 for x, y in cross if y in linked[x])
            if not _accepts(solver, matched, len(cross)):
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
