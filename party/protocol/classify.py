"""Classification (Algo 3): multi-party Dice from the sums, threshold, greedy one-to-one, results.

``PartyResults`` is what the initiator sends party j (plain arrays, serialised by the node layer):
``party`` (its index), ``linkage_ids`` (k,) uint64 (shared by all parties for the same matched set,
numbered 1.. in the lexicographic order of the sets' pseudonym tuples, which is random), ``similarities``
(k,) float64 and ``pseudonyms`` (k,) uint64 of party j's own records only. No other party's pseudonyms
are sent. A party maps its pseudonyms back to record ids locally (``MatchRow``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def dice(parties: int, common: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Multi-party Dice ``P * c / x`` as float64 (0 where x == 0); c, x integer arrays.

    The single expression used by the engine and the oracle, so s_m = 0 results agree exactly.
    """
    c = np.asarray(common, dtype=np.int64)
    x = np.asarray(total, dtype=np.int64)
    num = (parties * c).astype(np.float64)
    den = x.astype(np.float64)
    out = np.zeros(c.shape, dtype=np.float64)
    np.divide(num, den, out=out, where=x != 0)
    return out


def greedy_one_to_one(candidates: np.ndarray, similarity: np.ndarray) -> np.ndarray:
    """Indices of sets kept by greedy one-to-one resolution (sorted ascending).

    Sets are visited by decreasing similarity, ties broken by the lexicographic order of the
    ``candidates`` rows (smaller first); a set is kept iff none of its records (per column) is
    already in a kept set. Deterministic given the same rows and similarities.
    """
    m, parties = candidates.shape
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((*candidates.T[::-1], -similarity))
    try:
        from party.protocol._numba_kernel import greedy_keep_dense
    except ImportError:  # pragma: no cover - numba is a dependency; the plain loop is the fallback
        used: list[set[int]] = [set() for _ in range(parties)]
        kept = greedy_keep(candidates[order].tolist(), used)
        return np.sort(order[np.array(kept, dtype=np.int64)])
    # the same greedy loop, compiled, on dense ids: column j's distinct records numbered from
    # offset_j (np.unique's inverse), so "record already used" is one array lookup
    ids = np.empty((m, parties), dtype=np.int64)
    offset = 0
    for j in range(parties):
        uniq, inverse = np.unique(candidates[order, j], return_inverse=True)
        ids[:, j] = inverse.reshape(-1) + offset
        offset += uniq.size
    return np.sort(order[greedy_keep_dense(ids, np.zeros(offset, dtype=np.bool_))])


def greedy_keep(rows: Iterable[Sequence[int]], used: list[set[int]]) -> list[int]:
    """The greedy one-to-one step over rows already in visiting order (decreasing similarity, ties
    by pseudonym tuple): positions of the rows kept, given the records in ``used`` (updated)."""
    kept: list[int] = []
    parties = len(used)
    for i, row in enumerate(rows):
        if any(row[j] in used[j] for j in range(parties)):
            continue
        for j in range(parties):
            used[j].add(row[j])
        kept.append(i)
    return kept


class ChunkedOneToOne:
    """The greedy one-to-one step over rows arriving chunk by chunk in visiting order (decreasing
    similarity, ties by pseudonym tuple), compiled: the records used by rows kept in earlier
    chunks are remembered as dense ids (party j's pseudonym at its position in ``known[j]``, the
    sorted pseudonyms of party j, offset past the parties before it). Keeps what ``greedy_keep``
    keeps on the same rows."""

    def __init__(self, known: Sequence[np.ndarray]) -> None:
        self._known = list(known)
        sizes = [int(k.size) for k in self._known]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._used = np.zeros(int(self._offsets[-1]), dtype=np.bool_)

    def keep(self, candidates: np.ndarray) -> np.ndarray:
        """Positions (increasing) of the rows of ``candidates`` (m, P) uint64 that are kept.

        ValueError if a row names a pseudonym outside ``known`` (its records cannot be tracked)."""
        from party.protocol._numba_kernel import greedy_keep_dense

        m = candidates.shape[0]
        ids = np.empty((m, len(self._known)), dtype=np.int64)
        for j, known in enumerate(self._known):
            col = candidates[:, j]
            pos = np.minimum(np.searchsorted(known, col), max(known.size - 1, 0))
            if m and (known.size == 0 or not np.array_equal(known[pos], col)):
                raise ValueError(f"a matched set names a pseudonym of party {j} never seen")
            ids[:, j] = pos + self._offsets[j]
        return greedy_keep_dense(ids, self._used)


@dataclass(frozen=True)
class Classification:
    """The initiator's outcome: matched sets (by pseudonym), their Dice, linkage ids, counts."""

    candidates: np.ndarray  # (k, P) uint64, lexicographically sorted
    similarities: np.ndarray  # (k,) float64
    linkage_ids: np.ndarray  # (k,) uint64
    sets_summed: int  # candidate sets that survived every party's filter
    above_threshold: int  # of those, Dice >= s_t
    matches: int  # after optional one-to-one resolution


@dataclass(frozen=True)
class PartyResults:
    """What party ``party`` receives: per matched set its linkage id, similarity and own pseudonym."""

    party: int
    linkage_ids: np.ndarray  # (k,) uint64
    similarities: np.ndarray  # (k,) float64
    pseudonyms: np.ndarray  # (k,) uint64, this party's records only


@dataclass(frozen=True)
class MatchRow:
    """One matched record of one party, as written to its results file."""

    linkage_id: str
    similarity: float
    record_id: str


@dataclass(frozen=True)
class ResolvedMatches:
    """A chunk of one party's matches resolved to its own record ids, as columns (one entry per
    row of its matches.csv, in linkage-id order); target any adds each group's size and the
    names of its parties (in party order)."""

    linkage_ids: np.ndarray  # (k,) uint64
    similarities: np.ndarray  # (k,) float64
    record_ids: list[str]
    group_sizes: np.ndarray | None = None  # (k,) uint64, target any only
    group_parties: list[tuple[str, ...]] | None = None  # target any only

    def __len__(self) -> int:
        return len(self.record_ids)

    def labels(self) -> list[str]:
        """The printed linkage ids (``linkage_label``)."""
        return [linkage_label(i) for i in self.linkage_ids.tolist()]

    def match_rows(self) -> list[MatchRow]:
        return [
            MatchRow(label, sim, rid)
            for label, sim, rid in zip(
                self.labels(), self.similarities.tolist(), self.record_ids, strict=True
            )
        ]


def linkage_label(linkage_id: int) -> str:
    """The printed form of a linkage id."""
    return f"L{int(linkage_id):08d}"
