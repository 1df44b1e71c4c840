"""Warm-up of a freshly started node: tiny in-process runs on made-up filters for every protocol mode and target.

The compiled loops (numba) are compiled on their first call, or loaded from numba's on-disk cache:
about a second when cached, about a minute of CPU when not (a fresh checkout; ``scripts/setup.sh``
fills the cache by running this module). Doing it once at start keeps that cost out of the first real
run, where compiling beside the event loop can delay its heartbeats. The warm-up touches no data,
secret or network: random bit rows, three fake parties, one block; a target-any run whose rows really
match (the group solver and its pair order, which random rows never reach), once on read-only filters
as a networked run's received arrays are; and the results writer into a temporary folder.
"""

from __future__ import annotations

import logging
import pathlib
import tempfile
import time
from dataclasses import replace

import numpy as np

log = logging.getLogger(__name__)


class _Table:
    """An encoded table of made-up bit rows (what ``run_in_process`` takes), one block."""

    def __init__(self, rows: list[np.ndarray], bits: int, ids: list[int], writable: bool = True):
        from party.encoding.bits import rows_from_positions

        self.record_ids = tuple(f"w{i}" for i in ids)
        self.filters = rows_from_positions([rows[i] for i in ids], bits)
        self.filters.setflags(write=writable)
        self.filter_bits = bits
        self.block_digests = np.ones((len(ids), 1), dtype=np.uint64)


def _random_tables(rng: np.random.Generator, n: int, bits: int) -> list[_Table]:
    return [
        _Table([rng.choice(bits, bits // 3, replace=False) for _ in range(n)], bits, list(range(n)))
        for _ in range(3)
    ]


def _linked_tables(rng: np.random.Generator, bits: int, writable: bool) -> list[_Table]:
    """Three tables sharing rows in pairs and triples: target any finds groups of two and three."""
    rows = [rng.choice(bits, bits // 3, replace=False) for _ in range(32)]
    triples = list(range(24, 32))
    return [
        _Table(rows, bits, list(range(0, 16)) + triples, writable),
        _Table(rows, bits, list(range(0, 8)) + list(range(16, 24)) + triples, writable),
        _Table(rows, bits, list(range(8, 24)) + triples, writable),
    ]


def _write_results() -> None:
    """The results writer's compiled byte copies (party.node._numba_csv), both file layouts, of
    two made-up rows into a temporary folder."""
    from party.node.results import write_match_chunks
    from party.protocol.classify import ResolvedMatches

    chunk = ResolvedMatches(
        linkage_ids=np.array([1, 2], dtype=np.uint64),
        similarities=np.array([0.9, 0.95]),
        record_ids=["w1", "w2"],
        group_sizes=np.array([2, 2], dtype=np.uint64),
        group_parties=[("w0", "w1"), ("w0", "w1")],
    )
    with tempfile.TemporaryDirectory(prefix="pprl-warm-up-") as tmp:
        for groups in (False, True):
            write_match_chunks(pathlib.Path(tmp), f"{int(groups):032x}", [chunk], groups=groups)


def warm_up() -> float:
    """Compile (or load) every compiled loop a node's run uses, on tiny made-up tables; return seconds."""
    from party.protocol.driver import run_in_process
    from party.protocol.kernel import warm_up as warm_up_kernels
    from party.protocol.params import ProtocolParameters

    t0 = time.perf_counter()
    # The tiny runs below only reach the batched small-block path, which needs no compilation.
    warm_up_kernels()
    rng = np.random.default_rng(0)
    params = ProtocolParameters(
        parties=("w0", "w1", "w2"),
        filter_bits=96,
        match_threshold=0.5,
        segment_threshold=0.3,
        target="all",
    )
    run_in_process(_random_tables(rng, 8, 96), params)
    # Target any (the default): pair kernel, pairwise ring, group solver, pair order.
    linked = replace(params, match_threshold=0.8, segment_threshold=0.7, target="any")
    for writable in (True, False):
        run = run_in_process(_linked_tables(rng, 96, writable), linked)
        if not any(len(rows) for rows in run.matches):
            log.warning("the warm-up's linked run found no groups; the solver stays cold")
    _write_results()
    # Mode mpc3: its bit-sliced gate kernels (numba) compile on first use as well.
    from party.mpc.driver import run_mpc3_in_process

    mpc3 = ProtocolParameters(
        parties=("w0", "w1", "w2"),
        filter_bits=96,
        match_threshold=0.5,
        segment_threshold=0.0,
        mode="mpc3",
        target="all",
    )
    run_mpc3_in_process(_random_tables(rng, 8, 96), mpc3)
    return time.perf_counter() - t0


if __name__ == "__main__":  # scripts/setup.sh: fill numba's on-disk cache once per checkout
    print(f"compiled loops ready in {warm_up():.1f}s")
