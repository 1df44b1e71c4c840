"""The shipped frequency lists (names, streets, suburbs) and their Zipf-by-rank sampling weights.

File format: `party/synthetic/data/*.csv` are UTF-8 CSV files whose leading lines starting with `#` are
comments, followed by a header row. Rows are in approximate order of real-world frequency (most common
first); the lists carry no counts, so each value's sampling probability is set from its rank r (1-based)
by a Zipf law p(r) ~ r^-s with a per-list exponent s, except where a `weight` column is present
(street types). The shipped lists are small (a few hundred values each) and hand-compiled; they mimic
the shape, not the exact frequencies, of Australian name and address distributions.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

import numpy as np

# Zipf exponents per list: a lower exponent spreads the mass over more values.
ZIPF_EXPONENTS = {
    "given_names": 0.9,
    "surnames": 0.75,
    "streets": 0.8,
    "suburbs": 0.6,
}


@dataclass(frozen=True)
class FrequencyList:
    """Values with sampling probabilities (summing to 1) and optional aligned extra columns."""

    values: np.ndarray  # object array of str
    probabilities: np.ndarray  # float64, same length, sums to 1
    extra: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.values)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """Indices into `values` drawn with the list's probabilities."""
        cdf = np.cumsum(self.probabilities)
        cdf[-1] = 1.0
        return np.searchsorted(cdf, rng.random(size), side="right").astype(np.int64)


def zipf_weights(n: int, exponent: float) -> np.ndarray:
    """Probabilities proportional to rank^-exponent for ranks 1..n."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return w / w.sum()


def _read_rows(name: str) -> list[dict[str, str]]:
    text = resources.files("party.synthetic").joinpath("data", name).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def _from_rows(rows: list[dict[str, str]], exponent: float | None) -> FrequencyList:
    values = np.array([r["name"] if "name" in r else r["suburb"] for r in rows], dtype=object)
    if exponent is None:
        w = np.array([float(r["weight"]) for r in rows])
        probs = w / w.sum()
    else:
        probs = zipf_weights(len(rows), exponent)
    extra_cols = [c for c in rows[0] if c not in ("name", "suburb", "weight")] if rows else []
    extra = {c: np.array([r[c] for r in rows], dtype=object) for c in extra_cols}
    return FrequencyList(values, probs, extra)


@dataclass(frozen=True)
class Lists:
    """All shipped lists."""

    given_female: FrequencyList
    given_male: FrequencyList
    surnames: FrequencyList
    streets: FrequencyList
    street_types: FrequencyList
    suburbs: FrequencyList  # extra: postcode, state


@functools.cache
def load_lists() -> Lists:
    """Load (once) the frequency lists shipped in `party/synthetic/data/`."""
    given = _read_rows("given_names.csv")
    female = [r for r in given if r["sex"] == "f"]
    male = [r for r in given if r["sex"] == "m"]
    return Lists(
        given_female=_from_rows(female, ZIPF_EXPONENTS["given_names"]),
        given_male=_from_rows(male, ZIPF_EXPONENTS["given_names"]),
        surnames=_from_rows(_read_rows("surnames.csv"), ZIPF_EXPONENTS["surnames"]),
        streets=_from_rows(_read_rows("streets.csv"), ZIPF_EXPONENTS["streets"]),
        street_types=_from_rows(_read_rows("street_types.csv"), None),
        suburbs=_from_rows(_read_rows("suburbs.csv"), ZIPF_EXPONENTS["suburbs"]),
    )
