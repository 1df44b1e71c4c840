"""GramStreams.value_rows (the encoder's batch path) equals the per-value definition: bits of the first
k_i stream positions of each q-gram, across table growth, stream lengthening and memo resets."""

from __future__ import annotations

import random

import numpy as np
import pytest

from party.encoding import bits
from party.encoding.hashing import SCHEME_FUNCTIONS
from party.encoding.value_filters import GramStreams

KEY = bytes(range(32))


def _want(fn, grams: list[str], nbits: int, fixed_k: int, budget: int | None) -> int:
    """The filter as an int, written out: k_i from the per-feature budget as clkhash does."""
    t = len(grams)
    mask = 0
    for i, g in enumerate(grams):
        k = fixed_k if budget is None else budget // t + (1 if i < budget % t else 0)
        for p in fn(KEY, g.encode("utf-8"), nbits, k):
            mask |= 1 << p
    return mask


@pytest.mark.parametrize("scheme", sorted(SCHEME_FUNCTIONS))
@pytest.mark.parametrize("budget", [None, 1, 7, 300])
def test_value_rows_equal_the_definition(scheme: str, budget: int | None) -> None:
    fn = SCHEME_FUNCTIONS[scheme]
    key = KEY[:4] if scheme == "mmh3-double" else KEY
    rng = random.Random(f"{scheme}{budget}")
    nbits = 1000
    streams = GramStreams(fn, key, nbits)
    streams.MAX_GRAMS = 700  # forces a reset part-way
    alphabet = "abcdeéß_0"
    for call in range(4):  # memo state carries over between calls
        values = [
            [
                "".join(rng.choice(alphabet) for _ in range(rng.choice([1, 2, 3])))
                for _ in range(rng.choice([0, 1, 2, 5, 12]))
            ]
            for _ in range(300 + 50 * call)
        ]
        got = streams.value_rows(values, 5, budget)
        assert got.shape == (len(values), bits.words_for(nbits)) and got.dtype == np.uint64
        for row, grams in zip(got, values, strict=True):
            want = _want(lambda k_, d, n, k: fn(key, d, n, k), grams, nbits, 5, budget)
            assert int.from_bytes(row.astype("<u8").tobytes(), "little") == want


def test_value_rows_of_repeated_grams_and_empty_input() -> None:
    fn = SCHEME_FUNCTIONS["hmac-sha256-random"]
    streams = GramStreams(fn, KEY, 64)
    values = [["ab"], [], ["_a", "a_"], ["x"] * 4, ["q"]]
    got = streams.value_rows(values, 2, None)
    for row, grams in zip(got, values, strict=True):
        assert int(row[0]) == _want(fn, grams, 64, 2, None)
    assert streams.value_rows([], 2, None).shape == (0, 1)
