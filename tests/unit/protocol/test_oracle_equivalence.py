"""The protocol run in process equals the plaintext oracle (s_m = 0) or is a subset of it (s_m > 0)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from unittest import mock

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from party.encoding.records import EncodedRecords
from party.protocol import engine
from party.protocol.driver import InProcessRun, run_in_process
from party.protocol.oracle import oracle_matches
from party.protocol.params import ProtocolParameters
from tests.unit.protocol.helpers import linked_tables, random_table


def run_sets(run: InProcessRun, tables: Sequence[EncodedRecords]) -> dict[tuple[str, ...], float]:
    """Matched sets as (record id per party) -> similarity, rebuilt from the per-party results."""
    p = len(tables)
    by_link: dict[str, dict[int, tuple[str, float]]] = {}
    for j, rows in enumerate(run.matches):
        for r in rows:
            by_link.setdefault(r.linkage_id, {})[j] = (r.record_id, r.similarity)
    out: dict[tuple[str, ...], float] = {}
    for parts in by_link.values():
        assert sorted(parts) == list(range(p)), "every party gets every matched set"
        sims = {s for _, s in parts.values()}
        assert len(sims) == 1
        out[tuple(parts[j][0] for j in range(p))] = sims.pop()
    return out


def oracle_sets(
    tables: Sequence[EncodedRecords], params: ProtocolParameters, keys: Sequence[np.ndarray] | None
) -> dict[tuple[str, ...], float]:
    return {
        tuple(tables[j].record_ids[r] for j, r in enumerate(m.records)): m.dice
        for m in oracle_matches(tables, params, keys)
    }


def params_for(
    p: int,
    l_bits: int,
    s_t: float,
    s_m: float,
    *,
    one_to_one: bool = False,
    max_block_size: int | None = None,
) -> ProtocolParameters:
    names = tuple(f"party{i}" for i in range(p))
    return ProtocolParameters(names, l_bits, s_t, s_m, one_to_one, max_block_size, target="all")


@dataclass(frozen=True)
class Extra:
    one_to_one: bool
    max_block_size: int | None
    s_t: float


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[EncodedRecords], int, Extra]:
    p = draw(st.integers(2, 7))
    max_n = {2: 12, 3: 9, 4: 6, 5: 5, 6: 4, 7: 4}[p]
    seg = draw(st.sampled_from([1, 7, 33, 64, 70]))
    l_bits = seg * p
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    keys = draw(st.integers(1, 2))
    blocks = draw(st.integers(1, 3))
    fill = draw(st.sampled_from([0.05, 0.3, 0.6]))
    if draw(st.booleans()):
        n = draw(st.integers(1, max_n))
        tables = linked_tables(
            rng, p, n, l_bits, shared=draw(st.integers(0, n)), blocks=blocks, keys=keys, fill=fill
        )
    else:
        tables = [
            random_table(
                rng,
                draw(st.integers(0, max_n)),
                l_bits,
                blocks=blocks,
                keys=keys,
                fill=fill,
                prefix=f"t{j}-",
                empty_rate=0.2,
            )
            for j in range(p)
        ]
    extra = Extra(
        one_to_one=draw(st.booleans()),
        max_block_size=draw(st.sampled_from([None, None, 1, 2, 3])),
        s_t=draw(st.sampled_from([0.0, 0.3, 0.5, 0.7, 0.9])),
    )
    return tables, l_bits, extra


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_sm_zero_equals_oracle_exactly(
    scenario: tuple[list[EncodedRecords], int, Extra],
) -> None:
    tables, l_bits, extra = scenario
    p = len(tables)
    params = params_for(
        p,
        l_bits,
        extra.s_t,
        0.0,
        one_to_one=extra.one_to_one,
        max_block_size=extra.max_block_size,
    )
    for small in (engine.SMALL_BLOCK_SETS, 0):  # batched small-block path, then chunked kernel
        with mock.patch.object(engine, "SMALL_BLOCK_SETS", small):
            run = run_in_process(tables, params)
        expected = oracle_sets(tables, params, run.pseudonyms)
        assert run_sets(run, tables) == expected  # same sets, bit-identical similarities
        for stats in run.metrics.comparison:
            assert stats.pruned_per_stage == [0] * p


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([0.2, 0.4, 0.6, 0.8, 1.0]))
def test_sm_positive_is_subset_of_oracle(
    scenario: tuple[list[EncodedRecords], int, Extra], s_m: float
) -> None:
    tables, l_bits, extra = scenario
    p = len(tables)
    params = params_for(
        p,
        l_bits,
        extra.s_t,
        s_m,
        max_block_size=extra.max_block_size,  # type: ignore[arg-type]
    )
    outcomes = []
    for small in (engine.SMALL_BLOCK_SETS, 0):  # batched small-block path, then chunked kernel
        with mock.patch.object(engine, "SMALL_BLOCK_SETS", small):
            run = run_in_process(tables, params)
        got = run_sets(run, tables)
        expected = oracle_sets(tables, params, run.pseudonyms)
        assert set(got) <= set(expected)
        for key, sim in got.items():
            assert sim == expected[key]
        outcomes.append((got, [c.survived_per_stage for c in run.metrics.comparison]))
    if extra.max_block_size is None:  # with a cap, sub-blocks depend on each run's pseudonyms
        assert outcomes[0] == outcomes[1]


def test_multi_pass_blocking_deduplicates_sets() -> None:
    rng = np.random.default_rng(5)
    base = linked_tables(rng, 3, 6, 99, shared=6, flip=0.0, blocks=1, keys=3)
    # three blocking keys with three different digests, every record in all three blocks
    three = np.tile(np.array([11, 22, 33], dtype=np.uint64), (6, 1))
    tables = [EncodedRecords(t.record_ids, t.filters, 99, three) for t in base]
    params = params_for(3, 99, 0.99, 0.0)
    run = run_in_process(tables, params)
    # every record is in the same block under all 3 keys: 3 enumerations per set, one set each
    stats = run.metrics.comparison[0]
    assert stats.candidate_sets == 3 * 6**3
    assert stats.survivors == 6**3
    assert run.metrics.sets_summed == 6**3
    assert len(run.matches[0]) == 6  # identical filters match themselves only (at s_t 0.99)


def test_no_common_blocks_gives_empty_results() -> None:
    rng = np.random.default_rng(6)
    a = random_table(rng, 5, 64, blocks=1)
    b = random_table(rng, 5, 64, blocks=1)
    b = EncodedRecords(b.record_ids, b.filters, 64, b.block_digests + np.uint64(1))
    run = run_in_process([a, b], params_for(2, 64, 0.5, 0.0))
    assert run.matches == [[], []]
    assert run.metrics.sets_summed == 0


def test_numpy_kernel_engine_equals_oracle() -> None:
    rng = np.random.default_rng(8)
    tables = linked_tables(rng, 3, 40, 99, shared=20, flip=0.03, blocks=2, keys=2)
    for s_m in (0.0, 0.6):
        # one-to-one only without filtering: with s_m > 0 a pruned rival can change the 1:1 choice
        params = params_for(3, 99, 0.6, s_m, one_to_one=s_m == 0.0)
        with mock.patch.object(engine, "SMALL_BLOCK_SETS", 0):
            run = run_in_process(tables, params, kernel="numpy")
        expected = oracle_sets(tables, params, run.pseudonyms)
        got = run_sets(run, tables)
        if s_m == 0.0:
            assert got == expected
        else:
            assert set(got) <= set(expected) and len(got) >= 15
