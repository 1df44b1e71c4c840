#!/usr/bin/env python3
"""Fills numba's on-disk cache while the image is built (Dockerfile), with every compiled loop a node uses.

The node's own start-up warm-up (party.node.warmup: comparison, pairs, group solver and pair order,
mpc3 gates, the results writer's byte copies) and the encoding lanes' loops (party.encoding._numba_bits,
which each lane loads when it starts), each on made-up inputs: no data, secret or network.
NUMBA_CACHE_DIR names the folder to fill; at run time docker/entrypoint.sh copies it to the container's
writable NUMBA_CACHE_DIR, and numba then loads instead of compiling (about a minute of CPU per node
otherwise). Exit status non-zero when the folder ends up without a cache of each of them.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time


def main() -> int:
    cache = os.environ.get("NUMBA_CACHE_DIR", "")
    if not cache:
        print("warm_cache.py: set NUMBA_CACHE_DIR to the folder to fill", file=sys.stderr)
        return 2
    import party
    from party.encoding._numba_bits import warm_up as warm_encoding
    from party.node.warmup import warm_up

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
