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

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from party.protocol.blocks import (
    DigestLookup,
    block_index_at,
    common_blocks,
    distinct_digests,
    sub_blocks,
)
from party.protocol.errors import MemoryBudgetError
from party.protocol.kernel import compare_block_batch, compare_small_blocks, distinct_rows
from party.protocol.threads import thread_pool


def candidate_sets(
    pseudonyms: Sequence[np.ndarray],
    digests: Sequence[np.ndarray],
    max_block_size: int | None,
    max_sets: int | None = None,
    workers: int = 1,
) -> np.ndarray:
    """(T, P) row positions of every distinct candidate set (see the module docstring).

    Raises MemoryBudgetError, before expanding anything, when more than ``max_sets`` sets
    (duplicates across blocks included) would be enumerated.

    ``pseudonyms[j]`` is party j's sorted (n_j,) uint64 pseudonyms, ``digests[j]`` its (n_j, B)
    common block digests. Positions are int32 when every n_j < 2^31. With B = 1 a set lies in one
    block only and the sets come in block order; with B > 1 they are de-duplicated and sorted.
    The blocks are expanded by the comparison's many-blocks kernel with everything kept (all-zero
    one-word rows, threshold 0) on ``workers`` threads; the result does not depend on ``workers``.
    """
    p = len(pseudonyms)
    dtype = (
        np.dtype(np.int32) if max(int(x.size) for x in pseudonyms) < 2**31 else np.dtype(np.int64)
    )
    each = _per_party(workers)
    common = common_blocks(each(distinct_digests, digests))
    lookup = DigestLookup(common)

    def positions(d: np.ndarray) -> np.ndarray:
        pos, hit = lookup.find(d)
        return np.where(hit, pos, -1)

    # digests looked up on the threads one party each, then each index cut into block ranges
    indices = [
        block_index_at(pos, common.size, keys=k, workers=workers)
        for pos, k in zip(each(positions, digests), pseudonyms, strict=True)
    ]
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
    counts = [int(x.size) for x in pseudonyms]
    dedupe = digests[0].shape[1] > 1
    zero_rows = [np.zeros((n, 1), dtype=np.uint64) for n in counts]
    zero_pops = [np.zeros(n, dtype=np.int64) for n in counts]
    parts: list[np.ndarray] = []
    if plain.size:
        sets, _ = compare_block_batch(
            zero_rows,
            zero_pops,
            rows,
            starts[:, plain],
            sizes[:, plain],
            1,
            0.0,
            workers=workers,
            distinct=dedupe,
        )
        parts.append(sets)
    if subs:
        sets, _ = compare_small_blocks(
            zero_rows, zero_pops, subs, 1, 0.0, workers=workers, distinct=dedupe
        )
        parts.append(sets)
    if not parts:
        return np.zeros((0, p), dtype=dtype)
    out = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if dedupe and len(parts) > 1:
        out = out[distinct_rows(out, counts)]
    return out.astype(dtype, copy=False)


def _per_party(workers: int) -> Callable[..., list[Any]]:
    """``map`` into a list, on the kernel threads when ``workers`` > 1 (numpy sorts and the
    compiled block loops release the GIL)."""
    if workers <= 1:
        return lambda fn, *args: list(map(fn, *args))
    pool = thread_pool(workers)
    return lambda fn, *args: list(pool.map(fn, *args))
