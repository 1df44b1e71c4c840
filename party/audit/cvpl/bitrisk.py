"""CVPL on Bloom-filter bit rows: the vector-level entry point the self-audit calls on segments.

``assess_bits`` treats ``source_rows`` as the protected view an adversary holds (e.g. the segments a
co-party receives) and ``target_rows`` as the reference it links them against, or vice versa; it is
symmetric in meaning but reports per *source* record. s is Dice (default) or Jaccard on packed
uint64 rows in the layout of ``party.encoding.bits``; the blocking operator B_lambda is given as one
integer digest per record (records are compared only within equal digests); phi and psi are the
identity (the bits are the vectors). With ``truth`` (truth[i] = index in target of source i's true
counterpart, or -1), top-1 precision and the structural recall of the blocking are reported too.

Assumptions (Khvatov & Neyman, "CVPL", arXiv 2602.11015): CVPL-LR(tau) is existential - a record
counts as linkable if ANY target in its block reaches s >= tau, whether or not it is the right one -
so it is an upper-bound-style risk signal; top-1 precision (the best target is the true counterpart)
measures how often such a link would actually re-identify.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from party.audit.cvpl.engine import (
    DEFAULT_CHUNK,
    BitKernel,
    blockwise_top,
    exceed_correct_counts,
)
from party.audit.cvpl.errors import CvplError
from party.audit.stats import Rate
from party.encoding.bits import BitLayoutError, check_rows


@dataclass(frozen=True)
class BitRiskResult:
    """CVPL measures of one source/target pair of bit-row sets.

    ``linkage_rate[t]`` is CVPL-LR at ``taus[t]`` over all source records; ``top1_precision[t]`` is
    correct best links among the records linked at ``taus[t]`` (None without truth).
    ``best_similarity`` is NaN for a record with no target in its block; ``best_index`` is then -1.
    """

    metric: str
    taus: np.ndarray
    linkage_rate: list[Rate]
    top1_precision: list[Rate] | None
    best_similarity: np.ndarray
    best_index: np.ndarray
    candidates: np.ndarray
    top1_accuracy: Rate | None
    structural_recall: Rate | None
    pairs_compared: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (per-tau rates; no per-record data)."""
        finite = self.best_similarity[~np.isnan(self.best_similarity)]
        return {
            "metric": self.metric,
            "taus": [float(t) for t in self.taus],
            "linkage_rate": [r.to_dict() for r in self.linkage_rate],
            "top1_precision": None
            if self.top1_precision is None
            else [r.to_dict() for r in self.top1_precision],
            "top1_accuracy": None if self.top1_accuracy is None else self.top1_accuracy.to_dict(),
            "structural_recall": None
            if self.structural_recall is None
            else self.structural_recall.to_dict(),
            "records": len(self.best_similarity),
            "records_with_candidates": int(finite.size),
            "pairs_compared": self.pairs_compared,
            "best_similarity_quantiles": _quantiles(finite),
        }


def _quantiles(values: np.ndarray) -> dict[str, float] | None:
    if not values.size:
        return None
    qs = (0.05, 0.25, 0.5, 0.75, 0.95)
    return {
        f"q{int(q * 100):02d}": float(v) for q, v in zip(qs, np.quantile(values, qs), strict=True)
    }


def check_taus(taus: Sequence[float] | np.ndarray, name: str = "taus") -> np.ndarray:
    """Thresholds as a sorted-as-given finite float array; CvplError if empty or not finite."""
    arr = np.asarray(taus, dtype=np.float64).reshape(-1)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        raise CvplError(f"parameter {name}: need at least one finite threshold")
    return arr


def check_keys(keys: np.ndarray, n: int, name: str) -> np.ndarray:
    """Block digests: one integer per record."""
    arr = np.asarray(keys)
    if arr.ndim != 1 or len(arr) != n:
        raise CvplError(f"parameter {name}: expected {n} block digests, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise CvplError(f"parameter {name}: block digests must be integers, got {arr.dtype}")
    return arr


def check_truth(truth: Sequence[int] | np.ndarray, n_source: int, n_target: int) -> np.ndarray:
    """Ground truth: for each source record, a target index or -1."""
    arr = np.asarray(truth)
    if arr.ndim != 1 or len(arr) != n_source or not np.issubdtype(arr.dtype, np.integer):
        raise CvplError(f"parameter truth: expected {n_source} integer target indices or -1")
    arr = arr.astype(np.int64)
    if np.any((arr < -1) | (arr >= n_target)):
        raise CvplError(f"parameter truth: indices must lie in -1..{n_target - 1}")
    return arr


def rates_from_top(
    best: np.ndarray,
    index: np.ndarray,
    taus: np.ndarray,
    truth: np.ndarray | None,
) -> tuple[list[Rate], list[Rate] | None, Rate | None]:
    """Linkage rate and top-1 precision per tau, and top-1 accuracy, by threshold reuse."""
    n = len(best)
    correct = np.zeros(n, dtype=bool) if truth is None else (index == truth) & (truth >= 0)
    linked, right = exceed_correct_counts(best, correct, taus)
    lr = [Rate(int(c), n) for c in linked]
    if truth is None:
        return lr, None, None
    prec = [Rate(int(r), int(c)) for r, c in zip(right, linked, strict=True)]
    has = truth >= 0
    acc = Rate(int(np.count_nonzero(correct & ~np.isnan(best))), int(np.count_nonzero(has)))
    return lr, prec, acc


def structural_recall(source_keys: np.ndarray, target_keys: np.ndarray, truth: np.ndarray) -> Rate:
    """Share of true pairs (truth >= 0) whose two records share a block key."""
    has = truth >= 0
    same = source_keys[has] == target_keys[truth[has]]
    return Rate(int(np.count_nonzero(same)), int(np.count_nonzero(has)))


def assess_bits(
    source_rows: np.ndarray,
    target_rows: np.ndarray,
    nbits: int,
    source_blocks: np.ndarray,
    target_blocks: np.ndarray,
    taus: Sequence[float] | np.ndarray,
    truth: Sequence[int] | np.ndarray | None = None,
    *,
    metric: str = "dice",
    chunk: int = DEFAULT_CHUNK,
) -> BitRiskResult:
    """CVPL-LR per tau (and top-1 precision with ``truth``) of packed bit rows, within blocks.

    Rows are (n, ceil(nbits/64)) uint64 in the ``party.encoding.bits`` layout; blocks are one
    integer (e.g. uint64 digest) per record; pass equal constants for "no blocking". Raises
    CvplError on malformed inputs. Memory is O(chunk x largest block) beyond the inputs.
    """
    try:
        check_rows(source_rows, nbits)
        check_rows(target_rows, nbits)
    except BitLayoutError as exc:
        raise CvplError(f"parameter source_rows/target_rows: {exc}") from None
    if metric not in ("dice", "jaccard"):
        raise CvplError(f"parameter metric: expected 'dice' or 'jaccard', got {metric!r}")
    if chunk < 1:
        raise CvplError("parameter chunk: must be >= 1")
    ns, nt = source_rows.shape[0], target_rows.shape[0]
    skeys = check_keys(source_blocks, ns, "source_blocks")
    tkeys = check_keys(target_blocks, nt, "target_blocks")
    tau_arr = check_taus(taus)
    tr = None if truth is None else check_truth(truth, ns, nt)
    top = blockwise_top(
        BitKernel(source_rows, target_rows, nbits, metric), skeys, tkeys, chunk=chunk
    )
    lr, prec, acc = rates_from_top(top.best, top.index, tau_arr, tr)
    recall = None if tr is None else structural_recall(skeys, tkeys, tr)
    return BitRiskResult(
        metric=metric,
        taus=tau_arr,
        linkage_rate=lr,
        top1_precision=prec,
        best_similarity=top.best,
        best_index=top.index,
        candidates=top.candidates,
        top1_accuracy=acc,
        structural_recall=recall,
        pairs_compared=top.pairs_compared,
    )
