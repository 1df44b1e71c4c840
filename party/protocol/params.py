"""The parameters one protocol run is executed with (ring order, filter length, thresholds, limits)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from party.protocol.errors import ParameterError
from party.protocol.solver import DEFAULT_SOLVER, SOLVERS

#: Default segment threshold offset below s_t; see docs/engine.md ("Choosing s_m") for the evidence.
DEFAULT_SEGMENT_MARGIN = 0.1

#: Protocol modes: the segment + ring-summation protocol, and three-party computation (party.mpc).
MODES = ("segments", "mpc3")

#: Linkage targets: sets present at all P parties, or groups at any m..P of them (docs/protocol.md).
TARGETS = ("all", "any")

#: The target of a run configured without one: groups at any two or more parties (docs/protocol.md,
#: "Linkage targets"; the measurements behind the choice are in docs/benchmarks.md).
DEFAULT_TARGET = "any"

#: The smallest group of a run of target any configured without min_parties.
DEFAULT_MIN_PARTIES = 2

#: Target any tells each party its groups' parties as a 64-bit mask, so P is at most 64 there.
MAX_ANY_PARTIES = 64


@dataclass(frozen=True)
class ProtocolParameters:
    """What every party must agree on before segments move.

    ``parties`` lists party names in ring order: ``parties[0]`` is the initiator of the secure
    summation, and the party at index ``i`` receives and compares segment ``i`` of every filter.
    ``segment_threshold`` (s_m) prunes a partial candidate set as soon as its segment Dice is
    below it (kept when ``>=``, so 0 never prunes). ``max_block_size`` caps the number of records
    one party contributes to one (sub-)block; larger blocks are split deterministically (see
    docs/engine.md for the recall cost). ``memory_budget_bytes`` bounds the comparison's working
    memory and the stored survivors.

    ``mode`` is ``"segments"`` (the segment + ring protocol) or ``"mpc3"`` (three-party computation,
    ``party.mpc``). In mpc3 ``compute_parties`` names the three compute parties (``()`` = the first
    three of ``parties``; with P = 2 they must be given, the third being a helper that holds no
    data); s_m must be 0 there (no partial similarities are computed or revealed).

    ``target`` is ``"any"`` (the default): groups of ``min_parties``..P records, at most one per
    party, built by ``solver`` from matched pairs (``party.protocol.pairwise``,
    ``party.protocol.solver``; in mpc3 ``party.mpc.pairs``), or ``"all"``: sets of one record at
    every party (``PartyEngine``; ``min_parties`` is not used there).
    """

    parties: tuple[str, ...]
    filter_bits: int
    match_threshold: float
    segment_threshold: float
    one_to_one: bool = False
    max_block_size: int | None = None
    memory_budget_bytes: int = 256 * 2**20
    mode: str = "segments"
    compute_parties: tuple[str, ...] = ()
    target: str = DEFAULT_TARGET
    min_parties: int = DEFAULT_MIN_PARTIES
    solver: str = DEFAULT_SOLVER

    def __post_init__(self) -> None:
        problems: list[str] = []
        if not isinstance(self.parties, tuple) or not all(
            isinstance(p, str) and p for p in self.parties
        ):
            problems.append("parties must be a tuple of non-empty party names")
        elif len(self.parties) < 2:
            problems.append(f"need at least 2 parties, got {len(self.parties)}")
        elif len(set(self.parties)) != len(self.parties):
            problems.append("party names must be unique")
        if isinstance(self.filter_bits, bool) or not isinstance(self.filter_bits, int):
            problems.append("filter_bits must be an integer")
        elif self.filter_bits <= 0:
            problems.append(f"filter_bits must be positive, got {self.filter_bits}")
        elif (
            isinstance(self.parties, tuple)
            and len(self.parties) >= 2
            and self.filter_bits % len(self.parties)
            and self.mode != "mpc3"  # mpc3 cuts no segments
        ):
            problems.append(
                f"filter length l={self.filter_bits} is not divisible by the number of "
                f"parties P={len(self.parties)}"
            )
        for name in ("match_threshold", "segment_threshold"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not 0.0 <= value <= 1.0
            ):
                problems.append(f"{name} must be a number in [0, 1]")
        if self.max_block_size is not None and (
            isinstance(self.max_block_size, bool)
            or not isinstance(self.max_block_size, int)
            or self.max_block_size < 1
        ):
            problems.append("max_block_size must be a positive integer or None")
        if (
            isinstance(self.memory_budget_bytes, bool)
            or not isinstance(self.memory_budget_bytes, int)
            or self.memory_budget_bytes < 2**20
        ):
            problems.append("memory_budget_bytes must be an integer of at least 1 MiB")
        problems.extend(self._mode_problems())
        problems.extend(self._target_problems())
        if problems:
            raise ParameterError("invalid protocol parameters: " + "; ".join(problems))

    def _mode_problems(self) -> list[str]:
        if self.mode not in MODES:
            return [f"mode must be one of {', '.join(MODES)}, got {self.mode!r}"]
        cps = self.compute_parties
        if not isinstance(cps, tuple) or not all(isinstance(c, str) and c for c in cps):
            return ["compute_parties must be a tuple of non-empty party names"]
        if self.mode == "segments":
            return ["compute_parties is only used in mode 'mpc3'"] if cps else []
        problems = []
        if self.segment_threshold != 0:
            problems.append(
                f"segment_threshold must be 0 in mode 'mpc3' (got {self.segment_threshold}): "
                "no partial similarities are computed or revealed there"
            )
        if cps:
            if len(cps) != 3 or len(set(cps)) != 3:
                problems.append(
                    f"mode 'mpc3' needs exactly 3 distinct compute_parties, got {list(cps)}"
                )
        elif isinstance(self.parties, tuple) and len(self.parties) < 3:
            problems.append(
                f"mode 'mpc3' with P={len(self.parties)} parties needs compute_parties "
                "(three names, the third a helper node)"
            )
        return problems

    def _target_problems(self) -> list[str]:
        problems = []
        if self.target not in TARGETS:
            problems.append(f"target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        p = len(self.parties) if isinstance(self.parties, tuple) else 0
        if (
            isinstance(self.min_parties, bool)
            or not isinstance(self.min_parties, int)
            or not 2 <= self.min_parties <= max(p, 2)
        ):
            problems.append(f"min_parties must be an integer in 2..P={p}, got {self.min_parties!r}")
        if self.target == "any" and p > MAX_ANY_PARTIES:
            problems.append(
                f"target 'any' supports at most {MAX_ANY_PARTIES} parties, got P={p} "
                "(use target 'all')"
            )
        if self.solver not in SOLVERS:
            problems.append(f"solver must be one of {', '.join(SOLVERS)}, got {self.solver!r}")
        return problems

    @property
    def compute_party_names(self) -> tuple[str, str, str]:
        """The three compute parties of mode mpc3 (given, or the first three parties)."""
        names = self.compute_parties or self.parties[:3]
        if len(names) != 3:
            raise ParameterError("mode 'mpc3' needs three compute parties")
        return (names[0], names[1], names[2])

    @property
    def party_count(self) -> int:
        """P, the number of parties."""
        return len(self.parties)

    @property
    def segment_bits(self) -> int:
        """l / P, the width of every segment."""
        return self.filter_bits // len(self.parties)


def default_segment_threshold(match_threshold: float) -> float:
    """The recommended s_m for a given s_t: ``max(0, s_t - 0.1)``.

    Evidence (tests/unit/protocol/test_recall.py, docs/engine.md): on corrupted synthetic person
    records (s_t = 0.8, P = 3, 5, 7), s_m = s_t - 0.1 lost at most 1 of ~300-700 true matches that
    s_m = 0 found, whereas s_m = s_t lost up to 4%; the filter still removes most non-matches.
    """
    return max(0.0, round(match_threshold - DEFAULT_SEGMENT_MARGIN, 12))
