"""What each protocol mode reveals, and which audit measures apply to it.

Two modes (``ProtocolParameters.mode``; docs/mpc.md):

- ``segments`` (Vatsalan & Christen): party i sends segment j of each record's (hardened) filter to
  party j, with the record's blocking digests; masked sums travel the ring; matches come back. A
  co-party holding the hashing key can decode the segments it receives, so every segment measure
  (uniqueness of segment patterns, frequency, bit sensitivity, the insider attack, CVPL) applies.
- ``mpc3`` (replicated boolean sharing among three compute parties, honest majority): a party sends
  its filters and 1-bit counts only as secret shares; any one compute party's view of them is
  uniformly random. What leaves the party in the clear: its blocking digests (to the co-parties and
  the compute parties) and the output (the match bit of each candidate set, the Dice of matched sets).
  The segment measures do not apply: there is no segment to decode.

The statements here are shown in the audit report (JSON ``meta.revealed`` / ``meta.not_run``, HTML
"What this run reveals"); docs/mpc.md ("What is revealed") says the same in prose.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from party.errors import PprlError
from party.protocol.params import MODES

SEGMENTS, MPC3 = MODES
DEFAULT_MODE = SEGMENTS

#: Audit measures that look at filter bits or segments: they run in segments mode only.
SEGMENT_MEASURES = ("segments", "frequency", "sensitivity", "insider", "cvpl")

_MPC3_NOT_RUN = (
    "not run in mode mpc3: no party receives another party's filter bits or segments, only "
    "replicated secret shares that are uniformly random to any single compute party"
)
NOT_RUN_IN_MPC3: Mapping[str, str] = {
    "segments": "uniqueness of segment patterns: " + _MPC3_NOT_RUN,
    "frequency": "frequency attack on segments: " + _MPC3_NOT_RUN,
    "sensitivity": "bit sensitivity of revealed bits: " + _MPC3_NOT_RUN,
    "insider": (
        "insider segment attack: "
        + _MPC3_NOT_RUN
        + "; the attack decodes revealed filter bits with the hashing key, and in mpc3 none are "
        "revealed (it would need two colluding compute parties, which the honest-majority model "
        "excludes)"
    ),
    "cvpl": "CVPL on revealed segments: " + _MPC3_NOT_RUN,
}


class ModeError(PprlError, ValueError):
    """An unknown protocol mode was given to the audit."""


def check_mode(mode: Any, where: str = "mode") -> str:
    """``mode`` if it is a known protocol mode, else ModeError naming ``where``."""
    if mode not in MODES:
        shown = repr(mode) if isinstance(mode, str) and len(mode) <= 32 else type(mode).__name__
        raise ModeError(
            f"{where}: unknown protocol mode {shown}; expected one of {', '.join(MODES)}"
        )
    return str(mode)


def mode_of(protocol_params: Any, explicit: str | None = None) -> str:
    """The protocol mode: ``explicit`` if given, else the parameters' ``mode``, else segments."""
    if explicit is not None:
        return check_mode(explicit)
    if isinstance(protocol_params, Mapping):
        found = protocol_params.get("mode")
    else:
        found = getattr(protocol_params, "mode", None)
    return DEFAULT_MODE if found is None else check_mode(found, "protocol parameters: mode")


def revealed_statement(mode: str, parties: int, self_index: int | None) -> list[str]:
    """What this party reveals, and to whom, in ``mode`` (plain sentences for the report)."""
    if mode == MPC3:
        return [
            "Blocking-key digests (keyed HMAC): the set of blocks this party has, to every "
            "co-party; and, with a pseudonym, the digests of each record in a common block, to the "
            "three compute parties: they learn which pseudonymous records share blocks (block "
            "structure), and one holding the linkage secret can digest candidate values and so "
            "learn a record's blocking-key values (e.g. a Soundex code).",
            "Filters and 1-bit counts of records in common blocks leave this party only as "
            "replicated secret shares to the three compute parties; one compute party's view is "
            "uniformly random. Two colluding compute parties could reconstruct every input.",
            "Output: the match bit of every candidate set (to the compute parties); for matched sets "
            "only, their common 1-bit count and total 1-bit count, hence their Dice (to the compute "
            "parties), and their Dice with a linkage id (to the data parties in the set). No counts "
            "and no Dice of non-matching sets are opened.",
            "The coordinator learns the number of records of each party, as in segments mode, and "
            "nothing else new.",
        ]
    others = [j for j in range(parties) if j != self_index]
    return [
        "Blocking-key digests (keyed HMAC): the set of blocks this party has, to every co-party; "
        "and, with a pseudonym, the digests of each record in a common block, to every co-party.",
        f"Segment j of each such record's filter (1/{parties} of its bits) to party j, for "
        f"j in {{{', '.join(map(str, others))}}}; a co-party holding the hashing key can decode "
        "what it receives (the insider attack measures how much).",
        "Masked sums along the ring, and which candidate sets each party kept (sets pruned "
        "elsewhere).",
        "Output: per matched set, a linkage id and the Dice similarity.",
    ]


def not_run(mode: str) -> dict[str, str]:
    """Measures skipped in ``mode``, each with the reason (empty for segments)."""
    return dict(NOT_RUN_IN_MPC3) if mode == MPC3 else {}
