"""Segment shares: what party i sends party j (segment j of every record in a common block).

Wire content of a ``SegmentShare`` (plain numpy arrays + ints, serialised by the node layer):
``source`` and ``target`` are party indices in ring order; ``segment_bits`` = l / P; row r describes
one of the source's records that lies in at least one common block: ``pseudonyms[r]`` (uint64) is the
record's per-run pseudonym, drawn from the OS CSPRNG, non-zero, unique within the source party and
identical in every share the source sends in this run; ``block_positions[r]`` (B int32) are the
record's blocking digests as positions in the run's sorted common-block list (every party holds the
same list), -1 for every digest that is not a common block (a co-party knows the HMAC key, so
non-common digests would leak blocking-key values); ``segments[r]`` is bit range
``[target * l/P, (target + 1) * l/P)`` of the record's filter, repacked from position 0 in the
layout of ``party.encoding.bits``. Rows are sorted by pseudonym, so the row order reveals nothing of
the source table's order. (Positions instead of the 8-byte digests: half the bytes, and the receiver
needs no digest lookup.)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from party.encoding.bits import BitLayoutError, check_rows, words_for
from party.protocol._numba_blocks import positions_named, strictly_increasing
from party.protocol.blocks import has_duplicates
from party.protocol.errors import ProtocolError, ShareError
from party.protocol.kernel import read_only


@dataclass(frozen=True)
class SegmentShare:
    """What party ``source`` sends to party ``target`` (see the module docstring)."""

    source: int
    target: int
    segment_bits: int
    pseudonyms: np.ndarray  # (n,) uint64
    block_positions: np.ndarray  # (n, B) int32: positions in the common blocks, -1: none
    segments: np.ndarray  # (n, words_for(segment_bits)) uint64

    def __len__(self) -> int:
        return int(self.pseudonyms.shape[0])


def new_pseudonyms(n: int, random_bytes: Callable[[int], bytes] = os.urandom) -> np.ndarray:
    """n distinct non-zero uint64 pseudonyms from a CSPRNG (``os.urandom``).

    Assumption: the OS CSPRNG output is uniform; collisions among 2^64 values are redrawn, so the
    result is a uniformly random injective assignment (the ids carry no information about records).
    """
    return pseudonyms_in_order(n, random_bytes)[0]


def pseudonyms_in_order(
    n: int, random_bytes: Callable[[int], bytes] = os.urandom
) -> tuple[np.ndarray, np.ndarray]:
    """``new_pseudonyms(n, random_bytes)`` and the permutation that sorts them (their argsort),
    found on the way (the check for repeats sorts them)."""
    out = np.frombuffer(random_bytes(8 * n), dtype="<u8").astype(np.uint64)
    for _ in range(64):
        # distinct values have one sorting permutation: numpy's default argsort (vectorised,
        # ~3x faster than the stable one at 1 M) finds it; repeats take the stable path below
        order = np.argsort(out)
        ordered = out[order]
        if n == 0 or (ordered[0] != 0 and (n < 2 or bool(np.all(ordered[1:] != ordered[:-1])))):
            return out, order
        order = np.argsort(out, kind="stable")
        ordered = out[order]
        bad = np.zeros(n, dtype=bool)
        if n > 1:
            bad[order[1:][ordered[1:] == ordered[:-1]]] = True  # later copies of a value
        bad |= out == 0
        count = int(bad.sum())
        out[bad] = np.frombuffer(random_bytes(8 * count), dtype="<u8").astype(np.uint64)
    raise ShareError("could not draw distinct pseudonyms (is the random source broken?)")


def check_addressing(
    share: Any,
    fields: tuple[str, ...],
    *,
    parties: int,
    target: int,
    error: type[ProtocolError],
    noun: str = "share",
    source_kind: str = "party",
    target_kind: str = "party",
) -> int:
    """Check a share's integer header ``fields`` (with ``source`` and ``target``); return the source.

    Raises ``error`` unless every field is an integer, the source is a party index and the share
    is addressed to ``target``.
    """
    for name in fields:
        v = getattr(share, name)
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise error(f"{noun} field {name} must be an integer")
    src = int(share.source)
    if not 0 <= src < parties:
        raise error(f"{noun} source {src} is not a {source_kind} index (0..{parties - 1})")
    to = int(share.target)
    if to != target:
        raise error(f"{noun} from party {src} is addressed to {target_kind} {to}, not {target}")
    return src


def check_record_columns(
    what: str,
    pseudonyms: Any,
    block_digests: Any,
    digest_width: int | None,
    error: type[Exception],
    column: str = "block_digests",
    dtype: Any = np.uint64,
) -> int:
    """Check the per-record columns every share carries (pseudonyms, (n, B) block digests, or
    block positions with ``column`` and ``dtype``); return n. Raises ``error`` with a message
    starting with ``what``."""
    p, d = pseudonyms, block_digests
    if not isinstance(p, np.ndarray) or p.ndim != 1 or p.dtype != np.uint64:
        raise error(f"{what}: pseudonyms must be a 1-D uint64 array")
    n = int(p.shape[0])
    if (
        not isinstance(d, np.ndarray)
        or d.ndim != 2
        or d.dtype != dtype
        or d.shape[0] != n
        or d.shape[1] < 1
    ):
        raise error(f"{what}: {column} must be an ({n}, B) {np.dtype(dtype).name} array")
    if digest_width is not None and d.shape[1] != digest_width:
        raise error(f"{what}: {d.shape[1]} digests per record, expected {digest_width}")
    return n


def validate_share(
    share: SegmentShare,
    *,
    target: int,
    parties: int,
    segment_bits: int,
    common_count: int,
    digest_width: int | None,
) -> np.ndarray:
    """Raise ShareError unless ``share`` is a well-formed share for party ``target``; return its
    (n, B) int32 block positions (C-contiguous; what the comparison's block index is built from).

    Checks source/target indices, segment width, array dtypes and shapes, padding bits, pseudonym
    uniqueness (and non-zero), and that every row names at least one common block and no other
    position (each in -1..``common_count`` - 1, ``common_count`` the run's common blocks).
    ``digest_width`` (B) is checked when given.
    """
    if not isinstance(share, SegmentShare):
        raise ShareError("expected a SegmentShare")
    src = check_addressing(
        share,
        ("source", "target", "segment_bits"),
        parties=parties,
        target=target,
        error=ShareError,
    )
    if src == target:
        raise ShareError(f"party {target} cannot receive a share from itself")
    if int(share.segment_bits) != segment_bits:
        raise ShareError(
            f"share from party {src} has {share.segment_bits}-bit segments, expected {segment_bits}"
        )
    p, d, s = share.pseudonyms, share.block_positions, share.segments
    what = f"share from party {src}"
    n = check_record_columns(what, p, d, digest_width, ShareError, "block_positions", np.int32)
    if not isinstance(s, np.ndarray) or s.ndim != 2 or s.dtype != np.uint64 or s.shape[0] != n:
        raise ShareError(f"share from party {src}: segments must be an ({n}, words) uint64 array")
    if s.shape[1] != words_for(segment_bits):
        raise ShareError(
            f"share from party {src}: segments have {s.shape[1]} words, "
            f"{segment_bits} bits need {words_for(segment_bits)}"
        )
    try:
        check_rows(s, segment_bits)
    except BitLayoutError as exc:
        raise ShareError(f"share from party {src}: segments: {exc}") from None
    if n and np.any(p == 0):
        raise ShareError(f"share from party {src}: pseudonym 0 is reserved")
    # sorted (as honest parties send them) means unique: the sort only for other orders
    if n and not strictly_increasing(p) and has_duplicates(p):
        raise ShareError(f"share from party {src}: pseudonyms are not unique")
    at = np.ascontiguousarray(d)
    named = positions_named(read_only(at, np.int32), int(common_count))  # one compiled variant
    if named == 1:
        raise ShareError(
            f"share from party {src}: a row names a block position outside the "
            f"{common_count} common blocks"
        )
    if named == 2:
        raise ShareError(f"share from party {src}: a row belongs to no common block")
    return at
