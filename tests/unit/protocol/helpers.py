"""Random encoded tables for protocol tests (built from random bits, or perturbed copies)."""

from __future__ import annotations

import numpy as np

from party.encoding.bits import pack_rows
from party.encoding.records import EncodedRecords
from party.protocol.classify import Classification
from party.protocol.driver import exchange_in_process
from party.protocol.engine import PartyEngine
from party.protocol.params import ProtocolParameters


def plain_two_or_more(arrays: list[np.ndarray]) -> list[int]:
    """The values present in at least two of the arrays, counted in plain Python (sorted)."""
    count: dict[int, int] = {}
    for a in arrays:
        for v in a.tolist():
            count[v] = count.get(v, 0) + 1
    return sorted(v for v, k in count.items() if k >= 2)


def random_table(
    rng: np.random.Generator,
    n: int,
    filter_bits: int,
    *,
    blocks: int = 3,
    keys: int = 1,
    fill: float = 0.3,
    prefix: str = "r",
    empty_rate: float = 0.0,
) -> EncodedRecords:
    """n records with random filters and block digests drawn from 1..blocks (0 with empty_rate)."""
    bits = (rng.random((n, filter_bits)) < fill).astype(np.uint8)
    digests = rng.integers(1, blocks + 1, size=(n, keys)).astype(np.uint64)
    # spread the digests so they look like hashes, but keep the mapping deterministic
    digests = digests * np.uint64(0x9E3779B97F4A7C15) + np.uint64(7)
    if empty_rate:
        digests[rng.random((n, keys)) < empty_rate] = 0
    return EncodedRecords(
        tuple(f"{prefix}{i}" for i in range(n)), pack_rows(bits), filter_bits, digests
    )


def linked_tables(
    rng: np.random.Generator,
    parties: int,
    n: int,
    filter_bits: int,
    *,
    shared: int,
    flip: float = 0.05,
    blocks: int = 3,
    keys: int = 1,
    fill: float = 0.3,
) -> list[EncodedRecords]:
    """P tables where the first ``shared`` entities appear (with bit noise) in every table."""
    base = (rng.random((shared, filter_bits)) < fill).astype(np.uint8)
    base_blocks = rng.integers(1, blocks + 1, size=(shared, keys)).astype(np.uint64)
    out = []
    for j in range(parties):
        noise = (rng.random((shared, filter_bits)) < flip).astype(np.uint8)
        own = (rng.random((n - shared, filter_bits)) < fill).astype(np.uint8)
        bits = np.concatenate([base ^ noise, own])
        dig = np.concatenate(
            [base_blocks, rng.integers(1, blocks + 1, size=(n - shared, keys)).astype(np.uint64)]
        )
        perm = rng.permutation(n)
        dig = dig[perm] * np.uint64(0x9E3779B97F4A7C15) + np.uint64(7)
        ids = tuple(f"p{j}-{i}" for i in perm)
        out.append(EncodedRecords(ids, pack_rows(bits[perm]), filter_bits, dig))
    return out


def engines_after_compare(
    tables: list[EncodedRecords], params: ProtocolParameters, **kw: object
) -> list[PartyEngine]:
    """P engines that exchanged segments and compared (steps 4-5), ready for the ring (target any:
    PairEngines)."""
    from party.protocol.pair_engine import PairEngine

    engine_class = PairEngine if params.target == "any" else PartyEngine
    engines = [engine_class(i, params, t, **kw) for i, t in enumerate(tables)]  # type: ignore[arg-type]
    exchange_in_process(engines)
    for e in engines:
        e.compare()
    return engines


def finished_run(
    tables: list[EncodedRecords], params: ProtocolParameters
) -> tuple[list[PartyEngine], Classification]:
    """The engines after the whole ring, and the initiator's classification."""
    engines = engines_after_compare(tables, params)
    msg = engines[0].ring_start()
    for e in engines[1:]:
        msg = e.ring_step(msg)
    return engines, engines[0].ring_finish(msg)
