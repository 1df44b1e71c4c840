"""Input shares reconstruct; malformed shares, payloads and calls get clear MpcErrors."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from party.mpc.compute import ComputeParty
from party.mpc.driver import run_keys
from party.mpc.errors import MpcCancelled, MpcError
from party.mpc.inputs import InputShare, input_shares, validate_input_share
from party.mpc.threshold import threshold_test
from party.protocol.blocks import common_blocks
from party.protocol.engine import PartyEngine
from party.protocol.errors import MemoryBudgetError, ParameterError
from party.protocol.params import ProtocolParameters
from tests.unit.protocol.helpers import linked_tables

L_BITS = 100  # not a multiple of 64: padding bits exist


def _setup(p: int = 3, s_t: float = 0.7, **kw):
    rng = np.random.default_rng(4)
    tables = linked_tables(rng, p, 12, L_BITS, shared=6, blocks=3)
    params = ProtocolParameters(
        tuple(f"p{i}" for i in range(p)), L_BITS, s_t, 0.0, mode="mpc3", **kw, target="all"
    )
    engines = [PartyEngine(i, params, tables[i]) for i in range(p)]
    common = common_blocks([e.block_digests() for e in engines])
    for e in engines:
        e.set_common_blocks(common)
    return params, engines


def test_shares_reconstruct_and_look_like_the_records():
    params, engines = _setup()
    test = threshold_test(3, L_BITS, 0.7)
    for e in engines:
        shares = input_shares(e)
        pseud, digests, filters, counts = e.shared_records()
        assert [s.target for s in shares] == [0, 1, 2]
        for t in range(3):
            # replicated: CP t's second share is CP t+1's first
            assert np.array_equal(shares[t].filters[1], shares[(t + 1) % 3].filters[0])
            assert np.array_equal(shares[t].counts[1], shares[(t + 1) % 3].counts[0])
            assert np.array_equal(shares[t].pseudonyms, pseud)
            assert np.array_equal(shares[t].block_digests, digests)
            validate_input_share(
                shares[t], target=t, parties=3, filter_bits=L_BITS, count_bits=test.width
            )
        f = shares[0].filters[0] ^ shares[1].filters[0] ^ shares[2].filters[0]
        assert np.array_equal(f, filters)
        c = shares[0].counts[0] ^ shares[1].counts[0] ^ shares[2].counts[0]
        want = [test.count_term(int(x), e.index == 0) for x in counts]
        assert c.tolist() == want
        assert not np.array_equal(shares[0].filters[0], filters)  # shares are not the data
        assert "rows=" in repr(shares[0]) and "filters" not in repr(shares[0])


def _bad(share: InputShare, **changes) -> InputShare:
    return dataclasses.replace(share, **changes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: _bad(s, target=1), "addressed to compute party 1, not 0"),
        (lambda s: _bad(s, source=5), "source 5 is not a data party"),
        (lambda s: _bad(s, filter_bits=64), "has 64-bit filters, expected 100"),
        (lambda s: _bad(s, pseudonyms=s.pseudonyms.astype(np.int64)), "pseudonyms must be"),
        (lambda s: _bad(s, pseudonyms=s.pseudonyms[::-1].copy()), "sorted ascending"),
        (
            lambda s: _bad(s, pseudonyms=np.concatenate([[np.uint64(0)], s.pseudonyms[1:]])),
            "pseudonym 0 is reserved",
        ),
        (lambda s: _bad(s, block_digests=s.block_digests[:-1]), "block_digests must be"),
        (lambda s: _bad(s, block_digests=np.zeros_like(s.block_digests)), "belongs to no block"),
        (lambda s: _bad(s, filters=(s.filters[0],)), "filters must be a pair"),
        (lambda s: _bad(s, filters=(s.filters[0][:, :1], s.filters[1])), "filter share 0"),
        (
            lambda s: _bad(s, filters=(s.filters[0], s.filters[1] | np.uint64(1 << 63))),
            "filter share 1 does not fit 100-bit rows",
        ),
        (lambda s: _bad(s, counts=(s.counts[0][:-1], s.counts[1])), "count share 0 must be"),
        (
            lambda s: _bad(s, counts=(s.counts[0], s.counts[1] | np.uint64(1 << 40))),
            "count share 1 has bits above",
        ),
    ],
)
def test_malformed_input_share_is_rejected(change, message):
    params, engines = _setup()
    share = input_shares(engines[0])[0]
    cp = ComputeParty(0, params, run_keys()[0])
    with pytest.raises(MpcError, match=message):
        cp.receive_input(change(share))


def test_duplicate_and_missing_inputs():
    params, engines = _setup()
    cp = ComputeParty(0, params, run_keys()[0])
    share = input_shares(engines[0])[0]
    cp.receive_input(share)
    with pytest.raises(MpcError, match="already has the input of party 0"):
        cp.receive_input(share)
    with pytest.raises(MpcError, match=r"missing the inputs of parties \[1, 2\]"):
        next(cp.run())


def _ready_parties(**kw):
    params, engines = _setup(**kw)
    cps = [ComputeParty(i, params, k, batch_sets=64) for i, k in enumerate(run_keys())]
    for e in engines:
        for s in input_shares(e):
            cps[s.target].receive_input(s)
    return cps


def test_wrong_length_round_payload_raises():
    cps = _ready_parties()
    gen = cps[0].run()
    first = next(gen)
    assert first.batch == 0 and first.number == 0 and len(first.payload) > 0
    with pytest.raises(MpcError, match="expected a payload of"):
        gen.send(first.payload + b"x")
    gen2 = cps[1].run()
    next(gen2)
    with pytest.raises(MpcError, match="got None"):
        gen2.send(None)  # type: ignore[arg-type]


def test_cancel_stops_the_run():
    cps = _ready_parties()
    ev = threading.Event()
    ev.set()
    with pytest.raises(MpcCancelled):
        next(cps[0].run(cancel=ev))


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        (100, "candidate sets .* exceed the 2 the memory budget allows"),  # before enumerating
        (12288, "the batches in flight need about 1 MiB, more than memory_budget_bytes=12288"),
    ],
)
def test_budget_refuses_clearly(budget, message):
    params, engines = _setup()
    cps = [ComputeParty(i, params, k, memory_budget_bytes=budget) for i, k in enumerate(run_keys())]
    for e in engines:
        for s in input_shares(e):
            cps[s.target].receive_input(s)
    with pytest.raises(MemoryBudgetError, match=message):
        next(cps[0].run())


def test_constructor_and_parameter_checks():
    params, _ = _setup()
    with pytest.raises(MpcError, match="0, 1 or 2"):
        ComputeParty(3, params, run_keys()[0])
    with pytest.raises(MpcError, match="multiple of 64"):
        ComputeParty(0, params, run_keys()[0], batch_sets=100)
    seg = ProtocolParameters(("a", "b", "c"), 99, 0.7, 0.0, target="all")
    with pytest.raises(MpcError, match="mode 'segments'"):
        ComputeParty(0, seg, run_keys()[0])
    with pytest.raises(ParameterError, match="segment_threshold must be 0"):
        ProtocolParameters(("a", "b", "c"), 99, 0.7, 0.6, mode="mpc3", target="all")
    with pytest.raises(ParameterError, match="needs compute_parties"):
        ProtocolParameters(("a", "b"), 98, 0.7, 0.0, mode="mpc3", target="all")
    with pytest.raises(ParameterError, match="exactly 3 distinct compute_parties"):
        ProtocolParameters(
            ("a", "b"), 98, 0.7, 0.0, mode="mpc3", compute_parties=("a", "a", "h"), target="all"
        )
    with pytest.raises(ParameterError, match="mode must be one of"):
        ProtocolParameters(("a", "b", "c"), 99, 0.7, 0.0, mode="mpc2", target="all")
    two = ProtocolParameters(
        ("a", "b"), 98, 0.7, 0.0, mode="mpc3", compute_parties=("a", "b", "h"), target="all"
    )
    assert two.compute_party_names == ("a", "b", "h")
    assert ProtocolParameters(
        ("a", "b", "c", "d"), 100, 0.7, 0.0, mode="mpc3", target="all"
    ).compute_party_names == (
        "a",
        "b",
        "c",
    )
    # mpc3 cuts no segments: l need not be a multiple of P
    ProtocolParameters(("a", "b", "c"), 1024, 0.8, 0.0, mode="mpc3", target="all")


def test_inputs_are_released_when_the_run_starts_and_late_inputs_refused():
    from party.mpc.driver import drive

    params, engines = _setup()
    cps = [ComputeParty(i, params, k, batch_sets=64) for i, k in enumerate(run_keys())]
    late = input_shares(engines[0])[0]
    for e in engines:
        for s in input_shares(e):
            cps[s.target].receive_input(s)
    outcomes = drive([cp.run() for cp in cps])
    assert all(not cp._inputs for cp in cps)
    assert outcomes[0].stats.candidate_sets > 0
    with pytest.raises(MpcError, match="after the computation started"):
        cps[0].receive_input(late)
