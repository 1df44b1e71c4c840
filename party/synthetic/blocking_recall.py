"""Blocking quality against ground truth: per pass, records in common blocks and true sets kept.

For P parties' encodings (``EncodedRecords``, digest column c = blocking pass c) and the ground
truth: a true set (an entity with a record at every party; with duplicates, the first record of each
party in file order) is KEPT by pass c iff its P records have the same non-zero digest in column c,
and kept by the blocking iff some pass keeps it (the engine then compares it). Per pass it also
reports how many of each party's records are in a block present at every party (common blocks) and
the number of candidate sets the pass enumerates (sum over its common blocks of the product of the
parties' block sizes; a set found by several passes counts once per pass), and how many true sets
that pass alone keeps (its marginal recall: dropping it loses exactly these).

Pairwise view (target any, issue 14): a true set is *pair-connected* when the graph on its P records
whose edges are the pairs sharing a non-zero digest in some pass is connected; pairwise comparison
can only reach a whole true set when it is (P-way blocking needs all P records in one block). The
pairwise cost of a pass is its candidate pairs: for every two parties a < b, the sum over the
blocks they share (a digest present at both, whatever the other parties hold) of the product of
their block sizes, the pairs target any's engine enumerates (``party.protocol.pairwise``; a pair
found by several passes counts once per pass).

``digests_of_columns`` computes a schema's block digests straight from the column values, without
encoding filters (schemas without LSH keys), equal to the encoder's: blocking_cost.py uses it to
measure a million records per party in minutes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from party.encoding.bits import popcount_rows
from party.encoding.blocking import BlockingKeyer, all_pairs_digest
from party.encoding.records import EncodedRecords
from party.encoding.schema import LinkageSchema
from party.synthetic.truth import GroundTruth


@dataclass(frozen=True)
class PassStats:
    """One blocking pass (digest column)."""

    column: int
    records_in_common_blocks: tuple[int, ...]  # per party
    common_blocks: int
    candidate_sets: int
    true_sets_kept: int
    true_sets_only_here: int  # kept by this pass and no other
    candidate_pairs: int = 0  # pairwise view (module docstring)


@dataclass(frozen=True)
class BlockingRecall:
    true_sets: int
    true_sets_kept: int
    passes: tuple[PassStats, ...]
    candidate_sets: int  # sum over passes
    true_sets_pair_connected: int  # see the module docstring (pairwise view)
    candidate_pairs: int = 0  # sum over passes

    @property
    def lost(self) -> int:
        return self.true_sets - self.true_sets_kept

    @property
    def lost_fraction(self) -> float:
        return self.lost / self.true_sets if self.true_sets else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "true_sets": self.true_sets,
            "true_sets_kept": self.true_sets_kept,
            "lost": self.lost,
            "lost_fraction": round(self.lost_fraction, 6),
            "candidate_sets": self.candidate_sets,
            "candidate_pairs": self.candidate_pairs,
            "true_sets_pair_connected": self.true_sets_pair_connected,
            "passes": [
                {
                    "column": p.column,
                    "records_in_common_blocks": list(p.records_in_common_blocks),
                    "common_blocks": p.common_blocks,
                    "candidate_sets": p.candidate_sets,
                    "candidate_pairs": p.candidate_pairs,
                    "true_sets_kept": p.true_sets_kept,
                    "true_sets_only_here": p.true_sets_only_here,
                }
                for p in self.passes
            ],
        }


def true_set_rows(tables: Sequence[EncodedRecords], truth: GroundTruth) -> np.ndarray:
    """(T, P) row index of each true set's record at each party."""
    complete = truth.complete_entities()
    rows = np.zeros((complete.size, len(tables)), dtype=np.int64)
    for p, table in enumerate(tables):
        lookup = truth.lookup(p)
        ent = np.fromiter(
            (lookup.get(r, -1) for r in table.record_ids), dtype=np.int64, count=len(table)
        )
        first: dict[int, int] = {}
        for i, e in enumerate(ent.tolist()):
            if e >= 0:
                first.setdefault(e, i)
        rows[:, p] = [first.get(int(e), -1) for e in complete.tolist()]
    # entities whose record was skipped by the encoder at some party cannot be found at all
    return rows


def blocking_recall(tables: Sequence[EncodedRecords], truth: GroundTruth) -> BlockingRecall:
    """Blocking quality of P parties' encodings against the ground truth (module docstring)."""
    rows = true_set_rows(tables, truth)
    valid = (rows >= 0).all(axis=1)
    parties = len(tables)
    width = tables[0].block_digests.shape[1]
    kept_by = np.zeros((rows.shape[0], width), dtype=bool)
    linked = np.zeros((rows.shape[0], parties, parties), dtype=bool)  # pairs sharing a block
    stats = []
    for c in range(width):
        cols = [t.block_digests[:, c] for t in tables]
        common: np.ndarray | None = None
        for col in cols:
            u = np.unique(col[col != 0])
            common = u if common is None else np.intersect1d(common, u, assume_unique=True)
        assert common is not None
        in_common = tuple(int(np.isin(col, common).sum()) for col in cols)
        per_block = np.ones(common.size, dtype=object)
        for col in cols:
            values, counts = np.unique(col[np.isin(col, common)], return_counts=True)
            per_block = per_block * counts.astype(object)
        sets = int(per_block.sum()) if common.size else 0
        pairs = _candidate_pairs(cols)
        d = np.stack([cols[p][np.maximum(rows[:, p], 0)] for p in range(parties)], axis=1)
        kept_by[:, c] = valid & (d[:, 0] != 0) & (d == d[:, :1]).all(axis=1)
        linked |= (d[:, :, None] == d[:, None, :]) & (d[:, :, None] != 0)
        stats.append((c, in_common, int(common.size), sets, pairs))
    only = kept_by & (kept_by.sum(axis=1) == 1)[:, None]
    passes = tuple(
        PassStats(c, rec, blocks, sets, int(kept_by[:, c].sum()), int(only[:, c].sum()), pairs)
        for c, rec, blocks, sets, pairs in stats
    )
    return BlockingRecall(
        true_sets=int(rows.shape[0]),
        true_sets_kept=int(kept_by.any(axis=1).sum()),
        passes=passes,
        candidate_sets=sum(p.candidate_sets for p in passes),
        true_sets_pair_connected=int((valid & _connected(linked)).sum()),
        candidate_pairs=sum(p.candidate_pairs for p in passes),
    )


def _candidate_pairs(cols: Sequence[np.ndarray]) -> int:
    """Candidate pairs of one pass: over every two parties, the sum over the non-zero digests
    both hold of the product of their counts."""
    counted = [np.unique(col[col != 0], return_counts=True) for col in cols]
    total = 0
    for a, (ua, ka) in enumerate(counted):
        for ub, kb in counted[a + 1 :]:
            _, ia, ib = np.intersect1d(ua, ub, assume_unique=True, return_indices=True)
            total += int((ka[ia].astype(np.int64) * kb[ib].astype(np.int64)).sum())
    return total


def _connected(linked: np.ndarray) -> np.ndarray:
    """(T,) whether each (T, P, P) symmetric adjacency matrix is a connected graph."""
    reach = linked | np.eye(linked.shape[1], dtype=bool)[None]
    for _ in range(max(1, int(np.ceil(np.log2(linked.shape[1]))))):
        step = reach.astype(np.int32)
        reach = np.einsum("tij,tjk->tik", step, step) > 0
    return np.asarray(reach.all(axis=(1, 2)))


def digests_of_columns(
    schema: LinkageSchema, secret: bytes, columns: Mapping[str, Sequence[str]]
) -> np.ndarray:
    """(n, digest_width) uint64 block digests of n rows given as column name -> values, without
    encoding filters; equal to the encoder's. Raises ValueError for a schema with LSH keys (they
    sample the filters) and KeyError for a missing column."""
    n = len(next(iter(columns.values()))) if columns else 0
    if not schema.blocking:
        return np.full((n, 1), all_pairs_digest(secret), dtype=np.uint64)
    if any(b.lsh is not None for b in schema.blocking):
        raise ValueError("LSH blocking keys need the filters: encode the records instead")
    coded: dict[str, tuple[list[str], np.ndarray]] = {}
    out = np.zeros((n, len(schema.blocking)), dtype=np.uint64)
    for j, spec in enumerate(schema.blocking):
        parts = []
        for part in spec.parts:
            name = schema.column_of(part.field)
            if name not in coded:
                uniques, inverse = np.unique(
                    np.asarray(columns[name], dtype=str), return_inverse=True
                )
                coded[name] = (uniques.tolist(), inverse.reshape(-1))
            parts.append(coded[name])
        out[:, j] = BlockingKeyer(spec, schema, secret).column_digests(parts)
    return out


def true_set_dice(tables: Sequence[EncodedRecords], truth: GroundTruth) -> np.ndarray:
    """The full-filter P-way Dice of every true set whose records were all encoded: what the
    protocol would compute with no blocking, so ``(dice >= s_t).sum()`` caps its recall."""
    rows = true_set_rows(tables, truth)
    rows = rows[(rows >= 0).all(axis=1)]
    acc = tables[0].filters[rows[:, 0]].copy()
    total = popcount_rows(acc).astype(np.float64)
    for p in range(1, len(tables)):
        f = tables[p].filters[rows[:, p]]
        acc &= f
        total += popcount_rows(f)
    common = popcount_rows(acc).astype(np.float64)
    out = np.zeros(rows.shape[0])
    np.divide(len(tables) * common, total, out=out, where=total > 0)
    return out


def distinct_candidate_pairs(a: EncodedRecords, b: EncodedRecords) -> np.ndarray:
    """(m, 2) row indices (at a, at b) of every distinct pair sharing a non-zero digest in some
    pass: the pairs target any compares between two parties, each once however many passes
    find it."""
    keys: list[np.ndarray] = []
    nb = len(b)
    for c in range(a.block_digests.shape[1]):
        da, db = a.block_digests[:, c], b.block_digests[:, c]
        order = np.argsort(db, kind="stable")
        sorted_b = db[order]
        rows_a = np.flatnonzero(da != 0)
        left = np.searchsorted(sorted_b, da[rows_a], side="left")
        right = np.searchsorted(sorted_b, da[rows_a], side="right")
        counts = right - left
        total = int(counts.sum())
        if total == 0:
            continue
        starts = np.cumsum(counts) - counts
        offsets = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        ib = order[np.repeat(left, counts) + offsets]
        ia = np.repeat(rows_a, counts)
        keys.append(ia.astype(np.int64) * nb + ib)
    if not keys:
        return np.zeros((0, 2), dtype=np.int64)
    distinct = np.unique(np.concatenate(keys))
    return np.stack([distinct // nb, distinct % nb], axis=1)


def candidate_pair_dice_counts(
    tables: Sequence[EncodedRecords], thresholds: Sequence[float], chunk: int = 1 << 20
) -> tuple[int, dict[float, int]]:
    """(distinct candidate pairs over every two parties, how many of them have a full-filter Dice
    >= each threshold): the second is the matched-pair input of target any's solver at s_t
    (before the segment filter, which can only remove pairs)."""
    total = 0
    reached = dict.fromkeys(thresholds, 0)
    for x, a in enumerate(tables):
        for b in tables[x + 1 :]:
            pairs = distinct_candidate_pairs(a, b)
            total += pairs.shape[0]
            for lo in range(0, pairs.shape[0], chunk):
                ia, ib = pairs[lo : lo + chunk, 0], pairs[lo : lo + chunk, 1]
                dice = pair_dice(a.filters[ia], b.filters[ib])
                for t in thresholds:
                    reached[t] += int((dice >= t).sum())
    return total, reached


def pair_dice(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Dice of two packed arrays of equal shape (0 where both rows are empty)."""
    common = popcount_rows(a & b).astype(np.float64)
    total = popcount_rows(a).astype(np.float64) + popcount_rows(b)
    out = np.zeros(common.shape)
    np.divide(2 * common, total, out=out, where=total > 0)
    return out
