"""CVPL measures on top of the engine: progressive lower bounds, calibration, feature attribution.

Progressive blocking (CVPL Theorem). For each record x, the best similarity found after levels
lambda_1..lambda_i is the maximum over the targets examined so far, which is a subset of D'; so the
existential linkage rate it gives is a lower bound of the unblocked CVPL-LR at every tau, available
at any time ("anytime"), and it is monotone non-decreasing as levels are added. When the levels are
nested, each level's own rate equals this bound up to rounding.

Calibration. tau at false-positive level alpha is the least threshold that at most a share alpha of
sampled non-match similarities reaches. Pair-level: uniform pairs from the candidate pairs of the
blocks (true pairs excluded when the truth is known). Record-level (needs the truth): each record's
best non-match similarity, from the same top-2 search as CVPL.

Attribution. With unit-free PCA scores p = C (z - mu), the cosine of a linked pair splits exactly
into per-feature terms: cos = sum_j (z_x - mu)_j (C^T p_y)_j / (|p_x| |p_y|). Summing the terms of
each attribute's feature columns gives its contribution to the similarity that made the record
linkable; averaged over linked records and divided by the mean similarity, a share. Terms can be
negative (an attribute that pulls the pair apart).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from party.audit.cvpl.bitrisk import rates_from_top
from party.audit.cvpl.engine import DEFAULT_CHUNK, Kernel, blockwise_top, group_blocks
from party.audit.cvpl.vectorize import FeatureSpace, PcaModel
from party.audit.stats import Rate


@dataclass(frozen=True)
class ProgressiveStep:
    """Lower bounds after ``level + 1`` levels: rates per tau, and the running best per record."""

    level: int
    linkage_rate: list[Rate]
    top1_precision: list[Rate] | None
    best: np.ndarray
    index: np.ndarray
    level_best: np.ndarray
    level_index: np.ndarray
    level_second: np.ndarray | None
    level_candidates: np.ndarray
    level_pairs: int


def progressive_bounds(
    kernel: Kernel,
    levels_keys: Sequence[tuple[np.ndarray, np.ndarray]],
    taus: np.ndarray,
    truth: np.ndarray | None = None,
    *,
    chunk: int = DEFAULT_CHUNK,
    top2: bool | Sequence[bool] = False,
) -> Iterator[ProgressiveStep]:
    """Yield anytime lower bounds of CVPL-LR(tau) after each blocking level, in order.

    ``top2`` (one flag, or one per level) asks for second-best similarities too (for DCR/NNDR and
    record-level calibration), which costs an extra pass over each similarity chunk.
    """
    best: np.ndarray | None = None
    index: np.ndarray | None = None
    for i, (skeys, tkeys) in enumerate(levels_keys):
        want2 = top2 if isinstance(top2, bool) else bool(top2[i])
        top = blockwise_top(kernel, skeys, tkeys, chunk=chunk, top2=want2)
        if best is None or index is None:
            best, index = top.best.copy(), top.index.copy()
        else:
            better = top.best > best
            better |= np.isnan(best) & ~np.isnan(top.best)
            best = np.where(better, top.best, best)
            index = np.where(better, top.index, index)
        lr, prec, _ = rates_from_top(best, index, taus, truth)
        yield ProgressiveStep(
            i,
            lr,
            prec,
            best,
            index,
            top.best,
            top.index,
            top.second,
            top.candidates,
            top.pairs_compared,
        )


def sample_block_pairs(
    source_keys: np.ndarray, target_keys: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """n candidate pairs drawn uniformly (with replacement) from all within-block pairs."""
    blocks = list(group_blocks(source_keys, target_keys))
    if not blocks:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    sizes = np.array([len(s) * len(t) for s, t in blocks], dtype=np.float64)
    chosen = rng.choice(len(blocks), size=n, p=sizes / sizes.sum())
    src = np.empty(n, dtype=np.int64)
    tgt = np.empty(n, dtype=np.int64)
    for b in np.unique(chosen).tolist():
        where = np.flatnonzero(chosen == b)
        s, t = blocks[b]
        src[where] = s[rng.integers(0, len(s), len(where))]
        tgt[where] = t[rng.integers(0, len(t), len(where))]
    return src, tgt


def threshold_at_fpr(nonmatch: np.ndarray, fpr: float) -> float:
    """Least tau with share(nonmatch >= tau) <= fpr (NaNs ignored)."""
    v = np.sort(nonmatch[np.isfinite(nonmatch)])[::-1]
    if not v.size:
        return float("nan")
    m = int(np.floor(fpr * v.size))
    if m >= v.size:
        return float(v[-1])
    return float(np.nextafter(v[m], np.inf))


@dataclass(frozen=True)
class Calibration:
    """Calibrated thresholds at a false-positive level, with the sample sizes behind them."""

    fpr: float
    pair_tau: float
    pair_samples: int
    record_tau: float | None
    record_samples: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "fpr": self.fpr,
            "pair_tau": self.pair_tau,
            "pair_samples": self.pair_samples,
            "record_tau": self.record_tau,
            "record_samples": self.record_samples,
        }


def calibrate(
    kernel: Kernel,
    source_keys: np.ndarray,
    target_keys: np.ndarray,
    fpr: float,
    *,
    truth: np.ndarray | None = None,
    top_best: np.ndarray | None = None,
    top_index: np.ndarray | None = None,
    top_second: np.ndarray | None = None,
    samples: int = 100_000,
    seed: int = 0,
) -> Calibration:
    """Pair-level (and, with truth and top-2, record-level) threshold at false-positive ``fpr``."""
    rng = np.random.default_rng(seed)
    src, tgt = sample_block_pairs(source_keys, target_keys, samples, rng)
    if truth is not None:
        keep = tgt != truth[src]
        src, tgt = src[keep], tgt[keep]
    sims = np.asarray(kernel.pairs(src, tgt), dtype=np.float64) if len(src) else np.zeros(0)
    pair_tau = threshold_at_fpr(sims, fpr)
    record_tau = None
    record_n = 0
    if (
        truth is not None
        and top_best is not None
        and top_index is not None
        and top_second is not None
    ):
        nonmatch = np.where(top_index == truth, top_second, top_best)
        record_n = int(np.isfinite(nonmatch).sum())
        record_tau = threshold_at_fpr(nonmatch, fpr)
    return Calibration(fpr, pair_tau, len(sims), record_tau, record_n)


@dataclass(frozen=True)
class Attribution:
    """Mean per-attribute contribution to the similarity of linked records, and shares."""

    attributes: tuple[str, ...]
    is_qi: tuple[bool, ...]
    linked: int
    mean_similarity: float
    contribution: np.ndarray
    share: np.ndarray

    @property
    def non_qi_share(self) -> float:
        return float(sum(s for s, q in zip(self.share, self.is_qi, strict=True) if not q))

    def to_dict(self) -> dict[str, Any]:
        return {
            "linked_records": self.linked,
            "mean_similarity": self.mean_similarity,
            "attributes": {
                a: {"qi": q, "contribution": float(c), "share": float(s)}
                for a, q, c, s in zip(
                    self.attributes, self.is_qi, self.contribution, self.share, strict=True
                )
            },
            "non_qi_share": self.non_qi_share,
            "qi_share": 1.0 - self.non_qi_share if self.linked else 0.0,
        }


def attribute_contributions(
    space: FeatureSpace,
    model: PcaModel,
    src: np.ndarray,
    tgt: np.ndarray,
    qi: Sequence[str],
    chunk: int = 65536,
) -> Attribution:
    """Exact additive split of the cosine of pairs (src[i], tgt[i]) by attribute (module docstring)."""
    n_attr = len(space.attributes)
    owner = np.zeros((len(space.names), n_attr))
    owner[np.arange(len(space.names)), space.attribute_of] = 1.0
    total = np.zeros(n_attr)
    sim_sum = 0.0
    count = 0
    c = model.components
    for lo in range(0, len(src), chunk):
        zx = space.source[src[lo : lo + chunk]] - model.mean
        zy = space.target[tgt[lo : lo + chunk]] - model.mean
        px, py = zx @ c.T, zy @ c.T
        denom = np.linalg.norm(px, axis=1) * np.linalg.norm(py, axis=1)
        ok = denom > 0
        terms = zx[ok] * (py[ok] @ c) / denom[ok, None]
        per_attr = terms @ owner
        total += per_attr.sum(axis=0)
        sim_sum += float(per_attr.sum())
        count += int(ok.sum())
    mean_contrib = total / count if count else np.zeros(n_attr)
    mean_sim = sim_sum / count if count else 0.0
    share = mean_contrib / mean_sim if mean_sim else np.zeros(n_attr)
    is_qi = tuple(a in set(qi) for a in space.attributes)
    return Attribution(space.attributes, is_qi, count, mean_sim, mean_contrib, share)
