"""Warm-up of a freshly started node: one tiny in-process run per protocol mode and target on random filters.

The compiled loops (numba) are compiled on their first call, or loaded from numba's on-disk cache:
about a second when cached, about a minute of CPU when not (a fresh checkout; ``scripts/setup.sh``
fills the cache by running this module). Doing it once at start keeps that cost out of the first real
run, where compiling beside the event loop can delay its heartbeats. The warm-up touches no data,
secret or network: random bit rows, three fake parties, one block.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np

log = logging.getLogger(__name__)


class _Table:
    def __init__(self, rng: np.random.Generator, n: int, bits: int):
        from party.encoding.bits import rows_from_positions

        self.record_ids = tuple(f"w{i}" for i in range(n))
        self.filters = rows_from_positions(
            [rng.choice(bits, bits // 3, replace=False) for _ in range(n)], bits
        )
        self.filter_bits = bits
        self.block_digests = np.ones((n, 1), dtype=np.uint64)


def warm_up() -> float:
    """Compile the comparison kernels and run the engine once on tiny random tables; return seconds."""
    from party.protocol.driver import run_in_process
    from party.protocol.kernel import warm_up as warm_up_kernels
    from party.protocol.params import ProtocolParameters

    t0 = time.perf_counter()
    # The tiny run below only reaches the batched small-block path, which needs no compilation.
    warm_up_kernels()
    rng = np.random.default_rng(0)
    params = ProtocolParameters(
        parties=("w0", "w1", "w2"),
        filter_bits=96,
        match_threshold=0.5,
        segment_threshold=0.3,
        target="all",
    )
    run_in_process([_Table(rng, 8, 96) for _ in range(3)], params)
    # Target any (the default): pair kernel, pairwise ring, group solver.
    run_in_process([_Table(rng, 8, 96) for _ in range(3)], replace(params, target="any"))
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
    run_mpc3_in_process([_Table(rng, 8, 96) for _ in range(3)], mpc3)
    return time.perf_counter() - t0


if __name__ == "__main__":  # scripts/setup.sh: fill numba's on-disk cache once per checkout
    print(f"compiled loops ready in {warm_up():.1f}s")
