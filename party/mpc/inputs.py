"""Input shares: what a data party sends each compute party in mode mpc3.

Sharing (replicated boolean sharing, Araki et al. CCS 2016): a value x is split as x = s0 ^ s1 ^ s2
with s0, s1 uniform (OS CSPRNG) and s2 = x ^ s0 ^ s1; compute party (CP) t receives (s_t, s_{t+1 mod 3}),
so any one CP sees two uniform values independent of x, and any two CPs can reconstruct it.

Content of an ``InputShare`` from data party ``source`` to CP ``target`` (plain numpy arrays and
ints; the node layer serialises them): ``filter_bits`` = l; row r describes one of the source's
records in a common block, as in the segment protocol: ``pseudonyms[r]`` (uint64, non-zero, unique,
sorted ascending) and ``block_digests[r]`` (B uint64, 0 where not a common block) travel in the
clear; ``filters`` = (s_t, s_{t+1}) of the record's l-bit filter, each (n, ceil(l/64)) uint64 in the
layout of ``party.encoding.bits`` (padding bits 0); ``counts`` = (s_t, s_{t+1}) of the record's
*count term*, each (n,) uint64 holding w-bit values (higher bits 0): with x_j the record's number of
1-bits, the term is -N * x_j mod 2^w, and at data party 0 2^(w-2) less when x_0 = 0, where N and w
come from ``party.mpc.threshold.threshold_test(P, l, s_t)`` (``ThresholdTest.count_term``); the
compute parties add the P terms to K*c inside the circuit (see ``party.mpc.threshold``), and
x = sum x_j is recovered only for matched sets. For target "any" the terms are those of the pair
test ``threshold_test(2, l, s_t)``, with the offset at every data party (``run_threshold_test``;
``party.mpc.pairs``).

Random draws (fixed order, so known-answer vectors can pin them): filter share s0 (n * words * 8
bytes, little-endian words, padding bits cleared), filter share s1 (same), count share s0 (n * 8
bytes, masked to w bits), count share s1 (same).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from party.encoding.bits import BitLayoutError, check_rows, words_for
from party.mpc.errors import MpcError
from party.mpc.threshold import ThresholdTest, run_threshold_test
from party.protocol.engine import PartyEngine
from party.protocol.params import ProtocolParameters
from party.protocol.segments import check_addressing, check_record_columns

_U64 = np.dtype("<u8")


@dataclass(frozen=True)
class InputShare:
    """What data party ``source`` sends to compute party ``target`` (see the module docstring)."""

    source: int
    target: int
    filter_bits: int
    pseudonyms: np.ndarray  # (n,) uint64, sorted ascending
    block_digests: np.ndarray  # (n, B) uint64
    filters: tuple[np.ndarray, np.ndarray]  # (s_t, s_{t+1}), each (n, words) uint64
    counts: tuple[np.ndarray, np.ndarray]  # (s_t, s_{t+1}), each (n,) uint64 (w-bit terms)

    def __len__(self) -> int:
        return int(self.pseudonyms.shape[0])

    def __repr__(self) -> str:  # never print shares
        return f"InputShare(source={self.source}, target={self.target}, rows={len(self)})"


def _random_words(random_bytes: Callable[[int], bytes], count: int) -> np.ndarray:
    raw = random_bytes(8 * count)
    if len(raw) != 8 * count:
        raise MpcError("the random source returned too few bytes")
    return np.frombuffer(raw, dtype=_U64).astype(np.uint64)


def share_rows(
    values: np.ndarray, nbits: int, random_bytes: Callable[[int], bytes] = os.urandom
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three XOR shares of (n, words) packed ``nbits``-bit rows (s0, s1 random; s2 completes)."""
    n, words = values.shape
    tail = np.uint64((1 << (nbits % 64)) - 1) if nbits % 64 else np.uint64(2**64 - 1)
    s = []
    for _ in range(2):
        r = _random_words(random_bytes, n * words).reshape(n, words)
        if n:
            r[:, -1] &= tail
        s.append(r)
    return s[0], s[1], values ^ s[0] ^ s[1]


def share_values(
    values: np.ndarray, nbits: int, random_bytes: Callable[[int], bytes] = os.urandom
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three XOR shares of (n,) ``nbits``-bit unsigned values (nbits <= 64)."""
    s0, s1, s2 = share_rows(np.asarray(values, dtype=np.uint64)[:, None], nbits, random_bytes)
    return s0[:, 0], s1[:, 0], s2[:, 0]


def count_terms(test: ThresholdTest, counts: np.ndarray, first: bool) -> np.ndarray:
    """``test.count_term`` of every count, vectorised: (n,) uint64 w-bit terms."""
    mod = 1 << test.width
    terms = (-test.numerator * counts.astype(np.int64)) % mod
    if first:
        terms[counts == 0] = test.count_term(0, True)
    return terms.astype(np.uint64)


def input_shares(
    engine: PartyEngine, random_bytes: Callable[[int], bytes] = os.urandom
) -> list[InputShare]:
    """The three input shares (targets 0, 1, 2) of ``engine``'s records in common blocks.

    Call after ``engine.set_common_blocks(common)``.
    """
    pseudonyms, digests, filters, counts = engine.shared_records()
    return share_records(
        engine.index, engine.params, pseudonyms, digests, filters, counts, random_bytes
    )


def share_records(
    source: int,
    params: ProtocolParameters,
    pseudonyms: np.ndarray,
    digests: np.ndarray,
    filters: np.ndarray,
    counts: np.ndarray,
    random_bytes: Callable[[int], bytes] = os.urandom,
) -> list[InputShare]:
    """Input shares (targets 0, 1, 2) of data party ``source``'s shared rows (module docstring)."""
    test = run_threshold_test(params)
    terms = count_terms(test, counts, source == 0 or params.target == "any")
    f = share_rows(filters, params.filter_bits, random_bytes)
    c = share_values(terms, test.width, random_bytes)
    return [
        InputShare(
            source=source,
            target=t,
            filter_bits=params.filter_bits,
            pseudonyms=pseudonyms.copy(),
            block_digests=digests.copy(),
            filters=(f[t], f[(t + 1) % 3]),
            counts=(c[t], c[(t + 1) % 3]),
        )
        for t in range(3)
    ]


def validate_input_share(
    share: InputShare,
    *,
    target: int,
    parties: int,
    filter_bits: int,
    digest_width: int | None = None,
    count_bits: int | None = None,
) -> None:
    """Raise MpcError unless ``share`` is a well-formed input share for compute party ``target``.

    Checks indices, dtypes and shapes, filter padding bits, sorted unique non-zero pseudonyms,
    that every row names a block, ``digest_width`` (B) and ``count_bits`` (w) when given.
    """
    if not isinstance(share, InputShare):
        raise MpcError("expected an InputShare")
    src = check_addressing(
        share,
        ("source", "target", "filter_bits"),
        parties=parties,
        target=target,
        error=MpcError,
        noun="input share",
        source_kind="data party",
        target_kind="compute party",
    )
    if int(share.filter_bits) != filter_bits:
        raise MpcError(
            f"input share from party {src} has {share.filter_bits}-bit filters, "
            f"expected {filter_bits}"
        )
    what = f"input share from party {src}"
    p, d = share.pseudonyms, share.block_digests
    n = check_record_columns(what, p, d, digest_width, MpcError)
    for name, pair in (("filters", share.filters), ("counts", share.counts)):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise MpcError(f"{what}: {name} must be a pair of share arrays")
    for k, s in enumerate(share.filters):
        if not isinstance(s, np.ndarray) or s.ndim != 2 or s.dtype != np.uint64 or s.shape[0] != n:
            raise MpcError(f"{what}: filter share {k} must be an ({n}, words) uint64 array")
        try:
            check_rows(s, filter_bits)
        except BitLayoutError as exc:
            raise MpcError(
                f"{what}: filter share {k} does not fit {filter_bits}-bit rows "
                f"({words_for(filter_bits)} words): {exc}"
            ) from None
    for k, s in enumerate(share.counts):
        if not isinstance(s, np.ndarray) or s.shape != (n,) or s.dtype != np.uint64:
            raise MpcError(f"{what}: count share {k} must be an ({n},) uint64 array")
        if count_bits is not None and n and np.any(s >> np.uint64(count_bits)):
            raise MpcError(f"{what}: count share {k} has bits above the agreed {count_bits}")
    if n and np.any(p == 0):
        raise MpcError(f"{what}: pseudonym 0 is reserved")
    if n > 1 and np.any(p[1:] <= p[:-1]):
        raise MpcError(f"{what}: pseudonyms must be sorted ascending and unique")
    if n and np.any(np.all(d == 0, axis=1)):
        raise MpcError(f"{what}: a row belongs to no block")
