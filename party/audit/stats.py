"""Rates with their counts and Wilson 95% score intervals, the form every audit measure reports."""

from __future__ import annotations

import math
from dataclasses import dataclass

Z95 = 1.959963984540054


def wilson_interval(successes: int, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (Wilson 1927; Brown, Cai & DasGupta 2001).

    Returns (0.0, 1.0) when total is 0: nothing was measured, so nothing is known.
    """
    if total < 0 or successes < 0 or successes > total:
        raise ValueError(f"invalid counts: {successes} of {total}")
    if total == 0:
        return (0.0, 1.0)
    p = successes / total
    z2 = z * z
    denom = 1.0 + z2 / total
    centre = (p + z2 / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Rate:
    """A measured proportion: `count` of `total`, with its Wilson 95% interval."""

    count: int
    total: int

    @property
    def value(self) -> float:
        return self.count / self.total if self.total else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.count, self.total)

    def to_dict(self) -> dict[str, float | int | list[float]]:
        low, high = self.interval
        return {"value": self.value, "count": self.count, "total": self.total, "ci95": [low, high]}

    def __str__(self) -> str:
        low, high = self.interval
        return f"{self.value:.3f} ({self.count}/{self.total}, 95% CI {low:.3f}-{high:.3f})"
