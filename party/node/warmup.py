"""Warm-up of a freshly started node: tiny in-process runs on made-up filters for every protocol mode and target.

The compiled loops (numba) are compiled on their first call, or loaded from numba's on-disk cache:
about a second when cached, about a minute of CPU when not (a fresh checkout; ``scripts/setup.sh``
fills the cache by running this module). Doing it once at start keeps that cost out of the first real
run, where compiling beside the event loop can delay its heartbeats. numba compiles a loop once per
type signature (array dtype, layout, read-only flag), so the runs are chosen to reach every loop
with the types a networked run passes: rows that really match (the sorts, one-to-one step, group
solver and pair order after the comparison, which random rows never reach), target any once on
read-only filters as a networked run's received arrays are, mpc3 filters of three or more words
and four parties, the sorted row stores out of order and spilled, and the results writer into a
temporary folder. The loops over one array per party take them as addresses
(``party.protocol._numba_party_arrays``), one variant for every party count: P = 3 reaches them
for any P. It touches no data, secret or network.
``scripts/first_run_compiles.py`` lists what a fresh checkout's first networked runs still compile.
"""

from __future__ import annotations

import logging
import pathlib
import tempfile
import time
from dataclasses import replace
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Filter length of the mpc3 warm-up runs: three 64-bit words (see ``warm_up``).
MPC3_WARM_UP_BITS = 192
#: Party count of the warm-up's segments-mode runs (the demo's and most runs'): the per-party
#: loops' one variant serves every party count.
WARM_UP_PARTIES = 3
#: Party counts of the mpc3 warm-up runs: with four, the AND tree's second layer ANDs two received
#: (read-only) shares, which three parties never do.
MPC3_PARTY_COUNTS = (3, 4)


class _Table:
    """An encoded table of made-up bit rows (what ``run_in_process`` takes), blocked by
    ``blocking``: "one" block; "two" blocking keys per record (one of four blocks and one of
    three others: small blocks, and every set in two of them); or a block per "row" (only a
    row's copies at other parties meet it)."""

    def __init__(
        self,
        rows: list[np.ndarray],
        bits: int,
        ids: list[int],
        writable: bool = True,
        blocking: str = "one",
    ):
        from party.encoding.bits import rows_from_positions

        self.record_ids = tuple(f"w{i}" for i in ids)
        self.filters = rows_from_positions([rows[i] for i in ids], bits)
        self.filters.setflags(write=writable)
        self.filter_bits = bits
        self.block_digests = np.array([_block_keys(blocking, i) for i in ids], dtype=np.uint64)


def _block_keys(blocking: str, row: int) -> list[int]:
    """The made-up blocking-key digests of row ``row`` (``_Table``)."""
    if blocking == "two":
        return [1 + row % 4, 5 + row % 3]
    return [1 + row] if blocking == "row" else [1]


def _random_tables(rng: np.random.Generator, n: int, bits: int) -> list[_Table]:
    return [
        _Table([rng.choice(bits, bits // 3, replace=False) for _ in range(n)], bits, list(range(n)))
        for _ in range(3)
    ]


def _linked_tables(
    rng: np.random.Generator,
    bits: int,
    writable: bool,
    parties: int = 3,
    blocking: str = "one",
) -> list[_Table]:
    """``parties`` tables sharing 8 rows at every party, 4 rows with each next party (the last
    with the first) and holding 4 rows of their own: target any finds groups of two and of
    ``parties``, target all sets at every party."""
    shared = list(range(8))
    rows = [rng.choice(bits, bits // 3, replace=False) for _ in range(8 + 8 * parties)]
    pair = [list(range(8 + 4 * j, 12 + 4 * j)) for j in range(parties)]
    own = [list(range(8 + 4 * parties + 4 * j, 12 + 4 * parties + 4 * j)) for j in range(parties)]
    ids = [shared + pair[j] + pair[j - 1] + own[j] for j in range(parties)]
    return [_Table(rows, bits, i, writable, blocking) for i in ids]


def _sorted_stores() -> None:
    """The sorted row stores' loops that only many rows reach (survivors and ring stores of a
    large run): a store appended out of key order with repeated keys, finished in memory (the
    de-duplicating sort, hash pass first or not) and spilled (sorted runs on disk, merged); and
    the kernel threads' range sort (``row_sort.sort_unique_rows``, from ``PARALLEL_MIN_ROWS``
    rows on). Rows of made-up numbers in a temporary folder."""
    from party.protocol.row_sort import sort_unique_rows
    from party.protocol.spill import LocalGauge, RowStore, SpillFolder

    rng = np.random.default_rng(1)
    rows = rng.integers(0, 8, size=(64, 4), dtype=np.uint64)  # keys repeat, in no order
    with tempfile.TemporaryDirectory(prefix="pprl-warm-up-") as tmp:
        folder = SpillFolder(tmp)
        try:
            for limit in (1 << 20, 0):  # in memory; every append spilled, then merged
                for repeats in (True, False):
                    store = RowStore(
                        4,
                        gauge=LocalGauge(limit),
                        folder=folder,
                        key_columns=3,
                        name="warm-up",
                        repeats=repeats,
                    )
                    for part in (rows[32:], rows[:32]):
                        store.append(part)
                    store.finish()
                    store.close()
        finally:
            folder.close()
    sort_unique_rows(rows, 3, 2)


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
    names = tuple(f"w{j}" for j in range(WARM_UP_PARTIES))
    # Target all on rows present at every party, one-to-one (as simulate.py and the shipped
    # parameters run it), two blocking keys (a set is found in two blocks, in no key order): the
    # survivors' de-duplicating sort, the matched sets' sorts and the greedy one-to-one step,
    # which a run without matches never reaches.
    base = replace(params, parties=names, match_threshold=0.8, segment_threshold=0.7)
    linked_all = replace(base, one_to_one=True)
    tables = _linked_tables(rng, 96, True, WARM_UP_PARTIES, blocking="two")
    _expect_matches(run_in_process(tables, linked_all), "target all")
    # Target any (the default): pair kernel, pairwise ring, group solver, pair order; once on
    # read-only filters, as a networked run's received arrays are.
    linked = replace(base, target="any")
    for writable in (True, False):
        tables = _linked_tables(rng, 96, writable, WARM_UP_PARTIES)
        _expect_matches(run_in_process(tables, linked), "target any")
    _sorted_stores()
    _write_results()
    # Mode mpc3: its bit-sliced gate kernels (numba) compile on first use as well. At least three
    # 64-bit words per filter (a real filter has 16), so that the popcount's first full-adder
    # layer runs on whole words, one of its operands the received (read-only) AND shares; four
    # parties AND two received shares in the tree's second layer. A block per row: the candidate
    # sets are the rows at every party only (one block of all would make 20^P of them).
    from party.mpc.driver import run_mpc3_in_process

    for parties in MPC3_PARTY_COUNTS:
        mpc3 = ProtocolParameters(
            parties=tuple(f"w{j}" for j in range(parties)),
            filter_bits=MPC3_WARM_UP_BITS,
            match_threshold=0.8,
            segment_threshold=0.0,
            one_to_one=True,
            mode="mpc3",
            target="all",
        )
        tables = _linked_tables(rng, MPC3_WARM_UP_BITS, True, parties, blocking="row")
        _expect_matches(run_mpc3_in_process(tables, mpc3), "mpc3")
    return time.perf_counter() - t0


def _expect_matches(run: Any, what: str) -> None:
    """Log when a linked warm-up run found nothing: the loops after the comparison stay cold."""
    if not any(len(rows) for rows in run.matches):
        log.warning("the warm-up's linked %s run found no matches; its later loops stay cold", what)


if __name__ == "__main__":  # scripts/setup.sh: fill numba's on-disk cache once per checkout
    from party.encoding._numba_bits import warm_up as warm_up_encoding

    t = time.perf_counter()
    warm_up()
    warm_up_encoding()  # the encoding lanes' loops (each lane loads them when it starts)
    print(f"compiled loops ready in {time.perf_counter() - t:.1f}s")
