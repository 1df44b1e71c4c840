"""Baselines on the same data as CVPL: Fellegi-Sunter with EM-estimated m/u, DCR and NNDR.

Fellegi-Sunter (Fellegi & Sunter 1969; EM estimation after Winkler 1988 / Jaro 1989). Candidate
pairs are the pairs within the blocks of one level. Each attribute gives a binary agreement: a
categorical value agrees when equal and present; a numeric value when |a - b| <= ``tol`` standard
deviations (missing never agrees). Under conditional independence, EM on the counts of the distinct
agreement patterns estimates the match prior p and per-attribute m_j = P(agree | match), u_j =
P(agree | non-match). A pair's log-odds is log(p / (1 - p)) + sum_j w_j with w_j = log(m_j / u_j)
on agreement and log((1 - m_j) / (1 - u_j)) on disagreement; a source record is *FS-linked* when
its best pair has posterior >= 0.5 (log-odds >= 0), and correct when that pair is its true one.

DCR (distance to closest record) and NNDR (nearest-neighbour distance ratio, d1 / d2) are read off
the same top-2 search as CVPL in the projected space: d = sqrt(2 - 2 cos) between unit vectors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from party.audit.cvpl.bitrisk import rates_from_top
from party.audit.cvpl.engine import blockwise_top, group_blocks
from party.audit.cvpl.errors import CvplError
from party.audit.cvpl.table import TypedColumn
from party.audit.stats import Rate

_CLIP = 1e-6


@dataclass(frozen=True)
class EmResult:
    """EM estimates: match prior p, m and u per attribute, iterations and convergence."""

    p: float
    m: np.ndarray
    u: np.ndarray
    iterations: int
    converged: bool


def em_fellegi_sunter(
    patterns: np.ndarray,
    counts: np.ndarray,
    *,
    p0: float = 0.05,
    m0: float = 0.9,
    max_iter: int = 1000,
    tol: float = 1e-9,
) -> EmResult:
    """EM for the two-class conditional-independence model on distinct 0/1 patterns with counts.

    Initial u is the overall agreement rate (pairs are overwhelmingly non-matches). The classes
    are labelled so that the match class has the larger mean m - u.
    """
    g = np.asarray(patterns, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    total = c.sum()
    k = g.shape[1]
    u = np.clip((c @ g) / total, _CLIP, 1 - _CLIP) if total else np.full(k, 0.1)
    m = np.full(k, m0)
    m = np.maximum(m, np.minimum(u + 0.05, 1 - _CLIP))
    p = p0
    converged = False
    iterations = 0
    for step in range(1, max_iter + 1):
        iterations = step
        lm = g @ np.log(m) + (1 - g) @ np.log1p(-m)
        lu = g @ np.log(u) + (1 - g) @ np.log1p(-u)
        logit = np.log(p) - np.log1p(-p) + lm - lu
        w = 1.0 / (1.0 + np.exp(-np.clip(logit, -700, 700)))
        cw = c * w
        cn = c * (1 - w)
        p_new = float(np.clip(cw.sum() / total, _CLIP, 1 - _CLIP))
        m_new = np.clip((cw @ g) / max(cw.sum(), 1e-300), _CLIP, 1 - _CLIP)
        u_new = np.clip((cn @ g) / max(cn.sum(), 1e-300), _CLIP, 1 - _CLIP)
        delta = max(abs(p_new - p), float(np.abs(m_new - m).max()), float(np.abs(u_new - u).max()))
        p, m, u = p_new, m_new, u_new
        if delta < tol:
            converged = True
            break
    if float(np.mean(m - u)) < 0:
        p, m, u = 1 - p, u, m
    return EmResult(p, m, u, iterations, converged)


class _Agreement:
    """Binary agreement per attribute between source and target records (by index)."""

    def __init__(self, columns: Sequence[TypedColumn], tol: float) -> None:
        self.columns = list(columns)
        self.tols = []
        for col in self.columns:
            if col.kind == "numeric":
                both = np.concatenate([col.source, col.target])
                ok = both[np.isfinite(both)]
                std = float(ok.std()) if ok.size else 0.0
                self.tols.append(tol * std)
            else:
                self.tols.append(0.0)
        # categorical columns as integer codes (-1 missing) for fast comparison
        self.src: list[np.ndarray] = []
        self.tgt: list[np.ndarray] = []
        for col in self.columns:
            if col.kind == "numeric":  # float32 halves memory traffic; tolerances are coarse
                self.src.append(col.source.astype(np.float32))
                self.tgt.append(col.target.astype(np.float32))
            else:
                uniq, inv = np.unique(np.concatenate([col.source, col.target]), return_inverse=True)
                codes = inv.astype(np.int32)
                codes[np.concatenate([col.source, col.target]) == ""] = -1
                self.src.append(codes[: len(col.source)])
                self.tgt.append(codes[len(col.source) :])

    def _agree(self, j: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.columns[j].kind == "numeric":
            return np.abs(a - b) <= np.float32(self.tols[j])  # NaN (missing) compares False
        return (a == b) & (a >= 0)

    def code_matrix(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        """(len(src), len(tgt)) pattern codes: bit j set when attribute j agrees."""
        dtype = np.int32 if len(self.columns) <= 31 else np.int64
        out = np.zeros((len(src), len(tgt)), dtype=dtype)
        for j in range(len(self.columns)):
            agree = self._agree(j, self.src[j][src][:, None], self.tgt[j][tgt][None, :])
            out |= np.left_shift(agree.astype(dtype), j)
        return out

    def weight_matrix(self, src: np.ndarray, tgt: np.ndarray, w: tuple) -> np.ndarray:
        """FS log-odds of every (src, tgt) pair: prior + sum of agreement/disagreement weights."""
        prior, w_agree, w_dis, table = w
        if table is not None:
            return table[self.code_matrix(src, tgt)]
        out = np.full((len(src), len(tgt)), prior)
        for j in range(len(self.columns)):
            agree = self._agree(j, self.src[j][src][:, None], self.tgt[j][tgt][None, :])
            out += np.where(agree, w_agree[j], w_dis[j])
        return out

    def weight_pairs(self, src: np.ndarray, tgt: np.ndarray, w: tuple) -> np.ndarray:
        prior, w_agree, w_dis, _ = w
        out = np.full(len(src), prior)
        for j in range(len(self.columns)):
            out += np.where(
                self._agree(j, self.src[j][src], self.tgt[j][tgt]), w_agree[j], w_dis[j]
            )
        return out


class _WeightKernel:
    """Kernel for the blockwise engine whose 'similarity' is the FS log-odds of a pair."""

    def __init__(self, agreement: _Agreement, weights: tuple) -> None:
        self.agreement, self.weights = agreement, weights

    def prepare_target(self, tgt: np.ndarray) -> np.ndarray:
        return tgt

    def matrix(self, src: np.ndarray, prepared: np.ndarray) -> np.ndarray:
        return self.agreement.weight_matrix(src, prepared, self.weights)

    def pairs(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        return self.agreement.weight_pairs(src, tgt, self.weights)


@dataclass(frozen=True)
class FsResult:
    """Fellegi-Sunter baseline: EM estimates, FS linkage rate and top-1 precision of FS links."""

    attributes: tuple[str, ...]
    em: EmResult
    candidate_pairs: int
    linkage_rate: Rate
    precision: Rate | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "attributes": list(self.attributes),
            "p": self.em.p,
            "m": dict(zip(self.attributes, map(float, self.em.m), strict=True)),
            "u": dict(zip(self.attributes, map(float, self.em.u), strict=True)),
            "em_iterations": self.em.iterations,
            "em_converged": self.em.converged,
            "candidate_pairs": self.candidate_pairs,
            "linkage_rate": self.linkage_rate.to_dict(),
            "precision": None if self.precision is None else self.precision.to_dict(),
        }


def fellegi_sunter(
    columns: Sequence[TypedColumn],
    source_keys: np.ndarray,
    target_keys: np.ndarray,
    truth: np.ndarray | None,
    *,
    tol: float = 0.1,
    chunk: int = 1024,
    max_pairs: int = 5_000_000,
    seed: int = 0,
) -> FsResult:
    """FS baseline within the blocks given by the keys (see the module docstring).

    EM uses every candidate pair when there are at most ``max_pairs``, else a uniform sample of
    source records' block rows (memory stays O(chunk x block)).
    """
    if len(columns) > 62:
        raise ValueError("Fellegi-Sunter baseline supports at most 62 attributes")
    agreement = _Agreement(columns, tol)
    total_pairs = 0
    blocks = list(group_blocks(source_keys, target_keys))
    for s, t in blocks:
        total_pairs += len(s) * len(t)
    keep = 1.0 if total_pairs <= max_pairs else max_pairs / total_pairs
    rng = np.random.default_rng(seed)
    k = len(columns)
    acc: dict[int, int] = {}
    dense = np.zeros(1 << k, dtype=np.int64) if k <= 20 else None
    for s, t in blocks:
        if keep < 1.0:
            s = s[rng.random(len(s)) < keep]
        for lo in range(0, len(s), chunk):
            codes = agreement.code_matrix(s[lo : lo + chunk], t).reshape(-1)
            if dense is not None:
                dense += np.bincount(codes, minlength=len(dense))
                continue
            u, c = np.unique(codes, return_counts=True)
            for code, cnt in zip(u.tolist(), c.tolist(), strict=True):
                acc[code] = acc.get(code, 0) + cnt
    if dense is not None:
        codes_arr = np.flatnonzero(dense).astype(np.int64)
        counts = dense[codes_arr].astype(np.float64)
    else:
        codes_arr = np.array(sorted(acc), dtype=np.int64)
        counts = np.array([acc[c] for c in codes_arr.tolist()], dtype=np.float64)
    patterns = (codes_arr[:, None] >> np.arange(k)) & 1
    if not len(codes_arr):
        raise CvplError("Fellegi-Sunter baseline: no candidate pairs at this blocking level")
    em = em_fellegi_sunter(patterns, counts)
    w_agree = np.log(em.m) - np.log(em.u)
    w_dis = np.log1p(-em.m) - np.log1p(-em.u)
    prior = np.log(em.p) - np.log1p(-em.p)
    table = None
    if k <= 20:  # log-odds of every possible pattern, looked up by pattern code
        bits = (np.arange(1 << k, dtype=np.int64)[:, None] >> np.arange(k)) & 1
        table = prior + bits @ w_agree + (1 - bits) @ w_dis
    kernel = _WeightKernel(agreement, (prior, w_agree, w_dis, table))
    top = blockwise_top(kernel, source_keys, target_keys, chunk=chunk)
    lr, prec, _ = rates_from_top(top.best, top.index, np.array([0.0]), truth)
    return FsResult(
        tuple(c.name for c in columns),
        em,
        total_pairs,
        lr[0],
        None if prec is None else prec[0],
    )


def dcr_nndr(
    best: np.ndarray,
    second: np.ndarray,
    index: np.ndarray,
    truth: np.ndarray | None,
    ratio: float = 0.8,
) -> dict[str, Any]:
    """DCR and NNDR distributions from cosine top-2, and the share of distinct nearest neighbours."""
    d1 = np.sqrt(np.clip(2.0 - 2.0 * best, 0.0, None))
    d2 = np.sqrt(np.clip(2.0 - 2.0 * second, 0.0, None))
    ok = np.isfinite(d1)
    both = ok & np.isfinite(d2)
    nndr = np.divide(d1, d2, out=np.ones_like(d1), where=both & (d2 > 0))
    qs = (0.05, 0.25, 0.5, 0.75, 0.95)

    def quant(v: np.ndarray) -> dict[str, float] | None:
        if not v.size:
            return None
        return {
            f"q{int(q * 100):02d}": float(x) for q, x in zip(qs, np.quantile(v, qs), strict=True)
        }

    distinct = both & (nndr <= ratio)
    edges = np.linspace(0.0, 2.0, 41)  # d = sqrt(2 - 2 cos) lies in [0, 2]
    out: dict[str, Any] = {
        "dcr_histogram": {
            "edges": edges.tolist(),
            "counts": np.histogram(d1[ok], bins=edges)[0].tolist(),
        },
        "nndr_histogram": {
            "edges": np.linspace(0.0, 1.0, 21).tolist(),
            "counts": np.histogram(nndr[both], bins=np.linspace(0.0, 1.0, 21))[0].tolist(),
        },
        "dcr": quant(d1[ok]),
        "nndr": quant(nndr[both]),
        "nndr_ratio": ratio,
        "distinct_nearest": Rate(int(distinct.sum()), len(best)).to_dict(),
    }
    if truth is not None:
        correct = distinct & (index == truth) & (truth >= 0)
        out["distinct_nearest_precision"] = Rate(int(correct.sum()), int(distinct.sum())).to_dict()
    return out
