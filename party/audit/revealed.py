"""Uniqueness of what the protocol reveals: blocking-key digests, each outgoing segment, full filters.

A co-party receives, per record in a common block, a pseudonym, the record's blocking-key digests (all B
of them, together) and one segment of its filter. These measures treat each of those as a key and count
how many records it singles out. They are computed on all the party's records: which blocks are common is
only known during the run, so this is the worst case (every block common).

Digest 0 means "no blocking-key value" (the encoder's contract); such a record is in no block for that key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.audit.stats import Rate
from party.audit.uniqueness import (
    DEFAULT_K,
    KeyUniqueness,
    crowd_sizes,
    factorize,
    row_uniqueness,
)
from party.encoding.bits import check_rows, segment_bounds, slice_bits


@dataclass(frozen=True)
class BlockKeyStats:
    """Block-size distribution of one blocking key."""

    key: int  # index of the blocking key in the schema
    records_with_value: int
    blocks: int
    alone: Rate  # records alone in their block, of records with a value
    largest_block: int
    mean_block: float
    sizes: np.ndarray = field(repr=False)  # size of every block (sorted descending)

    def size_histogram(self) -> dict[str, int]:
        """Number of blocks per size class (1, 2, 3-4, 5-9, 10-19, ..., powers-of-ten-ish bins)."""
        edges = [1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 10_000, 100_000]
        out: dict[str, int] = {}
        for lo, hi in zip(edges, [*edges[1:], None], strict=True):
            sel = self.sizes >= lo if hi is None else (self.sizes >= lo) & (self.sizes < hi)
            count = int(np.count_nonzero(sel))
            if count:
                label = f"{lo}+" if hi is None else (str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}")
                out[label] = count
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "records_with_value": self.records_with_value,
            "blocks": self.blocks,
            "alone": self.alone.to_dict(),
            "largest_block": self.largest_block,
            "mean_block": self.mean_block,
            "size_histogram": self.size_histogram(),
        }


@dataclass(frozen=True)
class BlockingReveal:
    """What the blocking digests reveal."""

    records: int
    keys: tuple[BlockKeyStats, ...]
    alone_in_some_block: Rate  # records alone in at least one of their blocks
    no_block: Rate  # records without any blocking-key value (never sent)
    digest_tuple: KeyUniqueness | None  # uniqueness of the whole digest tuple a co-party sees

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "keys": [k.to_dict() for k in self.keys],
            "alone_in_some_block": self.alone_in_some_block.to_dict(),
            "no_block": self.no_block.to_dict(),
            "digest_tuple": self.digest_tuple.to_dict() if self.digest_tuple else None,
        }


def blocking_reveal(block_digests: np.ndarray, *, k: int = DEFAULT_K) -> BlockingReveal:
    """Block sizes per key, share alone in a block, and uniqueness of the digest tuple.

    ``block_digests`` is (n, B) uint64 as in EncodedRecords; B may be 0 (no blocking: one block).
    """
    if block_digests.ndim != 2:
        raise ValueError(f"block digests must be 2-D (n, B), got {block_digests.ndim}-D")
    n, b = block_digests.shape
    keys: list[BlockKeyStats] = []
    alone_any = np.zeros(n, dtype=bool)
    has_any = np.zeros(n, dtype=bool)
    for j in range(b):
        col = block_digests[:, j]
        has = col != 0
        has_any |= has
        vals = col[has]
        codes = factorize(np.ascontiguousarray(vals))
        crowd = crowd_sizes(codes)
        alone = crowd == 1
        idx = np.flatnonzero(has)
        alone_any[idx[alone]] = True
        sizes = (
            np.sort(np.bincount(codes.codes, minlength=codes.card))[::-1]
            if vals.size
            else np.zeros(0, np.int64)
        )
        keys.append(
            BlockKeyStats(
                key=j,
                records_with_value=int(vals.size),
                blocks=codes.card,
                alone=Rate(int(np.count_nonzero(alone)), int(vals.size)),
                largest_block=int(sizes[0]) if sizes.size else 0,
                mean_block=float(vals.size / codes.card) if codes.card else 0.0,
                sizes=sizes,
            )
        )
    if b == 0:
        has_any[:] = True
    tuple_u = row_uniqueness(block_digests, k=k) if b and n else None
    return BlockingReveal(
        records=n,
        keys=tuple(keys),
        alone_in_some_block=Rate(int(np.count_nonzero(alone_any)), n),
        no_block=Rate(int(np.count_nonzero(~has_any)), n),
        digest_tuple=tuple_u,
    )


@dataclass(frozen=True)
class SegmentReveal:
    """Uniqueness of each segment and of the full filter."""

    parties: int
    filter_bits: int
    segment_bits: int
    segments: tuple[KeyUniqueness, ...]  # segment j goes to party j
    full: KeyUniqueness

    def to_dict(self) -> dict[str, Any]:
        return {
            "parties": self.parties,
            "filter_bits": self.filter_bits,
            "segment_bits": self.segment_bits,
            "segments": [s.to_dict() for s in self.segments],
            "full_filter": self.full.to_dict(),
        }


def segment_reveal(
    filters: np.ndarray, filter_bits: int, parties: int, *, k: int = DEFAULT_K
) -> SegmentReveal:
    """Share of records whose segment pattern (and whose full filter) is unique / below k."""
    check_rows(filters, filter_bits)
    bounds = segment_bounds(filter_bits, parties)
    segs = tuple(row_uniqueness(slice_bits(filters, a, b), k=k) for a, b in bounds)
    return SegmentReveal(
        parties=parties,
        filter_bits=filter_bits,
        segment_bits=filter_bits // parties,
        segments=segs,
        full=row_uniqueness(filters, k=k),
    )
