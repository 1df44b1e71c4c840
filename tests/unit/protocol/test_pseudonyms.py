"""Pseudonym drawing: repeats and zeros redrawn exactly as the plain stable-sort rule does, and the
sorting permutation returned on the way."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from party.protocol.errors import ShareError
from party.protocol.segments import new_pseudonyms, pseudonyms_in_order


def _reference(n: int, random_bytes: Callable[[int], bytes]) -> np.ndarray:
    """The rule written plainly: a value already drawn by an earlier row, or zero, is redrawn
    (in row order), until none is left."""
    out = [int(v) for v in np.frombuffer(random_bytes(8 * n), dtype="<u8")]
    for _ in range(64):
        seen: set[int] = set()
        bad = []
        for i in sorted(range(n), key=lambda i: (out[i], i)):
            if out[i] == 0 or out[i] in seen:
                bad.append(i)
            seen.add(out[i])
        if not bad:
            return np.array(out, dtype=np.uint64)
        fresh = np.frombuffer(random_bytes(8 * len(bad)), dtype="<u8")
        for i, v in zip(sorted(bad), fresh, strict=True):
            out[i] = int(v)
    raise AssertionError("unreachable in these tests")


def _stream(values: list[int]) -> Callable[[int], bytes]:
    """A random source that returns ``values`` (then 1000, 1001, ...) 8 bytes each."""
    data = list(values)

    def take(k: int) -> bytes:
        while len(data) < k // 8:
            data.append(1000 + len(data))
        got, data[:] = data[: k // 8], data[k // 8 :]
        return np.array(got, dtype="<u8").tobytes()

    return take


@pytest.mark.parametrize(
    "values",
    [
        [],
        [7],
        [0],
        [5, 3, 9, 1],
        [5, 5, 5, 0, 2**64 - 1, 2**64 - 1, 3],  # repeats, a zero, the largest value
        [4, 4, 0, 0, 4, 9, 8, 7, 6],  # the redraws repeat earlier values again
    ],
)
def test_pseudonyms_as_the_plain_rule_and_their_order(values: list[int]) -> None:
    n = len(values)
    extra = [9, 4, 0, 11, 12, 13, 14, 15, 16, 17]  # the redraws (some repeat again)
    want = _reference(n, _stream(values + extra))
    got, order = pseudonyms_in_order(n, _stream(values + extra))
    assert got.tolist() == want.tolist()
    assert new_pseudonyms(n, _stream(values + extra)).tolist() == want.tolist()
    assert sorted(order.tolist()) == list(range(n))
    assert got[order].tolist() == sorted(want.tolist())
    assert len(set(got.tolist())) == n and 0 not in got.tolist()


def test_random_pseudonyms_sorted_by_their_order() -> None:
    got, order = pseudonyms_in_order(10_000)
    s = got[order]
    assert np.all(s[1:] > s[:-1]) and s[0] != 0


def test_a_broken_random_source_is_refused() -> None:
    with pytest.raises(ShareError, match="random source"):
        new_pseudonyms(3, lambda k: bytes(k))
