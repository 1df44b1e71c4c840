"""The tabular CVPL pipeline: CVPL = tau . s . psi . phi . B_lambda over all levels and thresholds.

``assess_tables(D, D', config)`` types the role columns, builds the blocking keys of every level
(B_lambda), vectorises Q and A (phi; S is never used), projects with PCA (psi), and runs one top-2
search per level with cosine similarity (s). All thresholds (tau) are applied to those searches
afterwards, which gives the risk surface R(lambda, tau), the progressive anytime lower bounds, the
calibrated thresholds, DCR/NNDR, and the headline numbers at one (level, tau). Fellegi-Sunter and
feature attribution run at the headline level.

Assumptions: the release D' is compared against the original D as an attacker holding D would; the
ground truth (equal ids) is only used to score precision and recall, never to find links. Results
are aggregates (counts, rates, quantiles); no record value leaves this module.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.audit.cvpl.baselines import FsResult, dcr_nndr, fellegi_sunter
from party.audit.cvpl.bitrisk import check_taus, rates_from_top, structural_recall
from party.audit.cvpl.blocking import (
    BlockingLevel,
    adapt_levels,
    block_keys,
    check_nested,
    check_rule,
    default_levels,
    mostly_missing,
    subblock,
)
from party.audit.cvpl.engine import DEFAULT_CHUNK, CosineKernel, blockwise_top
from party.audit.cvpl.errors import CvplError
from party.audit.cvpl.measures import (
    Attribution,
    Calibration,
    attribute_contributions,
    calibrate,
    progressive_bounds,
)
from party.audit.cvpl.table import (
    Table,
    TypedColumn,
    check_roles,
    truth_from_ids,
    typed_columns,
)
from party.audit.cvpl.vectorize import FIT_STRATEGIES, PcaModel, project_pair, vectorize
from party.audit.stats import Rate

log = logging.getLogger(__name__)

DEFAULT_TAUS = tuple(float(t) for t in np.round(np.linspace(0.5, 1.0, 51), 2))


@dataclass(frozen=True)
class CvplConfig:
    """Column roles and parameters of one assessment (defaults follow the issue/paper)."""

    qi: tuple[str, ...]
    attrs: tuple[str, ...] = ()
    sensitive: tuple[str, ...] = ()
    id_column: str | None = None
    categorical: tuple[str, ...] = ()  # force these observable columns to be categorical
    levels: tuple[BlockingLevel, ...] | None = None  # None: default progressive sequence
    taus: tuple[float, ...] = DEFAULT_TAUS
    tau: float | None = None  # headline threshold; None: calibrated (record-level if truth)
    fpr: float = 0.01
    headline_level: int | None = None  # None: coarsest level that blocks (not "none")
    fit: str = "joint"
    pca_model: PcaModel | None = None
    n_components: int | None = None
    variance: float = 0.95
    max_onehot: int = 32
    chunk: int = DEFAULT_CHUNK
    subblock: bool = False
    subblock_quantile: float = 0.95
    fs: bool = True
    fs_tol: float = 0.1
    attribution: bool = True
    ablation: bool = False
    calibration_samples: int = 100_000
    seed: int = 0

    def validate(self) -> None:
        if self.fit not in FIT_STRATEGIES:
            raise CvplError(f"parameter fit: expected one of {FIT_STRATEGIES}, got {self.fit!r}")
        if not 0 < self.fpr < 1:
            raise CvplError("parameter fpr: must lie in (0, 1)")
        if self.chunk < 1:
            raise CvplError("parameter chunk: must be >= 1")
        if not 0 < self.subblock_quantile < 1:
            raise CvplError("parameter subblock_quantile: must lie in (0, 1)")
        check_taus(self.taus)
        if self.tau is not None and not np.isfinite(self.tau):
            raise CvplError("parameter tau: must be finite")


@dataclass
class LevelResult:
    """One row of the risk surface: a blocking level's own rates over the tau grid."""

    name: str
    blocks: int
    largest_block: int
    pairs: int
    subblocked: int
    linkage_rate: list[Rate]
    top1_precision: list[Rate] | None
    bound: list[Rate]
    bound_precision: list[Rate] | None
    structural_recall: Rate | None
    top1_accuracy: Rate | None
    seconds: float
    at_tau: Rate | None = None
    precision_at_tau: Rate | None = None
    structural_recall_unsplit: Rate | None = None  # before sub-blocking, if blocks were split

    def to_dict(self) -> dict[str, Any]:
        def rates(r: list[Rate] | None) -> list[dict[str, Any]] | None:
            return None if r is None else [x.to_dict() for x in r]

        return {
            "name": self.name,
            "blocks": self.blocks,
            "largest_block": self.largest_block,
            "pairs": self.pairs,
            "subblocked_blocks": self.subblocked,
            "linkage_rate": rates(self.linkage_rate),
            "top1_precision": rates(self.top1_precision),
            "progressive_lower_bound": rates(self.bound),
            "progressive_precision": rates(self.bound_precision),
            "structural_recall": None
            if self.structural_recall is None
            else self.structural_recall.to_dict(),
            "top1_accuracy": None if self.top1_accuracy is None else self.top1_accuracy.to_dict(),
            "structural_recall_before_subblocking": None
            if self.structural_recall_unsplit is None
            else self.structural_recall_unsplit.to_dict(),
            "linkage_rate_at_headline_tau": None if self.at_tau is None else self.at_tau.to_dict(),
            "top1_precision_at_headline_tau": None
            if self.precision_at_tau is None
            else self.precision_at_tau.to_dict(),
            "seconds": self.seconds,
        }


@dataclass
class CvplResult:
    """Everything one assessment measured (aggregates only)."""

    n_source: int
    n_target: int
    columns: dict[str, str]
    qi: tuple[str, ...]
    features: tuple[str, ...]
    feature_counts: dict[str, int]
    pca_k: int
    pca_explained: float
    pca_model: PcaModel
    taus: np.ndarray
    levels: list[LevelResult]
    nested: bool
    dropped_from_blocking: tuple[str, ...]
    vectorised: tuple[str, ...]
    headline_level: int
    tau: float
    tau_source: str
    linkage_rate: Rate
    top1_precision: Rate | None
    calibration: Calibration
    dcr_nndr: dict[str, Any]
    fs: FsResult | None = None
    attribution: Attribution | None = None
    ablation: dict[str, Rate] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def surface(self) -> np.ndarray:
        """R(lambda, tau): levels x taus matrix of linkage-rate values."""
        return np.array([[r.value for r in lv.linkage_rate] for lv in self.levels])

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": {"original": self.n_source, "released": self.n_target},
            "columns": self.columns,
            "quasi_identifiers": list(self.qi),
            # feature columns per attribute (names of one-hot columns would quote values)
            "features": {a: int(n) for a, n in self.feature_counts.items()},
            "pca": {"k": self.pca_k, "explained_variance": self.pca_explained},
            "taus": [float(t) for t in self.taus],
            "levels": [lv.to_dict() for lv in self.levels],
            "levels_nested": self.nested,
            "dropped_from_blocking": list(self.dropped_from_blocking),
            "dropped_from_vectors": [c for c in self.columns if c not in self.vectorised],
            "headline": {
                "level": self.levels[self.headline_level].name,
                "level_index": self.headline_level,
                "tau": self.tau,
                "tau_source": self.tau_source,
                "linkage_rate": self.linkage_rate.to_dict(),
                "top1_precision": None
                if self.top1_precision is None
                else self.top1_precision.to_dict(),
            },
            "calibration": self.calibration.to_dict(),
            "dcr_nndr": self.dcr_nndr,
            "fellegi_sunter": None if self.fs is None else self.fs.to_dict(),
            "attribution": None if self.attribution is None else self.attribution.to_dict(),
            "ablation": {k: v.to_dict() for k, v in self.ablation.items()},
            "seconds": self.seconds,
        }


def _level_keys(
    levels: Sequence[BlockingLevel],
    qcols: Sequence[TypedColumn],
    n_source: int,
    config: CvplConfig,
    score: tuple[np.ndarray, np.ndarray],
    truth: np.ndarray | None,
) -> tuple[list[tuple[np.ndarray, np.ndarray, int]], list[Rate | None]]:
    """Keys per level (sub-blocked if configured) and, with a truth, the structural recall the
    level had before sub-blocking (None when nothing was split)."""
    out = []
    unsplit_recall: list[Rate | None] = []
    cache: dict[Any, np.ndarray] = {}
    for level in levels:
        s, t = block_keys(level, qcols, n_source, cache)
        split = 0
        recall = None
        if config.subblock and level.rules:
            if truth is not None:
                recall = structural_recall(s, t, truth)
            s, t, split = subblock(s, t, score[0], score[1], config.subblock_quantile)
        out.append((s, t, split))
        unsplit_recall.append(recall if split else None)
    return out, unsplit_recall


def assess_tables(original: Table, released: Table, config: CvplConfig) -> CvplResult:
    """Run the whole CVPL assessment of release ``released`` against ``original``."""
    config.validate()
    t0 = time.perf_counter()
    seconds: dict[str, float] = {}
    check_roles(original, released, config.qi, config.attrs, config.sensitive, config.id_column)
    observable = list(config.qi) + list(config.attrs)
    for c in config.categorical:
        if c not in observable:
            raise CvplError(f"parameter categorical: column {c!r} is not a qi or attrs column")
    cols = typed_columns(original, released, observable, config.categorical)
    by_name = {c.name: c for c in cols}
    qcols = [by_name[q] for q in config.qi]
    truth = None
    if config.id_column is not None:
        truth = truth_from_ids(original, released, config.id_column)
    levels = list(config.levels) if config.levels else default_levels(qcols)
    qby = {c.name: c for c in qcols}
    for level in levels:
        for rule in level.rules:
            if rule.column not in qby:
                raise CvplError(
                    f"parameter levels: column {rule.column!r} is not a quasi-identifier"
                )
            check_rule(qby[rule.column], rule)
    levels, dropped = adapt_levels(levels, qcols)
    if dropped:
        log.info("blocking ignores mostly suppressed quasi-identifiers: %s", ", ".join(dropped))
    taus = check_taus(config.taus)
    seconds["load"] = time.perf_counter() - t0

    t = time.perf_counter()
    # phi ignores columns the release (or the original) mostly suppressed, as an attacker would.
    vec_cols = [c for c in cols if c.name not in mostly_missing(cols)]
    if not vec_cols:
        raise CvplError("every observable column is mostly missing in one of the files")
    space = vectorize(
        vec_cols, "joint" if config.fit == "prefitted" else config.fit, config.max_onehot
    )
    ps, pt, model = project_pair(
        space, config.fit, config.n_components, config.variance, config.pca_model
    )
    kernel = CosineKernel(ps, pt)
    seconds["vectorise_pca"] = time.perf_counter() - t

    t = time.perf_counter()
    keys, unsplit_recall = _level_keys(
        levels, qcols, original.n, config, (ps[:, 0], pt[:, 0]), truth
    )
    nested = (not config.subblock) and check_nested([(s, k) for s, k, _ in keys])
    seconds["blocking"] = time.perf_counter() - t

    if config.headline_level is not None and not 0 <= config.headline_level < len(levels):
        raise CvplError(f"parameter headline_level: must lie in 0..{len(levels) - 1}")

    level_results: list[LevelResult] = []
    tops: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    t_levels = time.perf_counter()
    t = t_levels
    # Second-best similarities only where the headline will (most likely) be: the given level,
    # or the coarsest level that blocks; recomputed below in the rare case it compares nothing.
    planned = config.headline_level
    if planned is None:
        blocking = [i for i, lv in enumerate(levels) if lv.rules]
        planned = blocking[-1] if blocking else len(levels) - 1
    steps = progressive_bounds(
        kernel,
        [(s, k) for s, k, _ in keys],
        taus,
        truth,
        chunk=config.chunk,
        top2=[i == planned for i in range(len(levels))],
    )
    for i, step in enumerate(steps):
        s, k, split = keys[i]
        lr, prec, acc = rates_from_top(step.level_best, step.level_index, taus, truth)
        sizes = np.bincount(np.concatenate([s, k])) if len(s) + len(k) else np.zeros(1)
        now = time.perf_counter()
        level_results.append(
            LevelResult(
                name=levels[i].name,
                blocks=int(np.count_nonzero(sizes)),
                largest_block=int(sizes.max()),
                pairs=step.level_pairs,
                subblocked=split,
                linkage_rate=lr,
                top1_precision=prec,
                bound=step.linkage_rate,
                bound_precision=step.top1_precision,
                structural_recall=None if truth is None else structural_recall(s, k, truth),
                structural_recall_unsplit=unsplit_recall[i],
                top1_accuracy=acc,
                seconds=now - t,
            )
        )
        log.info("CVPL level %d/%d (%s) done in %.2fs", i + 1, len(levels), levels[i].name, now - t)
        t = now
        tops.append((step.level_best, step.level_index, step.level_second))
    seconds["surface"] = time.perf_counter() - t_levels
    if config.headline_level is not None:
        headline = config.headline_level
    else:  # the coarsest level that still blocks and compares something, else the last one
        usable = [i for i, lv in enumerate(level_results) if levels[i].rules and lv.pairs]
        headline = usable[-1] if usable else len(levels) - 1

    t = time.perf_counter()
    hs, hk, _ = keys[headline]
    best, index, second = tops[headline]
    if second is None:
        top = blockwise_top(kernel, hs, hk, chunk=config.chunk, top2=True)
        best, index, second = top.best, top.index, top.second
        assert second is not None
    calib = calibrate(
        kernel,
        hs,
        hk,
        config.fpr,
        truth=truth,
        top_best=best,
        top_index=index,
        top_second=second,
        samples=config.calibration_samples,
        seed=config.seed,
    )
    if config.tau is not None:
        tau, tau_source = float(config.tau), "given"
    elif calib.record_tau is not None and np.isfinite(calib.record_tau):
        tau, tau_source = calib.record_tau, f"record-level calibration at fpr={config.fpr}"
    else:
        tau, tau_source = calib.pair_tau, f"pair-level calibration at fpr={config.fpr}"
    if not np.isfinite(tau):
        raise CvplError("cannot calibrate tau: no candidate pairs at the headline level; give tau")
    lr_h, prec_h, _ = rates_from_top(best, index, np.array([tau]), truth)
    for lv, (b, ix, _) in zip(level_results, tops, strict=True):
        lr_l, prec_l, _ = rates_from_top(b, ix, np.array([tau]), truth)
        lv.at_tau = lr_l[0]
        lv.precision_at_tau = None if prec_l is None else prec_l[0]
    dn = dcr_nndr(best, second, index, truth)
    seconds["calibration_dcr"] = time.perf_counter() - t

    result = CvplResult(
        n_source=original.n,
        n_target=released.n,
        columns={c.name: c.kind for c in cols},
        qi=tuple(config.qi),
        features=space.names,
        feature_counts={
            a: int(np.count_nonzero(space.attribute_of == i))
            for i, a in enumerate(space.attributes)
        },
        pca_k=model.k,
        pca_model=model,
        pca_explained=float(model.explained_variance_ratio.sum()),
        taus=taus,
        levels=level_results,
        nested=nested,
        dropped_from_blocking=tuple(dropped),
        vectorised=space.attributes,
        headline_level=headline,
        tau=tau,
        tau_source=tau_source,
        linkage_rate=lr_h[0],
        top1_precision=None if prec_h is None else prec_h[0],
        calibration=calib,
        dcr_nndr=dn,
    )
    if config.attribution:
        t = time.perf_counter()
        linked = np.flatnonzero(best >= tau)
        result.attribution = attribute_contributions(space, model, linked, index[linked], config.qi)
        seconds["attribution"] = time.perf_counter() - t
    if config.fs and level_results[headline].pairs:
        t = time.perf_counter()
        result.fs = fellegi_sunter(vec_cols, hs, hk, truth, tol=config.fs_tol, seed=config.seed)
        seconds["fellegi_sunter"] = time.perf_counter() - t
    elif config.fs:
        log.warning("Fellegi-Sunter skipped: no candidate pairs at the headline level")
    if config.ablation:
        t = time.perf_counter()
        result.ablation = _ablation(vec_cols, config, hs, hk, tau)
        seconds["ablation"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - t0
    result.seconds = seconds
    return result


def _ablation(
    cols: Sequence[TypedColumn],
    config: CvplConfig,
    skeys: np.ndarray,
    tkeys: np.ndarray,
    tau: float,
) -> dict[str, Rate]:
    """Headline CVPL-LR recomputed with attribute subsets: Q only, non-Q only, each one left out."""
    qi = set(config.qi)
    subsets: dict[str, list[TypedColumn]] = {
        "qi_only": [c for c in cols if c.name in qi],
        "non_qi_only": [c for c in cols if c.name not in qi],
    }
    for c in cols:
        subsets[f"without:{c.name}"] = [d for d in cols if d is not c]
    out: dict[str, Rate] = {}
    fit = "joint" if config.fit == "prefitted" else config.fit
    for name, subset in subsets.items():
        if not subset:
            continue
        space = vectorize(subset, fit, config.max_onehot)
        ps, pt, _ = project_pair(space, fit, None, config.variance)
        top = blockwise_top(CosineKernel(ps, pt), skeys, tkeys, chunk=config.chunk)
        lr, _, _ = rates_from_top(top.best, top.index, np.array([tau]), None)
        out[name] = lr[0]
    return out
