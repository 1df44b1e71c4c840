"""Candidate sets of mode mpc3, enumerated identically by the three compute parties.

A compute party knows, from the input shares, every data party's run pseudonyms (sorted) and common
block digests (0 where not common). Candidate sets are exactly those of the segment protocol and the
oracle: one record per party sharing a common block (any of the B digests), with the same capped
sub-blocking (``party.protocol.blocks.sub_blocks``, records ordered by pseudonym), de-duplicated
across blocks. A set is returned as row positions into each party's pseudonym array; because those
arrays are sorted, ordering sets by positions orders them by pseudonym tuple. The order is a
deterministic function of the inputs, so the three compute parties cut identical batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from party.mpc._numba_gates import expand_blocks
from party.protocol.blocks import block_index, common_blocks, distinct_digests, sub_blocks
from party.protocol.errors import MemoryBudgetError


def _expand(
    rows: Sequence[np.ndarray], starts: np.ndarray, sizes: np.ndarray, dtype: np.dtype
) -> np.ndarray:
    """All sets of some blocks: (sum of products, P); the last party varies fastest."""
    flat = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
    offsets = np.cumsum([0] + [int(r.size) for r in rows[:-1]]).astype(np.int64)
    count = int(np.prod(sizes, axis=0).sum())
    out = np.empty((count, sizes.shape[0]), dtype=dtype)
    expand_blocks(flat, offsets, starts.astype(np.int64), sizes.astype(np.int64), out)
    return out


def candidate_sets(
    pseudonyms: Sequence[np.ndarray],
    digests: Sequence[np.ndarray],
    max_block_size: int | None,
    max_sets: int | None = None,
) -> np.ndarray:
    """(T, P) row positions of every distinct candidate set (see the module docstring).

    Raises MemoryBudgetError, before expanding anything, when more than ``max_sets`` sets
    (duplicates across blocks included) would be enumerated.

    ``pseudonyms[j]`` is party j's sorted (n_j,) uint64 pseudonyms, ``digests[j]`` its (n_j, B)
    common block digests. Positions are int32 when every n_j < 2^31. With B = 1 a set lies in one
    block only and the sets come in block order; with B > 1 they are de-duplicated and sorted.
    """
    p = len(pseudonyms)
    dtype = (
        np.dtype(np.int32) if max(int(x.size) for x in pseudonyms) < 2**31 else np.dtype(np.int64)
    )
    common = common_blocks([distinct_digests(d) for d in digests])
    indices = [block_index(digests[j], common, keys=pseudonyms[j]) for j in range(p)]
    if common.size == 0:
        return np.zeros((0, p), dtype=dtype)
    sizes = np.stack([ix.sizes() for ix in indices])  # (P, blocks)
    starts = np.stack([ix.starts[:-1] for ix in indices])
    rows = [ix.rows for ix in indices]
    live = np.all(sizes > 0, axis=0)
    capped = (
        np.zeros(live.size, dtype=bool)
        if max_block_size is None
        else sizes.max(axis=0) > max_block_size
    )
    plain = np.flatnonzero(live & ~capped)
    subs = [
        sub
        for blk in np.flatnonzero(live & capped).tolist()
        for sub in sub_blocks([indices[j].members(blk) for j in range(p)], max_block_size)
        if all(m.size for m in sub)
    ]
    count = int(np.prod(sizes[:, plain].astype(np.float64), axis=0).sum())
    count += sum(int(np.prod([m.size for m in sub], dtype=np.float64)) for sub in subs)
    if max_sets is not None and count > max_sets:
        raise MemoryBudgetError(
            f"{count} candidate sets (with duplicates across blocking passes) exceed the "
            f"{max_sets} the memory budget allows; set max_block_size, use finer blocking, or "
            "raise the budget"
        )
    parts: list[np.ndarray] = []
    if plain.size:
        parts.append(_expand(rows, starts[:, plain], sizes[:, plain], dtype))
    zero = np.zeros((p, 1), dtype=np.int64)
    for sub in subs:
        sub_sizes = np.array([[m.size] for m in sub], dtype=np.int64)
        parts.append(_expand(sub, zero, sub_sizes, dtype))
    sets = np.concatenate(parts) if parts else np.zeros((0, p), dtype=dtype)
    if digests[0].shape[1] > 1 and sets.shape[0] > 1:
        sets = _unique_rows(sets, [int(x.size) for x in pseudonyms])
    return sets


def _unique_rows(sets: np.ndarray, counts: list[int]) -> np.ndarray:
    """Distinct rows of ``sets`` in lexicographic order (packed into one uint64 key when it fits)."""
    bits = [max(1, (c - 1).bit_length()) for c in counts]
    if sum(bits) <= 64:
        key = np.zeros(sets.shape[0], dtype=np.uint64)
        for j, b in enumerate(bits):
            key <<= np.uint64(b)
            key |= sets[:, j].astype(np.uint64)
        dtype, p = sets.dtype, sets.shape[1]
        del sets
        key.sort()
        keep = np.ones(key.size, dtype=bool)
        keep[1:] = key[1:] != key[:-1]
        key = key[keep]
        out = np.empty((key.size, p), dtype=dtype)
        for j in range(p - 1, -1, -1):
            out[:, j] = key & np.uint64((1 << bits[j]) - 1)
            key >>= np.uint64(bits[j])
        return out
    order = np.lexsort(sets.T[::-1])
    s = sets[order]
    keep = np.ones(s.shape[0], dtype=bool)
    keep[1:] = np.any(s[1:] != s[:-1], axis=1)
    return s[keep]
