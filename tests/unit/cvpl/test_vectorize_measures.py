"""phi/psi on hand-checked inputs; progressive bounds (Theorem); calibration; attribution; FS EM."""

from __future__ import annotations

import numpy as np
import pytest

from party.audit.cvpl.baselines import dcr_nndr, em_fellegi_sunter, fellegi_sunter
from party.audit.cvpl.blocking import block_keys, default_levels
from party.audit.cvpl.engine import CosineKernel, blockwise_top
from party.audit.cvpl.errors import CvplError
from party.audit.cvpl.measures import (
    attribute_contributions,
    calibrate,
    progressive_bounds,
    threshold_at_fpr,
)
from party.audit.cvpl.table import Table, typed_columns
from party.audit.cvpl.vectorize import fit_pca, project_pair, vectorize


def _pair(src: dict, tgt: dict, cols: list[str]):
    return typed_columns(Table.from_arrays("D", src), Table.from_arrays("R", tgt), cols)


def test_phi_hand_checked():
    cols = _pair(
        {"x": [1, 3], "c": ["a", "b"]},
        {"x": [5, ""], "c": ["b", ""]},
        ["x", "c"],
    )
    space = vectorize(cols)  # joint stats: x in {1, 3, 5}: mean 3, sd sqrt(8/3)
    sd = np.sqrt(8 / 3)
    assert space.names == ("x", "c=a", "c=b")
    np.testing.assert_allclose(space.source, [[-2 / sd, 1, 0], [0, 0, 1]])
    np.testing.assert_allclose(space.target, [[2 / sd, 0, 1], [0, 0, 0]])  # missing -> 0
    assert space.attribute_of.tolist() == [0, 1, 1]
    src_only = vectorize(cols, "source")  # x stats from {1, 3}: mean 2, sd 1
    np.testing.assert_allclose(src_only.target[0, 0], 3.0)


def test_phi_frequency_encoding_for_many_categories():
    cats = [f"k{i}" for i in range(40)]
    cols = _pair({"c": cats + ["k0"]}, {"c": ["k0", "k1"]}, ["c"])
    space = vectorize(cols, max_onehot=32)
    assert space.names == ("c#freq",)
    # k0 is the most frequent value: highest z-scored frequency
    assert space.source[0, 0] == pytest.approx(space.source[:, 0].max())
    assert space.target[0, 0] == space.source[0, 0]


def test_psi_pca_variance_and_strategies():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(2000, 1))
    x = np.hstack([z, 2 * z, rng.normal(scale=0.01, size=(2000, 1))])
    model = fit_pca(x, ["a", "b", "c"], variance=0.99)
    assert model.k == 1
    np.testing.assert_allclose(
        np.abs(model.components[0]), np.array([1, 2, 0]) / np.sqrt(5), atol=1e-2
    )
    assert fit_pca(x, ["a", "b", "c"], n_components=3).k == 3
    cols = _pair({"x": [1, 2, 3], "y": [1, 0, 1]}, {"x": [3, 2], "y": [0, 0]}, ["x", "y"])
    space = vectorize(cols)
    ps, pt, m = project_pair(space, "target", n_components=1)
    assert ps.shape == (3, 1) and pt.shape == (2, 1)
    _, _, m2 = project_pair(space, "prefitted", model=m)
    assert m2 is m
    with pytest.raises(CvplError, match="different feature columns"):
        project_pair(space, "prefitted", model=model)
    with pytest.raises(CvplError, match="fit"):
        project_pair(space, "both")


def _nested_case(seed: int = 5, n: int = 400):
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 90, n)
    reg = rng.choice(["A1", "A2", "B1", "B2"], n)
    feats = rng.normal(size=(n, 6))
    noisy_age = np.clip(age + rng.integers(-6, 7, n), 18, 95)
    cols = _pair({"age": age, "region": reg}, {"age": noisy_age, "region": reg}, ["age", "region"])
    levels = default_levels(cols)
    keys = [block_keys(lv, cols, n) for lv in levels]
    kern = CosineKernel(feats, feats + rng.normal(scale=0.5, size=(n, 6)))
    return kern, keys, np.arange(n)


def test_progressive_lower_bounds_are_monotone_theorem():
    kern, keys, truth = _nested_case()
    taus = np.linspace(0.0, 1.0, 41)
    steps = list(progressive_bounds(kern, keys, taus, truth, top2=True))
    bounds = np.array([[r.count for r in st.linkage_rate] for st in steps])
    own = np.array([[(st.level_best >= t).sum() for t in taus] for st in steps])
    # anytime bounds never decrease as blocking is relaxed ...
    assert np.all(np.diff(bounds, axis=0) >= 0)
    # ... and never exceed the unblocked rate (last level is 'none')
    assert np.all(bounds <= bounds[-1])
    unblocked = blockwise_top(kern, np.zeros(400, int), np.zeros(400, int))
    np.testing.assert_array_equal(steps[-1].level_best, unblocked.best)
    # nested levels: each level's own rate is monotone too (up to float rounding at tau edges)
    assert np.all(np.diff(own, axis=0) >= -1)
    # the surface really grows somewhere (the test can fail if relaxation did nothing)
    assert bounds[-1].sum() > bounds[0].sum()


def test_threshold_at_fpr_and_calibration():
    v = np.arange(100, dtype=float)  # 0..99
    tau = threshold_at_fpr(v, 0.05)
    assert (v >= tau).sum() == 5 and (v >= np.nextafter(tau, -np.inf)).sum() == 6
    assert threshold_at_fpr(v, 0.0) > 99
    kern, keys, truth = _nested_case()
    skeys, tkeys = keys[-1]
    top = blockwise_top(kern, skeys, tkeys, top2=True)
    assert top.second is not None
    cal = calibrate(
        kern,
        skeys,
        tkeys,
        0.01,
        truth=truth,
        top_best=top.best,
        top_index=top.index,
        top_second=top.second,
        samples=5000,
    )
    assert cal.record_tau is not None and cal.pair_samples <= 5000
    nonmatch = np.where(top.index == truth, top.second, top.best)
    assert (nonmatch >= cal.record_tau).mean() <= 0.01


def test_attribution_sums_to_cosine():
    rng = np.random.default_rng(1)
    n = 200
    src = {"a": rng.normal(size=n), "b": rng.normal(size=n), "c": rng.choice(["x", "y", "z"], n)}
    tgt = {k: (v + rng.normal(scale=0.1, size=n) if k != "c" else v) for k, v in src.items()}
    cols = _pair(src, tgt, ["a", "b", "c"])
    space = vectorize(cols)
    ps, pt, model = project_pair(space, "joint", n_components=3)
    idx = np.arange(n)
    att = attribute_contributions(space, model, idx, idx, qi=["a"])
    cos = np.sum(ps * pt, axis=1) / (np.linalg.norm(ps, axis=1) * np.linalg.norm(pt, axis=1))
    assert att.mean_similarity == pytest.approx(cos.mean())
    assert att.share.sum() == pytest.approx(1.0)
    assert att.non_qi_share == pytest.approx(att.share[1] + att.share[2])


def test_em_recovers_known_m_u():
    rng = np.random.default_rng(7)
    n, p = 200_000, 0.1
    m = np.array([0.95, 0.9, 0.8, 0.85, 0.7])
    u = np.array([0.05, 0.1, 0.3, 0.02, 0.5])
    match = rng.random(n) < p
    prob = np.where(match[:, None], m, u)
    g = (rng.random((n, 5)) < prob).astype(np.int64)
    pats, counts = np.unique(g, axis=0, return_counts=True)
    em = em_fellegi_sunter(pats, counts)
    assert em.converged
    assert em.p == pytest.approx(p, abs=0.01)
    np.testing.assert_allclose(em.m, m, atol=0.02)
    np.testing.assert_allclose(em.u, u, atol=0.02)


def test_fellegi_sunter_links_exact_copies():
    rng = np.random.default_rng(3)
    n = 300
    src = {
        "age": rng.integers(18, 90, n),
        "sex": rng.choice(["F", "M"], n),
        "x": rng.normal(size=n),
        "y": rng.normal(size=n),
        "z": rng.choice(list("abcdefgh"), n),
    }
    cols = _pair(src, src, list(src))
    keys = np.zeros(n, dtype=np.int64)
    fs = fellegi_sunter(cols, keys, keys, np.arange(n))
    assert fs.linkage_rate.count == n
    assert fs.precision is not None and fs.precision.value > 0.95
    assert np.all(fs.em.m > fs.em.u)


def test_dcr_nndr_hand_checked():
    best = np.array([1.0, 0.5, np.nan])
    second = np.array([0.5, 0.5, np.nan])
    out = dcr_nndr(best, second, np.array([0, 1, -1]), np.array([0, 0, 2]))
    assert out["dcr"]["q05"] == pytest.approx(0.05)  # d = 0 and 1, interpolated
    assert out["dcr"]["q95"] == pytest.approx(0.95)
    assert out["distinct_nearest"]["count"] == 1  # record 0: d1 = 0, d2 = 1
    assert out["distinct_nearest_precision"]["count"] == 1
