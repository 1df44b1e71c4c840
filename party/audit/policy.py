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
allowed_modes                         protocol modes the party joins (default: every mode)
====================================  =====================================================================

Limits on segment measures (every key but ``max_alone_in_block``) apply to segments-mode runs only: in
mpc3 no segment leaves the party, so they are moot there (the decision lists them as not applicable).
``DEFAULT_POLICY`` is what the party applies when its config has no ``[audit.policy]`` table
(party/config.py; docs/audit.md "Default policy" gives the measured reasons for its limit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from party.audit.modes import MODES
from party.errors import PprlError

DEFAULT_INSIDER_TARGETS = 2000
DEFAULT_CVPL_TAU = 0.9

#: The shipped default: mpc3 runs are allowed; a segments run is declined when the insider attack
#: re-identifies more than 5% of whole records one-to-one from a segment it would send, or when CVPL
#: links more than 5% of them at Dice >= 0.9 (the attack that reads XOR-folded bits too). See
#: docs/audit.md "Default policy": on unhardened filters the measured rates are 1.000 and 0.97, so the
#: default segments run is declined.
DEFAULT_POLICY: Mapping[str, Any] = MappingProxyType(
    {"max_insider_record_one_to_one": 0.05, "max_cvpl_lr": 0.05}
)

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
    "allowed_modes",
)
KNOWN_KEYS = _RATE_KEYS + _OTHER_KEYS
#: Limits on a measure of the segments revealed; moot in mpc3 (nothing of the filters is seen).
_SEGMENT_RATE_KEYS = tuple(k for k in _RATE_KEYS if k != "max_alone_in_block")


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
    allowed_modes: tuple[str, ...] = MODES

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
        if "allowed_modes" in m:
            raw = m["allowed_modes"]
            if (
                isinstance(raw, str)
                or not isinstance(raw, list | tuple)
                or not raw
                or not all(isinstance(x, str) and x in MODES for x in raw)
            ):
                problems.append(
                    f"allowed_modes: expected a non-empty list of modes from {', '.join(MODES)}"
                )
            else:
                kw["allowed_modes"] = tuple(dict.fromkeys(raw))
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
        return (
            all(getattr(self, k) is None for k in _RATE_KEYS)
            and not self.max_insider_one_to_one
            and set(self.allowed_modes) == set(MODES)
        )

    def segment_limits(self) -> list[str]:
        """The keys of the segment-measure limits this policy sets (moot in mpc3)."""
        out = [k for k in _SEGMENT_RATE_KEYS if getattr(self, k) is not None]
        return [*out, "max_insider_one_to_one"] if self.max_insider_one_to_one else out

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in _RATE_KEYS}
        out["max_insider_one_to_one"] = dict(self.max_insider_one_to_one)
        out["cvpl_tau"] = self.cvpl_tau
        out["conservative"] = self.conservative
        out["insider_max_targets"] = self.insider_max_targets
        out["external_dictionaries"] = {k: str(v) for k, v in self.external_dictionaries.items()}
        out["allowed_modes"] = list(self.allowed_modes)
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


#: ``PPRL_AUDIT_<KEY>`` overrides ``[audit.policy]`` key ``<key>`` (party/config.py applies them).
ENV_PREFIX = "PPRL_AUDIT_"
POLICY_ENV: Mapping[str, str] = MappingProxyType({ENV_PREFIX + k.upper(): k for k in KNOWN_KEYS})
_TRUE = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def _env_pairs(var: str, value: str, problems: list[str]) -> dict[str, str] | None:
    """``a=x,b=y`` -> {"a": "x", "b": "y"}; a problem naming ``var`` when malformed."""
    out: dict[str, str] = {}
    for item in value.split(","):
        name, sep, val = item.partition("=")
        if not sep or not name.strip() or not val.strip():
            problems.append(f"{var}: expected FIELD=VALUE pairs separated by commas")
            return None
        out[name.strip()] = val.strip()
    return out


def _env_number(var: str, value: str, problems: list[str]) -> float | None:
    try:
        return float(value)
    except ValueError:
        problems.append(f"{var}: expected a number")
        return None


def _env_value(var: str, key: str, value: str, cwd: Path, problems: list[str]) -> Any:
    """The policy value ``key`` parsed from environment text (None after a problem)."""
    if key == "conservative":
        flag = _TRUE.get(value.strip().lower())
        if flag is None:
            problems.append(f"{var}: expected true or false")
        return flag
    if key == "insider_max_targets":
        try:
            return int(value)
        except ValueError:
            problems.append(f"{var}: expected a whole number")
            return None
    if key == "allowed_modes":
        return [m.strip() for m in value.split(",") if m.strip()]
    if key == "external_dictionaries":
        pairs = _env_pairs(var, value, problems)
        return None if pairs is None else {f: str(cwd / Path(p)) for f, p in pairs.items()}
    if key == "max_insider_one_to_one" and "=" in value:
        pairs = _env_pairs(var, value, problems)
        if pairs is None:
            return None
        per = {f: _env_number(f"{var} ({f})", v, problems) for f, v in pairs.items()}
        return None if None in per.values() else per
    return _env_number(var, value, problems)


def configured_policy(
    table: Mapping[str, Any] | None,
    use_default: bool,
    env: Mapping[str, str],
    cwd: Path,
    problems: list[str],
) -> tuple[dict[str, Any] | None, str]:
    """The policy mapping a party config asks for, and where it came from.

    ``table`` is the config's ``[audit.policy]`` (None: absent). Without a table the party applies
    ``DEFAULT_POLICY``, unless ``use_default`` is false (``[audit] default_policy = false``: no policy,
    every run allowed). ``PPRL_AUDIT_<KEY>`` variables in ``env`` then set or (empty string) clear
    single keys; relative dictionary paths from the environment are relative to ``cwd``. Problems
    (naming the variable) are appended to ``problems``; the mapping is not validated here.
    """
    if table is not None:
        policy: dict[str, Any] | None = dict(table)
        origin = "[audit.policy]"
    elif use_default:
        policy, origin = dict(DEFAULT_POLICY), "default policy"
    else:
        policy, origin = None, "none ([audit] default_policy = false)"
    overridden = sorted(var for var in POLICY_ENV if var in env)
    for var in overridden:
        key = POLICY_ENV[var]
        policy = {} if policy is None else policy
        if env[var] == "":
            policy.pop(key, None)
            continue
        value = _env_value(var, key, env[var], cwd, problems)
        if value is not None:
            policy[key] = value
    if overridden:
        origin += " with " + ", ".join(overridden)
    return policy, origin
