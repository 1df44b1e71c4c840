"""The plaintext oracle: multi-party Dice computed directly on all parties' full filters.

It is what a trusted party holding every table would compute over the same candidate sets as the
protocol: records sharing a common block (any of the B digests), one per party, de-duplicated across
blocks, with the same sub-blocking rule (``party.protocol.blocks.sub_blocks``) and the same Dice
expression (``party.protocol.classify.dice``), threshold and one-to-one rule. Sub-blocking and the
one-to-one tie-break are defined on per-record keys; the protocol uses the run's pseudonyms, so pass
them as ``keys`` (``InProcessRun.pseudonyms``) to reproduce a run exactly. Without keys the record
index is the key. Intended for tests and small simulations (it enumerates every candidate set).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from party.encoding.bits import popcount_rows
from party.protocol.blocks import block_index, common_blocks, distinct_digests, sub_blocks
from party.protocol.classify import dice, greedy_one_to_one
from party.protocol.errors import ProtocolError
from party.protocol.params import ProtocolParameters
from party.protocol.records import EncodedTable, validate_table


@dataclass(frozen=True)
class OracleMatch:
    """A matched candidate set: the record index in each party's table, and its Dice."""

    records: tuple[int, ...]
    dice: float


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
    if keys is not None and (
        len(keys) != p
        or any(
            np.asarray(k).shape != (len(t.record_ids),) for k, t in zip(keys, tables, strict=True)
        )
    ):
        raise ProtocolError("oracle keys must give one key per record of every table")
    common = common_blocks([distinct_digests(t.block_digests) for t in tables])
    idxs = [
        block_index(
            t.block_digests, common, None if keys is None else np.asarray(keys[j], dtype=np.uint64)
        )
        for j, t in enumerate(tables)
    ]
    found: list[np.ndarray] = []
    for b in range(common.size):
        members = [ix.members(b) for ix in idxs]
        for sub in sub_blocks(members, params.max_block_size):
            shape = tuple(int(m.size) for m in sub)
            total = int(np.prod(shape))
            if total == 0:
                continue
            grid = np.stack(np.unravel_index(np.arange(total), shape), axis=1)
            found.append(np.stack([sub[j][grid[:, j]] for j in range(p)], axis=1))
    if not found:
        return np.zeros((0, p), dtype=np.int64), np.zeros(0, dtype=np.float64)
    cand = np.unique(np.concatenate(found).astype(np.int64), axis=0)
    acc = tables[0].filters[cand[:, 0]]
    x = popcount_rows(tables[0].filters)[cand[:, 0]]
    for j in range(1, p):
        acc = acc & tables[j].filters[cand[:, j]]
        x = x + popcount_rows(tables[j].filters)[cand[:, j]]
    return cand, dice(p, popcount_rows(acc), x)


def oracle_matches(
    tables: Sequence[EncodedTable],
    params: ProtocolParameters,
    keys: Sequence[np.ndarray] | None = None,
) -> list[OracleMatch]:
    """Matches (Dice >= s_t, optionally one-to-one) sorted by record indices."""
    cand, sim = oracle_candidates(tables, params, keys)
    above = np.flatnonzero(sim >= params.match_threshold)
    chosen = above
    if params.one_to_one and above.size:
        if keys is None:
            tie = cand[above].astype(np.uint64)
        else:
            tie = np.stack(
                [
                    np.asarray(keys[j], dtype=np.uint64)[cand[above, j]]
                    for j in range(params.party_count)
                ],
                axis=1,
            )
        chosen = above[greedy_one_to_one(tie, sim[above])]
    return [OracleMatch(tuple(int(v) for v in cand[i]), float(sim[i])) for i in chosen]
