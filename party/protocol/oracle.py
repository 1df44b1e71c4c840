"""The plaintext oracle: multi-party Dice computed directly on all parties' full filters.

It is what a trusted party holding every table would compute over the same candidate sets as the
protocol: records sharing a common block (any of the B digests), one per party, de-duplicated across
blocks, with the same sub-blocking rule, the same Dice expression, threshold and one-to-one rule.

It is an independent reference: every step is written here again, plainly, from the rules stated in
docs/protocol.md and ``party/protocol/blocks.py`` (no import of the engine's blocking, kernels,
popcounts, Dice or one-to-one code), so that a defect in the engine cannot hide in the oracle too.

- Common blocks: the non-zero digests present at every party.
- Sub-blocking with cap C: when a party has more than C records in a block, its records, ordered by
  key (ties by row index), are cut into ``k_j = ceil(n_j / C)`` chunks (rank r goes to chunk
  ``r * k_j // n_j``); the block becomes ``K = max_j k_j`` sub-blocks, sub-block s taking chunk
  ``s mod k_j`` of party j.
- Dice of a set = ``P * c / x`` in float64 (0 when x = 0), c = common 1-bits of the full filters,
  x = sum of the filters' 1-bits.
- One-to-one: sets by decreasing Dice, ties by the lexicographic order of their key tuples (smaller
  first); a set is kept iff none of its records is already in a kept set.

Sub-blocking and the one-to-one tie-break are defined on per-record keys; the protocol uses the run's
pseudonyms, so pass them as ``keys`` (``InProcessRun.pseudonyms``) to reproduce a run exactly. Without
keys the record index is the key. Intended for tests and small simulations (it enumerates every
candidate set).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from party.protocol.errors import ProtocolError
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable, validate_table


@dataclass(frozen=True)
class OracleMatch:
    """A matched candidate set: the record index in each party's table, and its Dice."""

    records: tuple[int, ...]
    dice: float


def _blocks_of(digests: np.ndarray, keys: Sequence[int]) -> dict[int, list[int]]:
    """Digest -> the rows holding it (each row once), ordered by (key, row)."""
    members: dict[int, set[int]] = {}
    for row, values in enumerate(np.asarray(digests).tolist()):
        for value in values:
            if value != 0:
                members.setdefault(int(value), set()).add(row)
    return {d: sorted(rows, key=lambda r: (keys[r], r)) for d, rows in members.items()}


def _split(rows: list[int], cap: int | None) -> list[list[int]]:
    """One party's rows of a block cut into ceil(n / cap) chunks by rank (one chunk without a cap)."""
    n = len(rows)
    k = 1 if cap is None else max(1, -(-n // cap))
    chunks: list[list[int]] = [[] for _ in range(k)]
    for rank, row in enumerate(rows):
        chunks[rank * k // n].append(row)
    return chunks


def _sub_blocks(members: list[list[int]], cap: int | None) -> list[list[list[int]]]:
    """A block's per-party rows -> sub-blocks (each a per-party list of rows)."""
    if cap is None or all(len(m) <= cap for m in members):
        return [members]
    chunks = [_split(m, cap) for m in members]
    count = max(len(c) for c in chunks)
    return [[c[s % len(c)] for c in chunks] for s in range(count)]


def _product(sub: list[list[int]]) -> np.ndarray:
    """Every combination of one row per party, (prod n_j, P) int64."""
    grids = np.meshgrid(*[np.asarray(m, dtype=np.int64) for m in sub], indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


def _ones(filters: np.ndarray) -> np.ndarray:
    """1-bits per row of packed filters, int64."""
    return np.bitwise_count(np.asarray(filters)).sum(axis=1, dtype=np.int64)


def _dice(parties: int, common: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``P * c / x`` in float64, 0 where x == 0."""
    den = total.astype(np.float64)
    safe = np.where(total == 0, 1.0, den)
    return np.where(total == 0, 0.0, (parties * common).astype(np.float64) / safe)


def _one_to_one(tie_keys: list[tuple[int, ...]], similarity: list[float]) -> list[int]:
    """Positions kept by greedy one-to-one (ascending), visiting by (-Dice, key tuple)."""
    order = sorted(range(len(similarity)), key=lambda i: (-similarity[i], tie_keys[i]))
    used: list[set[int]] = [set() for _ in tie_keys[0]] if tie_keys else []
    kept = []
    for i in order:
        row = tie_keys[i]
        if any(v in used[j] for j, v in enumerate(row)):
            continue
        for j, v in enumerate(row):
            used[j].add(v)
        kept.append(i)
    return sorted(kept)


def _keys(tables: Sequence[EncodedTable], keys: Sequence[np.ndarray] | None) -> list[list[int]]:
    if keys is None:
        return [list(range(len(t.record_ids))) for t in tables]
    if len(keys) != len(tables) or any(
        np.asarray(k).shape != (len(t.record_ids),) for k, t in zip(keys, tables, strict=True)
    ):
        raise ProtocolError("oracle keys must give one key per record of every table")
    return [[int(v) for v in np.asarray(k, dtype=np.uint64).tolist()] for k in keys]


def oracle_candidates(
    tables: Sequence[EncodedTable],
    params: ProtocolParameters,
    keys: Sequence[np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """All candidate sets (k, P) of record indices (sorted, unique) and their full-filter Dice."""
    p = params.party_count
    if len(tables) != p:
        raise ProtocolError(f"oracle got {len(tables)} tables for {p} parties")
    for j, t in enumerate(tables):
        validate_table(t, params.filter_bits, f"table {j}")
    record_keys = _keys(tables, keys)
    blocks = [_blocks_of(t.block_digests, record_keys[j]) for j, t in enumerate(tables)]
    common = sorted(set.intersection(*(set(b) for b in blocks)))
    found = [
        _product(sub)
        for digest in common
        for sub in _sub_blocks([b[digest] for b in blocks], params.max_block_size)
    ]
    if not found:
        return np.zeros((0, p), dtype=np.int64), np.zeros(0, dtype=np.float64)
    cand = np.unique(np.concatenate(found), axis=0)
    acc = np.asarray(tables[0].filters)[cand[:, 0]]
    x = _ones(tables[0].filters)[cand[:, 0]]
    for j in range(1, p):
        acc = acc & np.asarray(tables[j].filters)[cand[:, j]]
        x = x + _ones(tables[j].filters)[cand[:, j]]
    return cand, _dice(p, _ones(acc), x)


def oracle_matches(
    tables: Sequence[EncodedTable],
    params: ProtocolParameters,
    keys: Sequence[np.ndarray] | None = None,
) -> list[OracleMatch]:
    """Matches (Dice >= s_t, optionally one-to-one) sorted by record indices."""
    cand, sim = oracle_candidates(tables, params, keys)
    chosen = np.flatnonzero(sim >= params.match_threshold).tolist()
    if params.one_to_one and chosen:
        record_keys = _keys(tables, keys)
        tie = [tuple(record_keys[j][int(v)] for j, v in enumerate(cand[i])) for i in chosen]
        chosen = [chosen[i] for i in _one_to_one(tie, [float(sim[i]) for i in chosen])]
    return [OracleMatch(tuple(int(v) for v in cand[i]), float(sim[i])) for i in chosen]
