"""Synthetic customer scenario for CVPL: records with quasi-identifiers and behavioural touchpoints,
and protected releases (k-anonymity, noise, suppression, rounding, synthetic data).

Every column is generated from a seeded numpy Generator, so a (n, seed) pair always gives the same
data. Roles: quasi-identifiers age (18-90), sex, region (3-character hierarchical code: area
letter, district digit, sub-district digit; prefixes generalise it), marital; behavioural
attributes tenure_months, web_visits, store_visits, support_calls, email_opens, spend_total,
products, last_purchase_days, channel, loyalty_tier; sensitive credit_score (never vectorised).

A release keeps the id column (the ground truth), is row-shuffled, and applies one protection.
k-anonymity is full-domain generalisation over the hierarchies age (exact, 5/10/20-year bands, *),
region (code, 2- and 1-character prefix, *), sex and marital (value, *): the least-generalised
lattice node whose equivalence classes below k hold at most ``suppress`` of the records wins, and
those records' quasi-identifiers are suppressed (``*``), so the release is k-anonymous on Q.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

QI = ("age", "sex", "region", "marital")
ATTRS = (
    "tenure_months",
    "web_visits",
    "store_visits",
    "support_calls",
    "email_opens",
    "spend_total",
    "products",
    "last_purchase_days",
    "channel",
    "loyalty_tier",
)
SENSITIVE = ("credit_score",)
ID = "customer_id"
NUMERIC = (
    "age",
    "tenure_months",
    "web_visits",
    "store_visits",
    "support_calls",
    "email_opens",
    "spend_total",
    "products",
    "last_purchase_days",
    "credit_score",
)

Columns = dict[str, np.ndarray]


def generate_customers(n: int, seed: int = 0) -> Columns:
    """n synthetic customers (all columns as numpy arrays; numbers are numeric arrays)."""
    rng = np.random.default_rng(seed)
    age = np.clip(np.round(rng.normal(45, 16, n)), 18, 90).astype(np.int64)
    sex = rng.choice(np.array(["F", "M"]), n)
    area_p = np.array([0.22, 0.18, 0.15, 0.12, 0.11, 0.09, 0.08, 0.05])
    area = rng.choice(np.array(list("ABCDEFGH")), n, p=area_p)
    district = rng.integers(0, 10, n)
    sub = np.minimum(rng.geometric(0.45, n) - 1, 4)
    region = np.char.add(np.char.add(area, district.astype(str)), sub.astype(str))
    p_married = np.clip((age - 18) / 40, 0.05, 0.65)
    u = rng.random(n)
    marital = np.where(
        u < p_married,
        "married",
        np.where(u < p_married + 0.1, "divorced", np.where(age > 70, "widowed", "single")),
    )
    activity = rng.lognormal(0.0, 0.6, n)
    digital = np.clip(1.4 - age / 60 + rng.normal(0, 0.3, n), 0.05, 2.0)
    tenure = np.clip(np.round(rng.gamma(2.0, 24, n) * np.minimum(1.0, (age - 17) / 20)), 0, 240)
    web = rng.poisson(6 * activity * digital)
    store = rng.poisson(3 * activity / digital)
    calls = rng.poisson(0.6 * activity)
    emails = rng.binomial(20, np.clip(0.2 + 0.3 * digital / 2, 0, 1))
    spend = np.round(rng.lognormal(5.5, 0.5, n) * activity * (1 + tenure / 120), 2)
    products = np.clip(1 + rng.poisson(0.5 + tenure / 60), 1, 8)
    last = np.round(rng.exponential(30 / activity))
    channel_p = np.stack([digital, digital / 2, 1 / digital, 0.3 * np.ones(n)], axis=1)
    channel_p /= channel_p.sum(axis=1, keepdims=True)
    channel = np.array(["web", "app", "store", "phone"])[
        (rng.random(n)[:, None] > np.cumsum(channel_p, axis=1)).sum(axis=1)
    ]
    tier = np.array(["bronze", "silver", "gold", "platinum"])[
        np.searchsorted(np.quantile(spend, [0.5, 0.8, 0.95]), spend)
    ]
    credit = np.clip(np.round(rng.normal(650, 80, n) + (age - 45) * 1.5), 300, 850)
    ids = np.char.add("C", np.char.zfill(np.arange(n).astype(str), 7))
    return {
        ID: ids,
        "age": age,
        "sex": sex,
        "region": region,
        "marital": marital,
        "tenure_months": tenure.astype(np.int64),
        "web_visits": web,
        "store_visits": store,
        "support_calls": calls,
        "email_opens": emails,
        "spend_total": spend,
        "products": products.astype(np.int64),
        "last_purchase_days": last.astype(np.int64),
        "channel": channel,
        "loyalty_tier": tier,
        "credit_score": credit.astype(np.int64),
    }


# --- generalisation hierarchies -------------------------------------------------------------------


def _gen_age(age: np.ndarray, level: int) -> np.ndarray:
    if level == 0:
        return age.astype(str)
    if level == 4:
        return np.full(len(age), "*")
    w = (5, 10, 20)[level - 1]
    lo = (age // w) * w
    return np.char.add(np.char.add(lo.astype(str), "-"), (lo + w - 1).astype(str))


def _gen_region(region: np.ndarray, level: int) -> np.ndarray:
    if level == 3:
        return np.full(len(region), "*")
    return np.array([r[: 3 - level] for r in region.tolist()]) if level else region


def _gen_flat(values: np.ndarray, level: int) -> np.ndarray:
    return values if level == 0 else np.full(len(values), "*")


_LATTICE = list(itertools.product(range(5), range(4), range(2), range(2)))


@dataclass(frozen=True)
class KAnonymity:
    """Outcome of a k-anonymisation: lattice node (age, region, sex, marital levels) and suppression."""

    k: int
    node: tuple[int, int, int, int]
    suppressed: int
    min_class: int


def k_anonymise(data: Columns, k: int, suppress: float = 0.05) -> tuple[Columns, KAnonymity]:
    """Full-domain generalisation of Q with bounded suppression (see the module docstring)."""
    n = len(data["age"])
    gens = (
        [_gen_age(data["age"], lv) for lv in range(5)],
        [_gen_region(data["region"], lv) for lv in range(4)],
        [_gen_flat(data["sex"], lv) for lv in range(2)],
        [_gen_flat(data["marital"], lv) for lv in range(2)],
    )
    codes = [[np.unique(g, return_inverse=True)[1].reshape(-1) for g in hier] for hier in gens]
    best: tuple[float, tuple[int, int, int, int], np.ndarray] | None = None
    for node in _LATTICE:
        a, r, s, m = node
        key = np.zeros(n, dtype=np.int64)
        for hier, lv in zip(codes, node, strict=True):
            key = key * (int(hier[lv].max()) + 1) + hier[lv]
        key = np.unique(key, return_inverse=True)[1].reshape(-1)
        sizes = np.bincount(key)
        small = sizes[key] < k
        if small.sum() > suppress * n:
            continue
        loss = a / 4 + r / 3 + s + m
        if best is None or loss < best[0]:
            best = (loss, node, small)
    assert best is not None  # the top node (all '*') always qualifies
    _, node, small = best
    out = dict(data)
    out["age"] = _gen_age(data["age"], node[0])
    out["region"] = _gen_region(data["region"], node[1])
    out["sex"] = _gen_flat(data["sex"], node[2])
    out["marital"] = _gen_flat(data["marital"], node[3])
    for q in QI:
        col = out[q].astype(object)
        col[small] = "*"
        out[q] = col.astype(str)
    keys = np.unique(np.stack([out[q] for q in QI], axis=1), axis=0, return_inverse=True)[1]
    sizes = np.bincount(keys.reshape(-1))
    kept = sizes[keys.reshape(-1)][~small]
    min_class = int(kept.min()) if kept.size else 0
    return out, KAnonymity(k, node, int(small.sum()), min_class)


# --- other protections ------------------------------------------------------------------------------


def add_noise(
    data: Columns, level: float, rng: np.random.Generator, columns: tuple[str, ...]
) -> Columns:
    """Gaussian noise of sd = level x column sd on numeric columns; categorical values replaced
    by a draw from the column's marginal with probability ``level``."""
    out = dict(data)
    n = len(data["age"])
    for c in columns:
        v = data[c]
        if c in NUMERIC and v.dtype.kind in "if":
            noisy = v + rng.normal(0, level * float(v.std()), n)
            out[c] = np.round(noisy, 2) if v.dtype.kind == "f" else np.round(noisy).astype(np.int64)
        elif v.dtype.kind == "U":
            flip = rng.random(n) < level
            out[c] = np.where(flip, rng.choice(v, n), v)
    return out


def suppress_cells(
    data: Columns, share: float, rng: np.random.Generator, columns: tuple[str, ...]
) -> Columns:
    out = dict(data)
    n = len(data["age"])
    for c in columns:
        col = data[c].astype(str).astype(object)
        col[rng.random(n) < share] = "*"
        out[c] = col.astype(str)
    return out


def suppress_columns(data: Columns, columns: tuple[str, ...]) -> Columns:
    out = dict(data)
    for c in columns:
        out[c] = np.full(len(data[c]), "*")
    return out


def round_values(data: Columns) -> Columns:
    out = dict(data)
    steps = {
        "spend_total": 250.0,
        "tenure_months": 12,
        "web_visits": 5,
        "store_visits": 5,
        "last_purchase_days": 30,
        "email_opens": 5,
    }
    for c, st in steps.items():
        out[c] = (np.round(data[c] / st) * st).astype(data[c].dtype)
    out["age"] = (data["age"] // 5) * 5 + 2
    return out


def synthetic_marginals(data: Columns, rng: np.random.Generator, strata: bool) -> Columns:
    """Each column resampled independently from its marginal (within sex x 10-year age strata
    when ``strata``); row i keeps id i, which no longer describes the same person."""
    n = len(data["age"])
    out = dict(data)
    cols = [c for c in data if c != ID]
    if not strata:
        for c in cols:
            out[c] = data[c][rng.integers(0, n, n)]
        return out
    key = np.unique(
        np.stack([data["sex"], (data["age"] // 10).astype(str)], axis=1),
        axis=0,
        return_inverse=True,
    )[1].reshape(-1)
    for c in cols:
        if c in ("sex",):
            continue
        col = data[c].copy()
        for g in np.unique(key).tolist():
            members = np.flatnonzero(key == g)
            col[members] = data[c][members[rng.integers(0, len(members), len(members))]]
        out[c] = col
    return out


def _kanon(k: int) -> Callable[[Columns, np.random.Generator], Columns]:
    return lambda d, rng: k_anonymise(d, k)[0]


NUMERIC_ALL = tuple(c for c in NUMERIC if c != "credit_score")
CAT_ALL = ("sex", "region", "marital", "channel", "loyalty_tier")

PROTECTIONS: dict[str, Callable[[Columns, np.random.Generator], Columns]] = {
    "none": lambda d, rng: dict(d),
    "k-anon k=2": _kanon(2),
    "k-anon k=5": _kanon(5),
    "k-anon k=10": _kanon(10),
    "k-anon k=20": _kanon(20),
    "k-anon k=50": _kanon(50),
    "noise 0.05": lambda d, rng: add_noise(d, 0.05, rng, NUMERIC_ALL + CAT_ALL),
    "noise 0.1": lambda d, rng: add_noise(d, 0.1, rng, NUMERIC_ALL + CAT_ALL),
    "noise 0.25": lambda d, rng: add_noise(d, 0.25, rng, NUMERIC_ALL + CAT_ALL),
    "noise 0.5": lambda d, rng: add_noise(d, 0.5, rng, NUMERIC_ALL + CAT_ALL),
    "k-anon k=5 + noise 0.1": lambda d, rng: add_noise(k_anonymise(d, 5)[0], 0.1, rng, ATTRS),
    "k-anon k=10 + noise 0.25": lambda d, rng: add_noise(k_anonymise(d, 10)[0], 0.25, rng, ATTRS),
    "suppress 30% QI cells": lambda d, rng: suppress_cells(d, 0.3, rng, QI),
    "suppress 3 attributes": lambda d, rng: suppress_columns(
        d, ("spend_total", "tenure_months", "last_purchase_days")
    ),
    "rounding": lambda d, rng: round_values(d),
    "synthetic marginals": lambda d, rng: synthetic_marginals(d, rng, strata=False),
    "synthetic strata": lambda d, rng: synthetic_marginals(d, rng, strata=True),
}


def release(data: Columns, protection: str, seed: int = 0) -> Columns:
    """The protected, row-shuffled release of ``data`` under ``protection`` (a PROTECTIONS key)."""
    rng = np.random.default_rng(seed)
    out = PROTECTIONS[protection](data, rng)
    perm = rng.permutation(len(data[ID]))
    return {c: np.asarray(v)[perm] for c, v in out.items()}


def slug(name: str) -> str:
    """A file-name-safe form of a protection name."""
    return re.sub(r"_+", "_", "".join(ch if ch.isalnum() else "_" for ch in name)).strip("_")
