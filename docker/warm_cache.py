#!/usr/bin/env python3
"""Fills numba's on-disk cache while the image is built (Dockerfile), with every compiled loop a node uses.

The node's own start-up warm-up (party.node.warmup: comparison, pairs, mpc3 gates), the encoding lanes'
loops (party.encoding._numba_bits, which each lane loads when it starts), a tiny target-any run whose
records really match (the group solver and pair order, which the warm-up's random rows never reach) and
the results writer's byte copies (party.node._numba_csv, first used when a run writes matches.csv), each
on made-up inputs: no data, secret or network. NUMBA_CACHE_DIR names the folder to fill; at run time docker/entrypoint.sh copies
it to the container's writable NUMBA_CACHE_DIR, and numba then loads instead of compiling (about a minute of
CPU per node otherwise). Exit status non-zero when the folder ends up without a cache of each of them.
"""

from __future__ import annotations

import os
import pathlib
import sys
import tempfile
import time
from typing import Any


class _Table:
    """An encoded table of made-up bit rows (what party.protocol.driver.run_in_process takes)."""

    def __init__(self, rows: list[Any], bits: int, ids: list[int]) -> None:
        import numpy as np

        from party.encoding.bits import rows_from_positions

        self.record_ids = tuple(f"w{i}" for i in ids)
        self.filters = rows_from_positions([rows[i] for i in ids], bits)
        self.filter_bits = bits
        self.block_digests = np.ones((len(ids), 1), dtype=np.uint64)


def _linked_groups() -> None:
    """A tiny target-any run in which records really match (groups of two and three parties): the
    group solver's loops, which the node's warm-up (random rows, no matches) never reaches."""
    import numpy as np

    from party.protocol.driver import run_in_process
    from party.protocol.params import ProtocolParameters

    rng = np.random.default_rng(0)
    bits = 96
    rows = [rng.choice(bits, bits // 3, replace=False) for _ in range(24)]
    tables = [
        _Table(rows, bits, list(range(0, 16))),
        _Table(rows, bits, list(range(0, 8)) + list(range(16, 24))),
        _Table(rows, bits, list(range(8, 24))),
    ]
    params = ProtocolParameters(
        parties=("w0", "w1", "w2"),
        filter_bits=bits,
        match_threshold=0.8,
        segment_threshold=0.7,
        target="any",
    )
    groups = {row.linkage_id for row in run_in_process(tables, params).matches[0]}
    if not groups:
        raise SystemExit("warm_cache.py: the linked run found no groups (the solver stayed cold)")


def main() -> int:
    cache = os.environ.get("NUMBA_CACHE_DIR", "")
    if not cache:
        print("warm_cache.py: set NUMBA_CACHE_DIR to the folder to fill", file=sys.stderr)
        return 2
    import numpy as np

    import party
    from party.encoding._numba_bits import warm_up as warm_encoding
    from party.node.results import write_match_chunks
    from party.node.warmup import warm_up
    from party.protocol.classify import ResolvedMatches

    if not pathlib.Path(party.__file__ or "").is_relative_to(sys.prefix):
        # numba keys its cache on the source path: a cache of another copy would never be loaded
        print(
            f"warm_cache.py: party is imported from {party.__file__}, not installed in {sys.prefix}",
            file=sys.stderr,
        )
        return 2
    t0 = time.perf_counter()
    warm_up()
    warm_encoding()
    chunk = ResolvedMatches(
        linkage_ids=np.array([1, 2], dtype=np.uint64),
        similarities=np.array([0.9, 0.95]),
        record_ids=["r1", "r2"],
        group_sizes=np.array([2, 2], dtype=np.uint64),
        group_parties=[("a", "b"), ("a", "b")],
    )
    _linked_groups()
    with tempfile.TemporaryDirectory() as tmp:
        for groups in (False, True):
            write_match_chunks(pathlib.Path(tmp), f"{int(groups):032x}", [chunk], groups=groups)
    folders = {
        p.name.split("_", 1)[0] for p in pathlib.Path(cache).iterdir() if any(p.glob("*.nbi"))
    }
    missing = {"protocol", "mpc", "encoding", "node"} - folders
    if missing:
        print(
            f"warm_cache.py: no cached loops of party/{sorted(missing)} in {cache}", file=sys.stderr
        )
        return 1
    print(
        f"warm_cache.py: numba cache of {sorted(folders)} filled in {time.perf_counter() - t0:.1f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
