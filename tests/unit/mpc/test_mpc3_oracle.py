"""mpc3 in process equals the plaintext oracle exactly (sets and similarities), P = 2 (helper) .. 7."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from party.encoding.records import EncodedRecords
from party.mpc.driver import run_mpc3_in_process
from party.protocol.oracle import oracle_candidates
from party.protocol.params import ProtocolParameters
from tests.unit.protocol.helpers import linked_tables, random_table
from tests.unit.protocol.test_oracle_equivalence import oracle_sets, run_sets


def mpc_params(
    p: int,
    l_bits: int,
    s_t: float,
    *,
    one_to_one: bool = False,
    max_block_size: int | None = None,
) -> ProtocolParameters:
    names = tuple(f"party{i}" for i in range(p))
    helpers = ("party0", "party1", "helper") if p == 2 else ()
    return ProtocolParameters(
        names,
        l_bits,
        s_t,
        0.0,
        one_to_one,
        max_block_size,
        mode="mpc3",
        compute_parties=helpers,
        target="all",
    )


def check_equal(tables, params, *, batch_sets=None):
    run = run_mpc3_in_process(tables, params, batch_sets=batch_sets)
    got = run_sets(run, tables)
    want = oracle_sets(tables, params, run.pseudonyms)
    assert got == want
    cand, _ = oracle_candidates(tables, params, run.pseudonyms)
    assert run.classification.sets_summed == cand.shape[0]
    assert [s.candidate_sets for s in run.mpc_stats] == [cand.shape[0]] * 3
    return run, want


@pytest.mark.parametrize("p", [2, 3, 4, 5, 6, 7])
@pytest.mark.parametrize("one_to_one", [False, True])
def test_equals_oracle(p, one_to_one):
    rng = np.random.default_rng(100 + p)
    l_bits = 14 * p
    blocks = 8 if p <= 4 else 16  # keeps 2..3 records per party and block: <= 3^P sets per block
    tables = linked_tables(rng, p, 24, l_bits, shared=10, blocks=blocks, flip=0.03)
    params = mpc_params(p, l_bits, 0.7, one_to_one=one_to_one)
    run, want = check_equal(tables, params, batch_sets=64)
    assert want, "the data should produce matches"
    assert run.mpc_stats[0].batches > 1


@pytest.mark.parametrize("s_t", [0.0, 1.0, 0.5])
def test_boundary_thresholds_and_empty_filters(s_t):
    """s_t = 0 matches everything (also x = 0), s_t = 1 only identical filters; exact ties."""
    rng = np.random.default_rng(7)
    p, l_bits = 3, 48
    tables = linked_tables(rng, p, 12, l_bits, shared=6, blocks=2, flip=0.0)
    # empty filters for two records at every party, and duplicated filters for ties
    tables = [
        EncodedRecords(
            t.record_ids,
            np.concatenate([np.zeros((2, 1), np.uint64), t.filters[2:]]),
            l_bits,
            t.block_digests,
        )
        for t in tables
    ]
    for oto in (False, True):
        check_equal(tables, mpc_params(p, l_bits, s_t, one_to_one=oto))


def test_multi_pass_blocking_and_sub_blocking():
    rng = np.random.default_rng(11)
    p, l_bits = 3, 96
    tables = linked_tables(rng, p, 40, l_bits, shared=15, blocks=3, keys=2, flip=0.04)
    for cap in (None, 4):
        check_equal(tables, mpc_params(p, l_bits, 0.6, max_block_size=cap), batch_sets=128)


def test_no_common_blocks():
    rng = np.random.default_rng(3)
    a = random_table(rng, 5, 48, blocks=2)
    b = random_table(rng, 5, 48, blocks=2)
    b = EncodedRecords(b.record_ids, b.filters, 48, b.block_digests + np.uint64(1))
    c = random_table(rng, 5, 48, blocks=2)
    run, want = check_equal([a, b, c], mpc_params(3, 48, 0.5))
    assert run.classification.sets_summed == 0 and want == {}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(2, 5),
    st.sampled_from([0.0, 0.3, 0.62, 0.8, 0.9, 1.0]),
    st.booleans(),
    st.integers(0, 2**31),
)
def test_random_runs_equal_oracle(p, s_t, one_to_one, seed):
    rng = np.random.default_rng(seed)
    l_bits = 20 * p
    tables = linked_tables(rng, p, 10, l_bits, shared=5, blocks=4, flip=0.05)
    check_equal(tables, mpc_params(p, l_bits, s_t, one_to_one=one_to_one))
