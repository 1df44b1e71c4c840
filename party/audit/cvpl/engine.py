"""Blockwise nearest-neighbour search: each source record's best (and second-best) target in its block.

Every CVPL measure is a re-thresholding of one pass of this module: for every record x of the source
(the original D) it finds, among the target records y (the release D') that share x's block key, the
largest similarity s(x, y), the index of that y and, optionally, the second-largest similarity. The
thresholds tau are applied afterwards (``exceed_counts``), so the similarities are computed once per
blocking level whatever the number of thresholds ("threshold reuse").

Two evaluation modes give the same answers up to floating-point rounding:
- matrix mode, for large blocks: the source rows of the block are processed ``chunk`` rows at a time
  against all target rows of the block, so memory is O(chunk x block size) <= O(chunk x N);
- pair mode, for the many tiny blocks of fine blocking levels: the (source, target) pairs of many
  blocks are enumerated explicitly and reduced per source with ufunc.at, which avoids a Python
  iteration per block.
The mode depends only on the block sizes, never on ``chunk``, so chunked and unchunked runs agree
exactly. Ties are broken towards the lowest target index.

A source record without any target in its block gets ``best = NaN`` and ``index = -1``; NaN never
compares >= tau, so such a record is never counted as linked.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from party.encoding.bits import popcount_rows, unpack_rows

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 2048
# Upper bound on similarity-matrix elements held at once (float32: 64 MiB, beside the float64
# product it is rounded from: 128 MiB).
MAX_ELEMENTS = 1 << 24
# Blocks with at most this many pairs go through pair mode.
PAIR_MODE_MAX_PAIRS = 4096
PAIR_BATCH = 1 << 22


class Kernel(Protocol):
    """A similarity function between source and target records addressed by index."""

    def prepare_target(self, tgt: np.ndarray) -> Any:
        """Whatever ``matrix`` needs about the target rows ``tgt`` (gathered once per block)."""

    def matrix(self, src: np.ndarray, prepared: Any) -> np.ndarray:
        """(len(src), len(tgt)) float similarities of the source rows ``src``."""

    def pairs(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        """Similarities of the pairs (src[i], tgt[i]), a 1-D float array."""


class CosineKernel:
    """Cosine similarity of dense vectors (rows are L2-normalised here; zero rows stay zero).

    Rows are stored in ``dtype``, but dot products are summed in float64 and then rounded to
    ``dtype``: a float32 BLAS product's last bit depends on the matrix shape (the kernel BLAS picks
    for it, seen on one AMD EPYC machine: 26 of 500 best similarities differed by 1 ulp between
    chunk sizes), which would make a chunked run differ from an unchunked one. Products of float32
    values are exact in float64, so the rounded result no longer depends on the shape.
    """

    def __init__(self, source: np.ndarray, target: np.ndarray, dtype: Any = np.float32) -> None:
        self.source = _normalise(source).astype(dtype, copy=False)
        self.target = _normalise(target).astype(dtype, copy=False)

    def prepare_target(self, tgt: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(self.target[tgt].T, dtype=np.float64)

    def matrix(self, src: np.ndarray, prepared: np.ndarray) -> np.ndarray:
        product = self.source[src].astype(np.float64) @ prepared
        return product.astype(self.source.dtype, copy=False)

    def pairs(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        s, t = self.source[src].astype(np.float64), self.target[tgt].astype(np.float64)
        return np.einsum("ij,ij->i", s, t).astype(self.source.dtype, copy=False)


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


class BitKernel:
    """Dice (2c / (|a| + |b|)) or Jaccard (c / (|a| + |b| - c)) of packed bit rows.

    c, the number of common 1-bits, is a float32 product of unpacked 0/1 matrices in matrix mode
    (exact: counts are far below 2^24) and an AND + popcount of packed words in pair mode. Two empty
    filters have similarity 0 (the anonlink convention).
    """

    def __init__(self, source: np.ndarray, target: np.ndarray, nbits: int, metric: str) -> None:
        if metric not in ("dice", "jaccard"):
            raise ValueError(f"unknown bit metric {metric!r}")
        self.source, self.target, self.nbits, self.metric = source, target, nbits, metric
        self.src_pop = popcount_rows(source).astype(np.float32)
        self.tgt_pop = popcount_rows(target).astype(np.float32)

    def _finish(self, common: np.ndarray, total: np.ndarray) -> np.ndarray:
        denom = total if self.metric == "dice" else total - common
        num = 2.0 * common if self.metric == "dice" else common
        return np.divide(num, denom, out=np.zeros_like(num, dtype=np.float32), where=denom > 0)

    def prepare_target(self, tgt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        bits = unpack_rows(self.target[tgt], self.nbits).astype(np.float32)
        return np.ascontiguousarray(bits.T), self.tgt_pop[tgt]

    def matrix(self, src: np.ndarray, prepared: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        bits_t, pop_t = prepared
        common = unpack_rows(self.source[src], self.nbits).astype(np.float32) @ bits_t
        return self._finish(common, self.src_pop[src][:, None] + pop_t[None, :])

    def pairs(self, src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
        common = popcount_rows(self.source[src] & self.target[tgt]).astype(np.float32)
        return self._finish(common, self.src_pop[src] + self.tgt_pop[tgt])


@dataclass
class TopMatches:
    """Per source record: best similarity (NaN if no candidate), its target index (-1), and more."""

    best: np.ndarray
    index: np.ndarray
    second: np.ndarray | None
    candidates: np.ndarray
    pairs_compared: int


def _runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct values, start positions and lengths of the runs of an already sorted array."""
    if not len(sorted_keys):
        empty = np.zeros(0, dtype=np.int64)
        return sorted_keys[:0], empty, empty
    starts = np.concatenate([[0], np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1])
    counts = np.diff(np.concatenate([starts, [len(sorted_keys)]]))
    return sorted_keys[starts], starts, counts


def group_blocks(
    source_keys: np.ndarray, target_keys: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(source indices, target indices) of every block key present on both sides, indices ascending."""
    s_order = np.argsort(source_keys, kind="stable")
    t_order = np.argsort(target_keys, kind="stable")
    s_uniq, s_start, s_count = _runs(source_keys[s_order])
    t_uniq, t_start, t_count = _runs(target_keys[t_order])
    _, i_s, i_t = np.intersect1d(s_uniq, t_uniq, assume_unique=True, return_indices=True)
    for a, b in zip(i_s.tolist(), i_t.tolist(), strict=True):
        yield (
            s_order[s_start[a] : s_start[a] + s_count[a]],
            t_order[t_start[b] : t_start[b] + t_count[b]],
        )


def blockwise_top(
    kernel: Kernel,
    source_keys: np.ndarray,
    target_keys: np.ndarray,
    *,
    chunk: int = DEFAULT_CHUNK,
    top2: bool = False,
    pair_mode_max_pairs: int = PAIR_MODE_MAX_PAIRS,
) -> TopMatches:
    """Best target per source record within its block (see the module docstring)."""
    if chunk < 1:
        raise ValueError("chunk must be >= 1")
    n = len(source_keys)
    best = np.full(n, np.nan, dtype=np.float64)
    index = np.full(n, -1, dtype=np.int64)
    second = np.full(n, np.nan, dtype=np.float64) if top2 else None
    candidates = np.zeros(n, dtype=np.int64)
    pairs_compared = 0
    small: list[tuple[np.ndarray, np.ndarray]] = []
    small_pairs = 0
    for src, tgt in group_blocks(source_keys, target_keys):
        candidates[src] = len(tgt)
        npairs = len(src) * len(tgt)
        pairs_compared += npairs
        if npairs <= pair_mode_max_pairs:
            small.append((src, tgt))
            small_pairs += npairs
            if small_pairs >= PAIR_BATCH:
                _pair_mode(kernel, small, best, index, second)
                small, small_pairs = [], 0
            continue
        prepared = kernel.prepare_target(tgt)
        rows = max(1, min(chunk, MAX_ELEMENTS // max(1, len(tgt))))
        for lo in range(0, len(src), rows):
            part = src[lo : lo + rows]
            sims = np.asarray(kernel.matrix(part, prepared))
            arg = sims.argmax(axis=1)
            ar = np.arange(len(part))
            best[part] = sims[ar, arg]
            index[part] = tgt[arg]
            if second is not None and len(tgt) > 1:
                sims[ar, arg] = -np.inf
                second[part] = sims.max(axis=1)
    if small:
        _pair_mode(kernel, small, best, index, second)
    return TopMatches(best, index, second, candidates, pairs_compared)


def _pair_mode(
    kernel: Kernel,
    blocks: list[tuple[np.ndarray, np.ndarray]],
    best: np.ndarray,
    index: np.ndarray,
    second: np.ndarray | None,
) -> None:
    """Enumerate every pair of the given small blocks and reduce per source record."""
    ns = np.array([len(s) for s, _ in blocks])
    nt = np.array([len(t) for _, t in blocks])
    src_all = np.concatenate([s for s, _ in blocks])
    tgt_all = np.concatenate([t for _, t in blocks])
    # Pair p belongs to block b; within it, source position p // nt_b and target position p % nt_b.
    per_block = ns * nt
    block_of_pair = np.repeat(np.arange(len(blocks)), per_block)
    offset = np.repeat(np.cumsum(per_block) - per_block, per_block)
    local = np.arange(per_block.sum()) - offset
    s_base = np.repeat(np.cumsum(ns) - ns, per_block)
    t_base = np.repeat(np.cumsum(nt) - nt, per_block)
    nt_p = nt[block_of_pair]
    ps = src_all[s_base + local // nt_p]
    pt = tgt_all[t_base + local % nt_p]
    sims = np.asarray(kernel.pairs(ps, pt), dtype=np.float64)
    touched = np.unique(ps)
    acc = np.full(len(best), -np.inf)
    np.maximum.at(acc, ps, sims)
    best[touched] = acc[touched]
    # Lowest target index among the pairs reaching the maximum.
    at_max = sims == acc[ps]
    arg = np.full(len(best), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(arg, ps[at_max], pt[at_max])
    index[touched] = arg[touched]
    if second is not None:
        keep = pt != arg[ps]
        acc2 = np.full(len(best), -np.inf)
        np.maximum.at(acc2, ps[keep], sims[keep])
        has2 = np.unique(ps[keep])
        second[has2] = acc2[has2]


def reference_top(
    kernel: Kernel, source_keys: np.ndarray, target_keys: np.ndarray, top2: bool = False
) -> TopMatches:
    """Unoptimised oracle: one source record at a time against its whole block (for tests/benchmarks)."""
    n = len(source_keys)
    best = np.full(n, np.nan)
    index = np.full(n, -1, dtype=np.int64)
    second = np.full(n, np.nan) if top2 else None
    candidates = np.zeros(n, dtype=np.int64)
    pairs = 0
    for i in range(n):
        tgt = np.flatnonzero(target_keys == source_keys[i])
        candidates[i] = len(tgt)
        if not len(tgt):
            continue
        pairs += len(tgt)
        sims = np.asarray(kernel.pairs(np.full(len(tgt), i), tgt), dtype=np.float64)
        j = int(np.argmax(sims))
        best[i], index[i] = sims[j], tgt[j]
        if second is not None and len(tgt) > 1:
            second[i] = np.delete(sims, j).max()
    return TopMatches(best, index, second, candidates, pairs)


def exceed_counts(best: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Number of records with best >= tau, for every tau (one sort, then binary search)."""
    ordered = np.sort(-np.asarray(best, dtype=np.float64))  # NaN sorts last
    return np.searchsorted(ordered, -np.asarray(taus, dtype=np.float64), side="right")


def exceed_correct_counts(
    best: np.ndarray, correct: np.ndarray, taus: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(records with best >= tau, of those how many are correct), for every tau."""
    neg = -np.asarray(best, dtype=np.float64)
    order = np.argsort(neg, kind="stable")
    cum = np.concatenate([[0], np.cumsum(np.asarray(correct, dtype=np.int64)[order])])
    linked = np.searchsorted(neg[order], -np.asarray(taus, dtype=np.float64), side="right")
    return linked, cum[linked]
