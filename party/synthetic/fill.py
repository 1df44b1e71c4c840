"""Filter fill and Dice separation of encodings, and schemas with scaled per-feature bit budgets.

``scale_bits_per_feature`` multiplies every ``bitsPerFeature`` of a schema object (the JSON dict) by
one factor (rounded, at least 1), so the ratios between fields stay and the expected fill of an
l-bit filter moves as ``1 - exp(-budget / l)`` (budget = the sum of the fields' positions).

``separation`` measures, on P parties' encodings and their ground truth:

- ``fill``: the mean share of 1-bits of every party's filters;
- true pairs: the full-filter Dice of every two records of one true set (an entity with a record at
  every party) at two parties, its quantiles and how many fall below each threshold;
- unrelated pairs: the Dice of ``sample`` random pairs (a record of party 0, one of party 1, of
  different entities), its upper quantiles, and the share of them whose segment Dice reaches s_m
  at every one of the P segments (segment i of a pair: 2 c_i / (x_a,i + x_b,i), the P = 2 rule of
  ``party.protocol.kernel``): with no blocking at P = 2, that share of the n_0 * n_1 pairs survives
  the segment filter.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from party.encoding.bits import popcount_rows, segments
from party.encoding.records import EncodedRecords
from party.synthetic.blocking_recall import pair_dice, true_set_rows
from party.synthetic.truth import GroundTruth

THRESHOLDS = (0.70, 0.75, 0.80, 0.85, 0.90)
SEGMENT_THRESHOLDS = (0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)
TRUE_QUANTILES = (0.0, 0.01, 0.05, 0.5)
UNRELATED_QUANTILES = (0.5, 0.99, 0.999, 1.0)


def scale_bits_per_feature(schema: dict[str, Any], factor: float) -> dict[str, Any]:
    """A copy of a schema object with every ``bitsPerFeature`` multiplied by ``factor``."""
    if not factor > 0:
        raise ValueError(f"the bit-budget scale factor must be positive, got {factor}")
    out = copy.deepcopy(schema)
    for feature in out.get("features", []):
        strategy = feature.get("strategy", {})
        if "bitsPerFeature" in strategy:
            strategy["bitsPerFeature"] = max(1, round(strategy["bitsPerFeature"] * factor))
    return out


def separation(
    tables: Sequence[EncodedRecords], truth: GroundTruth, sample: int = 200_000, seed: int = 1
) -> dict[str, Any]:
    """Fill, true-pair and unrelated-pair Dice figures (module docstring)."""
    bits = tables[0].filter_bits
    parties = len(tables)
    ones = sum(int(popcount_rows(t.filters).sum()) for t in tables)
    fill = ones / (bits * sum(len(t) for t in tables))
    rows = true_set_rows(tables, truth)
    rows = rows[(rows >= 0).all(axis=1)]
    true = np.concatenate(
        [
            pair_dice(tables[a].filters[rows[:, a]], tables[b].filters[rows[:, b]])
            for a in range(parties)
            for b in range(a + 1, parties)
        ]
    )
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(tables[0]), sample)
    ib = rng.integers(0, len(tables[1]), sample)
    look_a, look_b = truth.lookup(0), truth.lookup(1)
    ent_a = np.array([look_a.get(tables[0].record_ids[i], -1) for i in ia.tolist()])
    ent_b = np.array([look_b.get(tables[1].record_ids[i], -2) for i in ib.tolist()])
    keep = ent_a != ent_b
    fa, fb = tables[0].filters[ia[keep]], tables[1].filters[ib[keep]]
    unrelated = pair_dice(fa, fb)
    seg = np.stack(
        [
            pair_dice(x, y)
            for x, y in zip(segments(fa, bits, parties), segments(fb, bits, parties), strict=True)
        ]
    )
    worst = seg.min(axis=0)
    return {
        "fill": round(fill, 4),
        "true_pairs": int(true.size),
        "true_dice_quantiles": {
            repr(q): round(float(np.quantile(true, q)), 4) for q in TRUE_QUANTILES
        },
        "true_pairs_below": {repr(t): int((true < t).sum()) for t in THRESHOLDS},
        "unrelated_pairs": int(keep.sum()),
        "unrelated_dice_quantiles": {
            repr(q): round(float(np.quantile(unrelated, q)), 4) for q in UNRELATED_QUANTILES
        },
        "unrelated_at_or_above": {repr(t): float((unrelated >= t).mean()) for t in THRESHOLDS},
        "unrelated_survive_segment_filter": {
            repr(s): float((worst >= s).mean()) for s in SEGMENT_THRESHOLDS
        },
        "all_pairs_0_1": len(tables[0]) * len(tables[1]),
    }
