"""The operators phi (vectorisation of observable attributes) and psi (PCA projection) of CVPL.

phi maps the observable columns Q and A (never the sensitive S) of D and D' to one numeric feature
space with the same columns on both sides: a numeric column is z-scored (missing -> 0, the mean); a
categorical column with at most ``max_onehot`` distinct values is one-hot encoded (missing -> all
zeros), a larger one is frequency-encoded (share of the value, then z-scored). Statistics (means,
deviations, categories, frequencies) come from the fit data chosen by the strategy below, so the
columns and their meaning are identical for D and D'.

psi is PCA by eigendecomposition of the feature covariance (d x d, d small), fitted on D and D'
together ("joint", the default), on D only ("source"), on D' only ("target"), or given ("prefitted",
a ``PcaModel`` whose feature names must match). k is given, or the smallest k reaching a share of
explained variance. Component signs are fixed (largest |loading| positive) for reproducibility.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from party.audit.cvpl.errors import CvplError
from party.audit.cvpl.table import TypedColumn

FIT_STRATEGIES = ("joint", "source", "target", "prefitted")


@dataclass(frozen=True)
class FeatureSpace:
    """phi's output: feature matrices of D and D' and which attribute each feature column encodes."""

    names: tuple[str, ...]
    attribute_of: np.ndarray  # (d,) index into ``attributes``
    attributes: tuple[str, ...]
    source: np.ndarray
    target: np.ndarray


def _fit_rows(strategy: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if strategy == "source":
        return a
    if strategy == "target":
        return b
    return np.concatenate([a, b])


def vectorize(
    columns: Sequence[TypedColumn], strategy: str = "joint", max_onehot: int = 32
) -> FeatureSpace:
    """phi: feature matrices with consistent columns for D (source) and D' (target)."""
    if strategy not in FIT_STRATEGIES:
        raise CvplError(f"parameter fit: expected one of {FIT_STRATEGIES}, got {strategy!r}")
    if not columns:
        raise CvplError("no observable columns to vectorise")
    stats_from = "joint" if strategy == "prefitted" else strategy
    names: list[str] = []
    owner: list[int] = []
    src_parts: list[np.ndarray] = []
    tgt_parts: list[np.ndarray] = []
    for ai, col in enumerate(columns):
        fit = _fit_rows(stats_from, col.source, col.target)
        if col.kind == "numeric":
            s, t = _zscore(col.source, col.target, fit)
            src_parts.append(s[:, None])
            tgt_parts.append(t[:, None])
            names.append(col.name)
            owner.append(ai)
            continue
        cats, counts = np.unique(fit[fit != ""], return_counts=True)
        if len(cats) <= max_onehot:
            for c in cats.tolist():
                src_parts.append((col.source == c).astype(np.float64)[:, None])
                tgt_parts.append((col.target == c).astype(np.float64)[:, None])
                names.append(f"{col.name}={c}")
                owner.append(ai)
        else:
            share = counts / max(1, counts.sum())

            def freq(
                v: np.ndarray, cats: np.ndarray = cats, share: np.ndarray = share
            ) -> np.ndarray:
                pos = np.minimum(np.searchsorted(cats, v), len(cats) - 1)
                return np.where((cats[pos] == v) & (v != ""), share[pos], np.nan)

            fs, ft = freq(col.source), freq(col.target)
            s, t = _zscore(fs, ft, _fit_rows(stats_from, fs, ft))
            src_parts.append(s[:, None])
            tgt_parts.append(t[:, None])
            names.append(f"{col.name}#freq")
            owner.append(ai)
    n_s, n_t = len(columns[0].source), len(columns[0].target)
    src = np.hstack(src_parts) if src_parts else np.zeros((n_s, 0))
    tgt = np.hstack(tgt_parts) if tgt_parts else np.zeros((n_t, 0))
    return FeatureSpace(
        tuple(names), np.array(owner, dtype=np.int64), tuple(c.name for c in columns), src, tgt
    )


def _zscore(a: np.ndarray, b: np.ndarray, fit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ok = fit[np.isfinite(fit)]
    mean = float(ok.mean()) if ok.size else 0.0
    std = float(ok.std()) if ok.size else 0.0
    std = std if std > 0 else 1.0
    za = np.nan_to_num((a - mean) / std, nan=0.0)
    zb = np.nan_to_num((b - mean) / std, nan=0.0)
    return za, zb


@dataclass(frozen=True)
class PcaModel:
    """psi: centre ``mean`` and ``components`` (k x d, orthonormal rows) of the feature space."""

    mean: np.ndarray
    components: np.ndarray
    explained_variance_ratio: np.ndarray
    feature_names: tuple[str, ...]

    @property
    def k(self) -> int:
        return int(self.components.shape[0])

    def project(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) @ self.components.T

    def to_json(self) -> dict[str, Any]:
        """JSON form: {"feature_names", "mean", "components", "explained_variance_ratio"}.

        Feature names of one-hot columns contain category labels, so a saved model is as
        sensitive as the category lists of the data; keep it with the data.
        """
        return {
            "feature_names": list(self.feature_names),
            "mean": self.mean.tolist(),
            "components": self.components.tolist(),
            "explained_variance_ratio": self.explained_variance_ratio.tolist(),
        }

    @classmethod
    def from_json(cls, doc: Any, source: str = "PCA model") -> PcaModel:
        """Inverse of to_json; CvplError naming ``source`` when the document is malformed."""
        try:
            names = tuple(str(n) for n in doc["feature_names"])
            mean = np.asarray(doc["mean"], dtype=np.float64)
            comps = np.asarray(doc["components"], dtype=np.float64)
            ratio = np.asarray(doc["explained_variance_ratio"], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            raise CvplError(f"{source}: not a CVPL PCA model (fields or types wrong)") from None
        d = len(names)
        if (
            mean.shape != (d,)
            or comps.ndim != 2
            or comps.shape[1] != d
            or not 1 <= comps.shape[0] <= d
            or ratio.shape != (comps.shape[0],)
            or not (np.all(np.isfinite(mean)) and np.all(np.isfinite(comps)))
        ):
            raise CvplError(f"{source}: PCA model arrays have inconsistent shapes")
        return cls(mean, comps, ratio, names)


def fit_pca(
    x: np.ndarray,
    feature_names: Sequence[str],
    n_components: int | None = None,
    variance: float = 0.95,
) -> PcaModel:
    """PCA of the rows of x: k = n_components, or the least k explaining ``variance``."""
    if x.shape[0] < 2 or x.shape[1] == 0:
        raise CvplError("PCA needs at least 2 records and 1 feature")
    if n_components is not None and not 1 <= n_components <= x.shape[1]:
        raise CvplError(f"parameter n_components: must lie in 1..{x.shape[1]}")
    if not 0 < variance <= 1:
        raise CvplError("parameter variance: must lie in (0, 1]")
    mean = x.mean(axis=0)
    xc = x - mean
    cov = (xc.T @ xc) / (x.shape[0] - 1)
    vals, vecs = np.linalg.eigh(cov)
    order = np.argsort(vals)[::-1]
    vals = np.clip(vals[order], 0.0, None)
    vecs = vecs[:, order]
    total = vals.sum()
    ratio = vals / total if total > 0 else np.full(len(vals), 1.0 / len(vals))
    if n_components is None:
        k = int(np.searchsorted(np.cumsum(ratio), variance - 1e-12) + 1)
        k = min(max(k, 1), x.shape[1])
    else:
        k = n_components
    comps = vecs[:, :k].T.copy()
    flip = np.sign(comps[np.arange(k), np.abs(comps).argmax(axis=1)])
    comps *= np.where(flip == 0, 1.0, flip)[:, None]
    return PcaModel(mean, comps, ratio[:k], tuple(feature_names))


def project_pair(
    space: FeatureSpace,
    strategy: str = "joint",
    n_components: int | None = None,
    variance: float = 0.95,
    model: PcaModel | None = None,
) -> tuple[np.ndarray, np.ndarray, PcaModel]:
    """psi applied to D and D' with the chosen fit strategy; returns both projections and the model."""
    if strategy == "prefitted":
        if model is None:
            raise CvplError("parameter fit: 'prefitted' needs a PCA model")
        if tuple(model.feature_names) != space.names:
            raise CvplError("parameter fit: the prefitted PCA model has different feature columns")
    elif strategy in FIT_STRATEGIES:
        model = fit_pca(
            _fit_rows(strategy, space.source, space.target), space.names, n_components, variance
        )
    else:
        raise CvplError(f"parameter fit: expected one of {FIT_STRATEGIES}, got {strategy!r}")
    return model.project(space.source), model.project(space.target), model
