"""The plaintext oracle of target "any": pairwise Dice on full filters, then the group solver.

An independent reference written again from docs/protocol.md ("Target any"): it imports none of the
engine's blocking, pair, Dice or solver code (``pairwise``, ``blocks``, ``classify``, ``solver``).

- Candidate pairs of parties a < b: a record of a and a record of b sharing a non-zero digest (any
  column). No sub-blocking: the oracle refuses a ``max_block_size``.
- Dice of a pair = ``2 * c / x`` as Python floats (c = common 1-bits of the full filters, x = the
  sum of their 1-bits; 0 when x = 0); matched iff >= s_t.
- Groups: pairs by (-Dice, smaller (party, key) end, larger end); a pair merges its two groups
  unless they are one group, share a party, or the rule rejects: "greedy" never, "majority" unless
  at least half the cross pairs are matched, "weakest-link" unless all are; "guarded" merges as
  greedy when Dice >= s_t + 0.02, and below that only a lone record into a group of 2+ that holds
  every record the lone one is matched with (never two lone records, never two groups); in a run of
  two parties (``parties`` = 2) that weak band does not apply: "guarded" merges as greedy there.
  Similarity = mean Dice
  of the matched internal pairs (``math.fsum``). Groups smaller than min_parties are dropped; the
  rest are ordered by their smallest (party, key).

Keys default to the row index; pass the run's pseudonyms to reproduce a run's tie-breaks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from party.protocol.errors import ProtocolError
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable


@dataclass(frozen=True)
class OracleGroup:
    """A group: (party, row index) members by increasing party, and its similarity."""

    members: tuple[tuple[int, int], ...]
    similarity: float


def _as_ints(filters: np.ndarray) -> list[int]:
    return [int.from_bytes(np.asarray(r, dtype="<u8").tobytes(), "little") for r in filters]


def oracle_pairs(
    tables: Sequence[EncodedTable], params: ProtocolParameters
) -> list[tuple[int, int, int, int, float]]:
    """Every matched pair (party a, row, party b, row, Dice), a < b, on full filters."""
    if params.max_block_size is not None:
        raise ProtocolError("oracle_pairs does not sub-block: use max_block_size None")
    bits = [_as_ints(t.filters) for t in tables]
    blocks = []
    for t in tables:
        by_digest: dict[int, set[int]] = {}
        for row, values in enumerate(np.asarray(t.block_digests).tolist()):
            for v in values:
                if v:
                    by_digest.setdefault(v, set()).add(row)
        blocks.append(by_digest)
    out = []
    for a in range(len(tables)):
        for b in range(a + 1, len(tables)):
            pairs = set()
            for digest, rows_a in blocks[a].items():
                for ra in rows_a:
                    for rb in blocks[b].get(digest, ()):
                        pairs.add((ra, rb))
            for ra, rb in sorted(pairs):
                fa, fb = bits[a][ra], bits[b][rb]
                x = fa.bit_count() + fb.bit_count()
                d = 0.0 if x == 0 else 2 * (fa & fb).bit_count() / x
                if d >= params.match_threshold:
                    out.append((a, ra, b, rb, d))
    return out


def oracle_groups(
    pairs: Sequence[tuple[int, int, int, int, float]],
    min_parties: int,
    solver: str,
    keys: Sequence[np.ndarray | Sequence[int]] | None = None,
    match_threshold: float | None = None,
    parties: int | None = None,
) -> list[OracleGroup]:
    """Groups of (party, row) built from matched pairs by the documented rule (see module doc);
    ``parties``: the run's number of parties (None: not known, the weak band applies)."""
    if solver not in ("greedy", "majority", "weakest-link", "guarded"):
        raise ProtocolError(f"oracle_groups: unknown solver {solver!r}")
    weak_below = -math.inf
    if solver == "guarded":
        if match_threshold is None:
            raise ProtocolError("oracle_groups: solver 'guarded' needs the match threshold")
        if parties != 2:
            weak_below = match_threshold + 0.02

    def key(party: int, row: int) -> tuple[int, int]:
        return (party, row if keys is None else int(keys[party][row]))

    sim: dict[frozenset[tuple[int, int]], float] = {}
    partners: dict[tuple[int, int], set[tuple[int, int]]] = {}
    visit = []
    for a, ra, b, rb, d in pairs:
        u, v = sorted([key(a, ra), key(b, rb)])
        sim[frozenset((u, v))] = d
        partners.setdefault(u, set()).add(v)
        partners.setdefault(v, set()).add(u)
        visit.append((-d, u, v))
    visit.sort()
    groups: list[set[tuple[int, int]]] = [
        {m} for m in sorted({m for _, u, v in visit for m in (u, v)})
    ]
    for negd, u, v in visit:
        gu = next(g for g in groups if u in g)
        gv = next(g for g in groups if v in g)
        if gu is gv or {p for p, _ in gu} & {p for p, _ in gv}:
            continue
        if -negd < weak_below:
            if len(gu) == 1 and len(gv) >= 2:
                lone, rest = u, gv
            elif len(gv) == 1 and len(gu) >= 2:
                lone, rest = v, gu
            else:
                continue
            if not partners[lone] <= rest:
                continue
        links = [frozenset((x, y)) in sim for x in gu for y in gv]
        if solver == "majority" and 2 * sum(links) < len(links):
            continue
        if solver == "weakest-link" and not all(links):
            continue
        groups.remove(gv)
        gu |= gv
    row_of = {}
    if keys is not None:
        for party, ks in enumerate(keys):
            for row, k in enumerate(ks):
                row_of[(party, int(k))] = row
    out = []
    for g in sorted(
        (sorted(g) for g in groups if len(g) >= max(2, min_parties)), key=lambda g: g[0]
    ):
        inner = [
            sim[frozenset((x, y))]
            for i, x in enumerate(g)
            for y in g[i + 1 :]
            if frozenset((x, y)) in sim
        ]
        members = tuple((p, row_of[(p, k)] if keys is not None else k) for p, k in g)
        out.append(OracleGroup(members, math.fsum(inner) / len(inner)))
    return out
