"""A run's resident structures are counted on the node's budget, freed when they are no longer
needed, gone when the run ends, and a budget too small for them fails early, naming the setting."""

from __future__ import annotations

import dataclasses
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

from party.protocol.driver import ring_in_process, run_in_process
from party.protocol.errors import MemoryBudgetError
from party.protocol.pair_engine import PairEngine
from party.protocol.params import ProtocolParameters
from party.protocol.spill import LocalGauge
from tests.unit.protocol.helpers import linked_tables
from tests.unit.protocol.test_any_target import params, subset_tables
from tests.unit.protocol.test_pair_engine import expected, groups_of

L = 120


def _params(budget: int) -> ProtocolParameters:
    return ProtocolParameters(
        parties=("a", "b", "c"),
        filter_bits=L,
        match_threshold=0.7,
        segment_threshold=0.0,
        memory_budget_bytes=budget,
        target="any",
    )


def _run(engines: list[PairEngine], accounts: list[LocalGauge]) -> None:
    common = engines[0].common_of([e.block_digests() for e in engines])
    for e in engines:
        e.set_common_blocks(common)
    for e in engines:
        for share in e.outgoing_shares():
            nbytes = share.pseudonyms.nbytes + share.block_positions.nbytes + share.segments.nbytes
            assert accounts[share.target].try_reserve(nbytes)  # as the node's receiver does
            engines[share.target].receive_share(share, nbytes)


def test_resident_structures_are_counted_freed_after_the_comparison_and_at_the_end() -> None:
    rng = np.random.default_rng(3)
    tables = linked_tables(rng, 3, 300, L, shared=200, keys=2, blocks=5)
    params = _params(64 * 2**20)
    accounts = [LocalGauge(params.memory_budget_bytes) for _ in range(3)]
    engines = [PairEngine(i, params, tables[i], memory=accounts[i]) for i in range(3)]
    _run(engines, accounts)
    held = engines[1].resident_bytes()
    for what in (
        "encodings",
        "received segments",
        "received block positions",
        "pseudonyms and common blocks",
    ):
        assert held[what] > 0
    assert accounts[1].held == sum(held.values())  # what the account holds is what is listed
    received = weakref.ref(engines[0]._shares[1].segments)  # noqa: SLF001 - a received buffer
    for e in engines:
        e.compare()
    gc.collect()
    assert received() is None  # the received segments are gone once the comparison ended
    after = engines[1].resident_bytes()
    for what in ("encodings", "received segments", "received block positions"):
        assert what not in after
    assert accounts[1].held == sum(after.values())
    with pytest.raises(Exception, match="freed"):
        engines[1].outgoing_shares()  # the filters are gone: a clear error, not stale data
    ring_in_process(engines)
    assert engines[0].group_count > 0  # pairs matched, so the solver and its stores ran
    for e in engines:
        e.close()
    assert [a.held for a in accounts] == [0, 0, 0]  # nothing of the run outlives it
    assert all(e.resident_bytes() == {"row stores in memory": 0} for e in engines)


@pytest.mark.parametrize("solver", ["guarded", "majority"])
def test_groups_equal_the_oracle_with_the_stores_spilled(solver: str, tmp_path: Path) -> None:
    tables = subset_tables(11, 3, 500, 0.06)
    prm = dataclasses.replace(
        params(3, solver=solver, match_threshold=0.75), memory_budget_bytes=2**20
    )  # the smallest budget: a quarter of it (256 KiB) in memory, the stores spill beyond
    run = run_in_process(tables, prm, spill_dir=tmp_path)
    assert all(c.spilled_bytes > 0 for c in run.metrics.comparison)
    got = groups_of(run.matches)  # type: ignore[arg-type]
    assert got and got == expected(tables, prm, run.pseudonyms)
    assert not list(tmp_path.iterdir())  # the run's spill folders are gone


def test_a_budget_too_small_for_the_encodings_fails_at_once_naming_the_setting() -> None:
    rng = np.random.default_rng(4)
    tables = linked_tables(rng, 3, 300, L, shared=200)
    params = _params(64 * 2**20)
    with pytest.raises(MemoryBudgetError, match="memory_budget_mib"):
        PairEngine(0, params, tables[0], memory=LocalGauge(1000))


def test_resident_data_leaving_under_a_quarter_of_the_budget_fails_before_comparing() -> None:
    rng = np.random.default_rng(4)
    tables = linked_tables(rng, 3, 3400, L, shared=2000, keys=4, blocks=50)
    params = _params(2**20)  # 1 MiB: the resident structures of 3 x 3,400 records take most of it
    accounts = [LocalGauge(2**40) for _ in range(3)]
    engines = [PairEngine(i, params, tables[i], memory=accounts[i]) for i in range(3)]
    _run(engines, accounts)
    with pytest.raises(MemoryBudgetError, match="memory_budget_mib") as err:
        engines[0].compare()
    assert "received segments" in str(err.value)
    for e in engines:
        e.close()
    assert [a.held for a in accounts] == [0, 0, 0]
