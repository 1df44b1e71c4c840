"""Quality of target "any": pairwise precision/recall/F1 and exact-group precision/recall/F1.

Groups are lists of (party index, record id) (e.g. ``metrics.sets_from_matches`` of every party's
rows). True pairs: every two records of one entity at two different parties. Predicted pairs: every
two records placed in one group. Exact groups: a predicted group is correct when its record set
equals the full record set of one entity; the true groups are the entities with records at at
least ``min_parties`` parties. Precision is 1.0 with nothing predicted, recall 1.0 with nothing to
find, F1 0.0 when both are 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations

from party.synthetic.metrics import MetricsError
from party.synthetic.truth import GroundTruth


@dataclass(frozen=True)
class Scores:
    """Precision, recall and F1 of one kind of prediction, with the counts behind them."""

    predicted: int
    correct: int
    true: int
    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class AnyQuality:
    """Pairwise and exact-group scores of one linkage."""

    pairwise: Scores
    groups: Scores


def _scores(predicted: int, correct: int, true: int) -> Scores:
    precision = correct / predicted if predicted else 1.0
    recall = correct / true if true else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return Scores(predicted, correct, true, precision, recall, f1)


def evaluate_groups(
    groups: Iterable[Sequence[tuple[int, str]]], truth: GroundTruth, min_parties: int = 2
) -> AnyQuality:
    """Pairwise and exact-group quality of groups of (party, record id) against the truth."""
    lookups = [truth.lookup(p) for p in range(truth.parties)]
    members: dict[int, set[tuple[int, str]]] = {}
    for p in range(truth.parties):
        for rid, ent in lookups[p].items():
            if ent >= 0:
                members.setdefault(ent, set()).add((p, rid))
    true_pairs = sum(
        1
        for recs in members.values()
        for (pa, _), (pb, _) in combinations(sorted(recs), 2)
        if pa != pb
    )
    true_groups = sum(1 for recs in members.values() if len({p for p, _ in recs}) >= min_parties)
    pairs = pairs_ok = groups_n = groups_ok = 0
    for group in groups:
        ents = []
        for party, rid in group:
            if not 0 <= party < truth.parties or rid not in lookups[party]:
                raise MetricsError(
                    f"a record id of party {party} in the groups is not in the truth"
                )
            ents.append(lookups[party][rid])
        groups_n += 1
        for i, j in combinations(range(len(group)), 2):
            pairs += 1
            pairs_ok += ents[i] == ents[j] >= 0
        if ents and ents[0] >= 0 and set(map(tuple, group)) == members.get(ents[0]):
            groups_ok += 1
    return AnyQuality(
        _scores(pairs, pairs_ok, true_pairs), _scores(groups_n, groups_ok, true_groups)
    )
