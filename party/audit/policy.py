"""The party's audit policy: limits on what its revealed data may give away, from `[audit.policy]`.

Format: a TOML table (or any mapping) with these optional keys; a missing key means "no limit".
Rates are shares in [0, 1] and are compared with the measured point estimate, or with the upper end of
its Wilson 95% interval when ``conservative = true``.

====================================  =====================================================================
key                                   limit on
====================================  =====================================================================
max_insider_reidentification          insider attack, one-to-one rate, worst field and segment received
max_insider_one_to_one                the same per field: a number (every field) or a table field -> number
max_insider_record_one_to_one         insider attack on the whole record, one-to-one, worst segment
max_insider_top1                      insider attack, top-1 rate (ranking), worst field and segment
max_dr_mark                           frequency attack marketer risk DR_Mark, worst segment
max_dr_mean                           frequency attack DR_Mean, worst segment
max_alone_in_block                    share of records alone in at least one of their blocks
max_unique_segment                    share of records whose segment pattern is unique, worst segment
max_cvpl_lr                           CVPL-LR at ``cvpl_tau`` on the segments, worst receiving party
cvpl_tau                              the similarity threshold for max_cvpl_lr (default 0.9)
conservative                          true: compare the Wilson upper bound instead of the estimate
insider_max_targets                   records attacked (a uniform sample; default 2000, 0 = all)
external_dictionaries                 table field -> path of a UTF-8 value list (one value per line)
====================================  =====================================================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from party.errors import PprlError

DEFAULT_INSIDER_TARGETS = 2000
DEFAULT_CVPL_TAU = 0.9

_RATE_KEYS = (
    "max_insider_reidentification",
    "max_insider_record_one_to_one",
    "max_insider_top1",
    "max_dr_mark",
    "max_dr_mean",
    "max_alone_in_block",
    "max_unique_segment",
    "max_cvpl_lr",
)
_OTHER_KEYS = (
    "max_insider_one_to_one",
    "cvpl_tau",
    "conservative",
    "insider_max_targets",
    "external_dictionaries",
)
KNOWN_KEYS = _RATE_KEYS + _OTHER_KEYS


class PolicyError(PprlError, ValueError):
    """The audit policy is invalid; the message lists every problem, naming each key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid [audit.policy]: " + "; ".join(problems))


def _rate(value: Any, key: str, problems: list[str]) -> float | None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        problems.append(f"{key}: expected a number between 0 and 1, got {type(value).__name__}")
        return None
    return float(value)


@dataclass(frozen=True)
class AuditPolicy:
    """Limits the gate enforces (None: no limit) and the audit options the policy sets."""

    max_insider_reidentification: float | None = None
    max_insider_one_to_one: Mapping[str, float] = field(default_factory=dict)  # "*" = every field
    max_insider_record_one_to_one: float | None = None
    max_insider_top1: float | None = None
    max_dr_mark: float | None = None
    max_dr_mean: float | None = None
    max_alone_in_block: float | None = None
    max_unique_segment: float | None = None
    max_cvpl_lr: float | None = None
    cvpl_tau: float = DEFAULT_CVPL_TAU
    conservative: bool = False
    insider_max_targets: int | None = DEFAULT_INSIDER_TARGETS
    external_dictionaries: Mapping[str, Path] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any] | None, base: Path | None = None) -> AuditPolicy:
        """Validate a policy mapping; raises PolicyError listing every unknown key and bad value.

        Relative dictionary paths are resolved against ``base`` when given.
        """
        if m is None:
            return cls()
        if not isinstance(m, Mapping):
            raise PolicyError([f"expected a table of limits, got {type(m).__name__}"])
        problems: list[str] = []
        unknown = sorted(str(k) for k in m if k not in KNOWN_KEYS)
        if unknown:
            problems.append(
                f"unknown key(s) {', '.join(unknown)}; known keys: {', '.join(KNOWN_KEYS)}"
            )
        kw: dict[str, Any] = {}
        for key in _RATE_KEYS:
            if key in m:
                kw[key] = _rate(m[key], key, problems)
        if "max_insider_one_to_one" in m:
            raw = m["max_insider_one_to_one"]
            per: dict[str, float] = {}
            if isinstance(raw, Mapping):
                for fname, val in raw.items():
                    if not isinstance(fname, str) or not fname:
                        problems.append("max_insider_one_to_one: field names must be strings")
                        continue
                    r = _rate(val, f"max_insider_one_to_one.{fname}", problems)
                    if r is not None:
                        per[fname] = r
            else:
                r = _rate(raw, "max_insider_one_to_one", problems)
                if r is not None:
                    per["*"] = r
            kw["max_insider_one_to_one"] = MappingProxyType(per)
        if "cvpl_tau" in m:
            tau = _rate(m["cvpl_tau"], "cvpl_tau", problems)
            if tau is not None:
                kw["cvpl_tau"] = tau
        if "conservative" in m:
            if not isinstance(m["conservative"], bool):
                problems.append("conservative: expected true or false")
            else:
                kw["conservative"] = m["conservative"]
        if "insider_max_targets" in m:
            t = m["insider_max_targets"]
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                problems.append("insider_max_targets: expected a non-negative integer (0 = all)")
            else:
                kw["insider_max_targets"] = None if t == 0 else t
        if "external_dictionaries" in m:
            raw = m["external_dictionaries"]
            paths: dict[str, Path] = {}
            if not isinstance(raw, Mapping):
                problems.append("external_dictionaries: expected a table field -> file path")
            else:
                for fname, val in raw.items():
                    if not isinstance(val, str | Path) or not str(val):
                        problems.append(f"external_dictionaries.{fname}: expected a file path")
                        continue
                    p = Path(val)
                    if base is not None and not p.is_absolute():
                        p = base / p
                    paths[str(fname)] = p
            kw["external_dictionaries"] = MappingProxyType(paths)
        if problems:
            raise PolicyError(problems)
        return cls(**kw)

    def field_limit(self, field_name: str) -> float | None:
        """The one-to-one limit for one field (its own, else '*', else the global limit)."""
        per = self.max_insider_one_to_one
        limits = [
            v
            for v in (per.get(field_name), per.get("*"), self.max_insider_reidentification)
            if v is not None
        ]
        return min(limits) if limits else None

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in _RATE_KEYS) and not self.max_insider_one_to_one

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in _RATE_KEYS}
        out["max_insider_one_to_one"] = dict(self.max_insider_one_to_one)
        out["cvpl_tau"] = self.cvpl_tau
        out["conservative"] = self.conservative
        out["insider_max_targets"] = self.insider_max_targets
        out["external_dictionaries"] = {k: str(v) for k, v in self.external_dictionaries.items()}
        return out


def load_value_list(path: Path) -> list[str]:
    """One value per line (UTF-8; blank lines ignored). Errors name the file, never a value."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PprlError(f"{path}: cannot read the dictionary file ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise PprlError(f"{path}: the dictionary file is not valid UTF-8") from None
    return [line.strip() for line in text.splitlines() if line.strip()]
