"""Target all's fast blocks in ranges computed elsewhere (an in-process RemoteBlocks): the same
survivors and stats as the threads."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from party.protocol.block_ranges import (
    FastIndex,
    FastInputs,
    FastRange,
    fast_range_rows,
    fast_ranges,
)
from party.protocol.driver import exchange_in_process
from party.protocol.engine import PartyEngine
from party.protocol.kernel import HAVE_NUMBA, StageCounts
from tests.unit.protocol.helpers import linked_tables
from tests.unit.protocol.test_any_target import params


class InProcess:
    """A RemoteBlocks that runs each range when its rows are asked for."""

    def __init__(self, parts: int) -> None:
        self.parts = parts
        self.sizes: list[int] = []
        self._jobs: list[tuple[FastInputs, FastRange]] = []

    def submit(self, inputs: FastInputs, index: FastIndex, ranges: list[tuple[int, int]]) -> None:
        pieces = [index.range(lo, hi) for lo, hi in ranges]
        self.sizes = [int(piece.plan().fast_sets.sum()) for piece in pieces]
        self._jobs = [(inputs, piece) for piece in pieces]

    def results(
        self, cancel: threading.Event | None = None
    ) -> Iterator[tuple[np.ndarray, StageCounts]]:
        for inputs, piece in self._jobs:
            yield fast_range_rows(inputs, piece)


def test_fast_ranges_cover_the_blocks_with_sets_in_order() -> None:
    cum = np.cumsum(np.array([0, 3, 0, 9, 1, 1, 0, 0], dtype=np.int64))
    assert fast_ranges(cum, 4) == [(0, 3), (3, 4), (4, 8)]  # empty blocks at the end too
    assert fast_ranges(cum, 100) == [(0, 8)]
    assert fast_ranges(np.zeros(3, dtype=np.int64), 4) == []


@pytest.mark.skipif(not HAVE_NUMBA, reason="ranges elsewhere run the numba kernel")
@pytest.mark.parametrize(
    ("p", "cap", "parts"), [(2, None, 3), (3, None, 5), (3, 4, 4), (4, None, 1)]
)
def test_ranges_elsewhere_equal_the_threads(p: int, cap: int | None, parts: int) -> None:
    rng = np.random.default_rng(p)
    tables = linked_tables(rng, p, 90, 60 * p, shared=70, blocks=30, keys=3, flip=0.04)
    for t in tables:
        t.block_digests[:, 1:] += np.arange(1, 3, dtype=np.uint64) * 1000
    prm = params(p, target="all", segment_threshold=0.5, max_block_size=cap)
    got = []
    for remote in (None, InProcess(parts)):
        r = random.Random(3)
        engines = [
            PartyEngine(i, prm, t, random_bytes=r.randbytes, workers=2)
            for i, t in enumerate(tables)
        ]
        exchange_in_process(engines)
        engines[0].compare(remote=remote)
        store = engines[0]._survivors
        assert store is not None
        got.append((np.concatenate(list(store.chunks(1 << 16))), engines[0].comparison_stats))
        for e in engines:
            e.close()
        if remote is not None:
            assert 1 <= len(remote.sizes) <= parts and min(remote.sizes) > 0
    (want_rows, want), (rows, stats) = got
    assert want_rows.shape[0] > 0 and np.array_equal(want_rows, rows)
    assert want == stats or (want is not None and stats is not None and _same(want, stats))


def _same(a: object, b: object) -> bool:
    skip = {"seconds", "spilled_bytes"}
    return all(v == getattr(b, k) for k, v in vars(a).items() if k not in skip)
