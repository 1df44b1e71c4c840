"""In-process run of target "any" in the segment mode: segments, pair counts, pairwise ring, groups.

The steps a networked run performs, with the parties as objects in one process (see
docs/protocol.md, "Target any"):

1. Every party draws pseudonyms and cuts its filters into P segments; party i receives segment i
   of every party's records (with the pseudonyms and block digests).
2. Party i computes, for every pair of parties (a, b), the candidate pairs and their c_i, and
   keeps the pairs passing its segment filter (``party.protocol.pairwise``).
3. Ring per pair of parties: the initiator (party 0) masks, every party adds its c_i (and its
   records' 1-bits for the pairs it owns), the initiator unmasks; pairs kept by every party only.
4. The initiator classifies (2c / x >= s_t), solves the groups (``party.protocol.solver``) and
   sends each party, per group it is in, the linkage id, size, parties, similarity and its own
   record's pseudonym.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from party.encoding.bits import popcount_rows, slice_bits
from party.protocol.classify import dice, linkage_label
from party.protocol.errors import ProtocolError
from party.protocol.pairwise import pair_candidates, segment_pair_counts
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable, validate_table
from party.protocol.ring import add_mod64, random_masks, sub_mod64
from party.protocol.segments import new_pseudonyms
from party.protocol.solver import Group, solve_groups


@dataclass(frozen=True)
class GroupRow:
    """One record of one party in a solved group, as written to its matches.csv (target any)."""

    linkage_id: str
    similarity: float
    record_id: str
    group_size: int
    parties: tuple[str, ...]


@dataclass
class AnyRunStats:
    """Counts of one run of target any (all summed over the pairs of parties)."""

    candidate_pairs: int = 0
    pairs_summed: int = 0  # kept by every party's segment filter
    matched_pairs: int = 0  # 2c / x >= s_t
    groups: int = 0


@dataclass
class AnyRun:
    """Outcome: per party its group rows; the groups and matched pairs by pseudonym; the pseudonyms."""

    matches: list[list[GroupRow]]
    groups: list[Group]
    matched_pairs: list[tuple[int, int, int, int, float]]
    pseudonyms: list[np.ndarray]
    stats: AnyRunStats = field(default_factory=AnyRunStats)


def _party_pairs(parties: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(parties) for b in range(a + 1, parties)]


def _pair_sums(
    params: ProtocolParameters,
    tables: Sequence[EncodedTable],
    pseudonyms: list[np.ndarray],
    segments: list[list[np.ndarray]],
    a: int,
    b: int,
    random_bytes: Callable[[int], bytes],
    stats: AnyRunStats,
) -> tuple[np.ndarray, np.ndarray]:
    """(pair rows kept by every party, their Dice) for parties a < b, via the masked ring."""
    p = params.party_count
    cap = params.max_block_size
    rows = pair_candidates(
        tables[a].block_digests, tables[b].block_digests, pseudonyms[a], pseudonyms[b], cap
    )
    stats.candidate_pairs += int(rows.shape[0])
    counts, kept = [], np.ones(rows.shape[0], dtype=bool)
    for i in range(p):  # party i holds segment i of both parties' records
        c_i, kept_i = segment_pair_counts(
            segments[a][i], segments[b][i], rows, params.segment_threshold
        )
        counts.append(c_i)
        kept &= kept_i
    rows = rows[kept]
    m = int(rows.shape[0])
    stats.pairs_summed += m
    mask_c, mask_x = random_masks(m, random_bytes), random_masks(m, random_bytes)
    c_masked, x_masked = mask_c, mask_x
    for i in range(p):  # ring order 0 -> 1 -> ... -> P-1 -> 0
        c_masked = add_mod64(c_masked, counts[i][kept])
        if i in (a, b):
            own = popcount_rows(tables[i].filters[rows[:, 0 if i == a else 1]])
            x_masked = add_mod64(x_masked, own.astype(np.uint64))
    c = sub_mod64(c_masked, mask_c).astype(np.int64)
    x = sub_mod64(x_masked, mask_x).astype(np.int64)
    return rows, dice(2, c, x)


def run_any_in_process(
    tables: Sequence[EncodedTable],
    params: ProtocolParameters,
    *,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> AnyRun:
    """Run target "any" for P in-process parties (see the module docstring)."""
    if params.target != "any":
        raise ProtocolError(f"run_any_in_process needs target 'any', got {params.target!r}")
    p = params.party_count
    if len(tables) != p:
        raise ProtocolError(f"{len(tables)} tables for {p} parties")
    for j, t in enumerate(tables):
        validate_table(t, params.filter_bits, f"party {j}'s table")
    pseudonyms = [new_pseudonyms(len(t.record_ids), random_bytes) for t in tables]
    width = params.segment_bits
    segments = [  # segments[j][i]: segment i of party j's records (what party j sends to party i)
        [slice_bits(t.filters, i * width, (i + 1) * width) for i in range(p)] for t in tables
    ]
    stats = AnyRunStats()
    matched: list[tuple[int, int, int, int, float]] = []
    for a, b in _party_pairs(p):
        rows, similarity = _pair_sums(
            params, tables, pseudonyms, segments, a, b, random_bytes, stats
        )
        hit = similarity >= params.match_threshold
        ka = pseudonyms[a][rows[hit, 0]].tolist()
        kb = pseudonyms[b][rows[hit, 1]].tolist()
        matched.extend(
            (a, x, b, y, s) for x, y, s in zip(ka, kb, similarity[hit].tolist(), strict=True)
        )
    stats.matched_pairs = len(matched)
    groups = solve_groups(
        matched, params.min_parties, params.solver, params.match_threshold, parties=p
    )
    stats.groups = len(groups)
    return AnyRun(
        matches=group_rows(groups, params, tables, pseudonyms),
        groups=groups,
        matched_pairs=matched,
        pseudonyms=pseudonyms,
        stats=stats,
    )


def group_rows(
    groups: Sequence[Group],
    params: ProtocolParameters,
    tables: Sequence[EncodedTable],
    pseudonyms: Sequence[np.ndarray],
) -> list[list[GroupRow]]:
    """Per party, one GroupRow per group it is in (its own record id only), by linkage id."""
    rows: list[list[GroupRow]] = [[] for _ in tables]
    lookup = [dict(zip(ps.tolist(), range(len(ps)), strict=True)) for ps in pseudonyms]
    for gid, g in enumerate(groups):
        names = tuple(params.parties[q] for q in g.parties)
        for q, key in g.members:
            rid = tables[q].record_ids[lookup[q][key]]
            rows[q].append(GroupRow(linkage_label(gid), g.similarity, rid, len(g.members), names))
    return rows
