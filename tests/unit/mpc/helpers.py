"""Three in-process compute parties for gate-level tests: share plain values, run, reconstruct."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np

from party.mpc.driver import drive, run_keys
from party.mpc.gates import Gates, Pair, Round
from party.mpc.keys import ComputeKeys, ZeroShares


def share3(values: np.ndarray, rng: np.random.Generator) -> list[Pair]:
    """CP i's pair (x_i, x_{i+1}) of a random XOR sharing of a uint64 array."""
    s0 = rng.integers(0, 2**64, size=values.shape, dtype=np.uint64)
    s1 = rng.integers(0, 2**64, size=values.shape, dtype=np.uint64)
    s = [s0, s1, values ^ s0 ^ s1]
    return [(s[i], s[(i + 1) % 3]) for i in range(3)]


def reveal(pairs: list[Pair]) -> np.ndarray:
    """x from the three CPs' pairs (checks that the replicated shares agree)."""
    for i in range(3):
        assert np.array_equal(pairs[i][1], pairs[(i + 1) % 3][0]), "replicated shares differ"
    return pairs[0][0] ^ pairs[1][0] ^ pairs[2][0]


def run3(
    circuit: Callable[[Gates, list[Pair]], Generator[Round, bytes, Pair]],
    inputs: list[list[Pair]],
    keys: list[ComputeKeys] | None = None,
    **options: Any,
) -> tuple[list[Pair], list[Gates]]:
    """Run ``circuit(gates_i, inputs_i)`` at the three CPs in lockstep with ``keys`` (default:
    fresh ones), ``Gates(**options)``."""
    keys = run_keys() if keys is None else keys
    gates = [Gates(i, ZeroShares(k), **options) for i, k in enumerate(keys)]
    outs = drive([circuit(gates[i], inputs[i]) for i in range(3)])
    return outs, gates


def words_from_bits(bits: np.ndarray) -> np.ndarray:
    """(..., 64 * g) 0/1 -> (..., g) uint64 lanes (bit k of word g = entry 64 g + k)."""
    packed = np.packbits(bits.astype(np.uint8), axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64)


def bits_from_words(words: np.ndarray) -> np.ndarray:
    """Inverse of words_from_bits."""
    w = np.ascontiguousarray(words.astype("<u8"))
    return np.unpackbits(w.view(np.uint8), axis=-1, bitorder="little")


def recorded(
    gen: Generator[Round, bytes, Any], sent: list[tuple[int, int, bytes]]
) -> Generator[Round, bytes, Any]:
    """Pass a compute party's rounds through, keeping each one's (batch, number, payload)."""
    incoming = None
    while True:
        try:
            rnd: Round = gen.send(incoming)  # type: ignore[arg-type]
        except StopIteration as stop:
            return stop.value
        sent.append((rnd.batch, rnd.number, bytes(rnd.payload)))
        incoming = yield rnd
