"""PartyEngine input validation, state errors, budget, cancellation, progress, sub-blocking."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from party.encoding.records import EncodedRecords
from party.protocol.blocks import common_blocks, sub_blocks
from party.protocol.classify import Classification, PartyResults, linkage_label
from party.protocol.driver import run_in_process
from party.protocol.engine import PartyEngine
from party.protocol.errors import (
    ComparisonCancelled,
    ParameterError,
    ProtocolError,
    ResultsError,
    ShareError,
    StateError,
)
from party.protocol.params import ProtocolParameters
from party.protocol.segments import SegmentShare
from tests.unit.protocol.helpers import finished_run, linked_tables, random_table

NAMES = ("a", "b", "c")


def setup3(
    seed: int = 0, n: int = 6, **kw: object
) -> tuple[list[PartyEngine], list[list[SegmentShare]], ProtocolParameters]:
    rng = np.random.default_rng(seed)
    params = ProtocolParameters(NAMES, 96, 0.5, 0.0, **({"target": "all"} | kw))  # type: ignore[arg-type]
    tables = linked_tables(rng, 3, n, 96, shared=n // 2, keys=2)
    engines = [PartyEngine(i, params, t) for i, t in enumerate(tables)]
    common = common_blocks([e.block_digests() for e in engines])
    for e in engines:
        e.set_common_blocks(common)
    return engines, [e.outgoing_shares() for e in engines], params


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parties": ("a",)}, "at least 2 parties"),
        ({"parties": ("a", "a")}, "unique"),
        ({"parties": ["a", "b"]}, "tuple"),
        ({"filter_bits": 100}, "not divisible"),
        ({"filter_bits": 0}, "positive"),
        ({"match_threshold": 1.5}, "match_threshold"),
        ({"segment_threshold": float("nan")}, "segment_threshold"),
        ({"max_block_size": 0}, "max_block_size"),
        ({"memory_budget_bytes": 1000}, "memory_budget_bytes"),
    ],
)
def test_bad_parameters_are_reported(kwargs: dict[str, object], message: str) -> None:
    base: dict[str, object] = {
        "parties": NAMES,
        "filter_bits": 99,
        "match_threshold": 0.8,
        "segment_threshold": 0.7,
    }
    base.update(kwargs)
    with pytest.raises(ParameterError, match=message):
        ProtocolParameters(**base)  # type: ignore[arg-type]


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ParameterError) as info:
        ProtocolParameters(("a", "b", "c"), 100, 2.0, -1.0, target="all")
    text = str(info.value)
    assert "not divisible" in text and "match_threshold" in text and "segment_threshold" in text


def test_table_must_fit_the_parameters() -> None:
    rng = np.random.default_rng(0)
    params = ProtocolParameters(NAMES, 96, 0.5, 0.0, target="all")
    with pytest.raises(ProtocolError, match="96"):
        PartyEngine(0, params, random_table(rng, 3, 99))
    with pytest.raises(ProtocolError, match="party index"):
        PartyEngine(3, params, random_table(rng, 3, 96))


def test_shares_are_addressed_and_shaped_correctly() -> None:
    engines, shares, _ = setup3()
    share = shares[0][0]  # from 0 to 1
    assert (share.source, share.target, share.segment_bits) == (0, 1, 32)
    assert share.pseudonyms.dtype == np.uint64 and share.segments.shape == (len(share), 1)
    # same pseudonyms in every share a party sends, sorted, never 0
    assert np.array_equal(shares[0][0].pseudonyms, shares[0][1].pseudonyms)
    assert np.all(np.diff(share.pseudonyms.astype(np.float64)) > 0)
    with pytest.raises(ShareError, match="addressed to party 1"):
        engines[2].receive_share(share)
    with pytest.raises(ShareError, match="cannot receive a share from itself"):
        engines[0].receive_share(dataclasses.replace(share, target=0))
    with pytest.raises(ShareError, match="33-bit|32"):
        engines[1].receive_share(dataclasses.replace(share, segment_bits=33))
    with pytest.raises(ShareError, match="not a party index"):
        engines[1].receive_share(dataclasses.replace(share, source=7))
    with pytest.raises(ShareError, match="pseudonyms must be"):
        engines[1].receive_share(
            dataclasses.replace(share, pseudonyms=share.pseudonyms.astype(np.int64))
        )
    dup = share.pseudonyms.copy()
    dup[-1] = dup[0]
    with pytest.raises(ShareError, match="not unique"):
        engines[1].receive_share(dataclasses.replace(share, pseudonyms=dup))
    padded = share.segments.copy()
    padded[0, 0] |= np.uint64(1) << np.uint64(40)  # bit 40 of a 32-bit segment
    with pytest.raises(ShareError, match="beyond position"):
        engines[1].receive_share(dataclasses.replace(share, segments=padded))
    blocks = engines[1]._common.size  # type: ignore[union-attr]
    for bad in (blocks, 2**31 - 1, -2, -(2**31)):  # one past the last block, far out, below -1
        foreign = share.block_positions.copy()
        foreign[-1, 0] = bad
        with pytest.raises(ShareError, match=f"outside the {blocks} common blocks"):
            engines[1].receive_share(dataclasses.replace(share, block_positions=foreign))
    none = share.block_positions.copy()
    none[0, :] = -1
    with pytest.raises(ShareError, match="no common block"):
        engines[1].receive_share(dataclasses.replace(share, block_positions=none))
    with pytest.raises(ShareError, match="digests per record"):
        engines[1].receive_share(
            dataclasses.replace(share, block_positions=share.block_positions[:, :1].copy())
        )
    with pytest.raises(ShareError, match="block_positions must be"):
        engines[1].receive_share(
            dataclasses.replace(share, block_positions=share.block_positions.astype(np.int64))
        )
    engines[1].receive_share(share)
    with pytest.raises(StateError, match="already has the share"):
        engines[1].receive_share(share)


def test_non_common_digests_are_not_sent() -> None:
    rng = np.random.default_rng(1)
    params = ProtocolParameters(("a", "b"), 64, 0.5, 0.0, target="all")
    a = random_table(rng, 20, 64, blocks=10, keys=2)
    b = random_table(rng, 20, 64, blocks=3, keys=2)
    ea, eb = PartyEngine(0, params, a), PartyEngine(1, params, b)
    common = common_blocks([ea.block_digests(), eb.block_digests()])
    ea.set_common_blocks(common)
    (share,) = ea.outgoing_shares()
    assert share.block_positions.dtype == np.int32
    # each row's positions name exactly its record's common digests (-1: not common), column by
    # column, against the table and the common list
    row_of = {int(p): r for r, p in enumerate(ea.record_pseudonyms) if p}
    for k, pseudonym in enumerate(share.pseudonyms):
        for c, d in enumerate(a.block_digests[row_of[int(pseudonym)]]):
            want = int(np.searchsorted(common, d)) if d and d in set(common.tolist()) else -1
            assert share.block_positions[k, c] == want
    assert len(share) < 20  # records in no common block are not sent at all


def test_steps_out_of_order_are_state_errors() -> None:
    rng = np.random.default_rng(2)
    params = ProtocolParameters(("a", "b"), 64, 0.5, 0.0, target="all")
    e = PartyEngine(1, params, random_table(rng, 4, 64))
    with pytest.raises(StateError):
        e.outgoing_shares()
    with pytest.raises(StateError):
        e.compare()
    e.set_common_blocks(e.block_digests())
    with pytest.raises(StateError, match="missing the shares of parties \\[0\\]"):
        e.compare()
    with pytest.raises(StateError, match="not the initiator"):
        e.ring_start()
    with pytest.raises(StateError, match="already set"):
        e.set_common_blocks(e.block_digests())
    with pytest.raises(ProtocolError, match="sorted"):
        PartyEngine(0, params, random_table(rng, 4, 64)).set_common_blocks(
            np.array([5, 3], dtype=np.uint64)
        )


def test_results_reach_only_their_party() -> None:
    tables, engines, cls = linked_run(3, 8)
    res = engines[0].results_for(cls, 2)
    assert res.pseudonyms.shape == (8,) and np.isin(res.pseudonyms, cls.candidates[:, 2]).all()
    rows = engines[2].resolve_results(res)
    assert [r.linkage_id for r in rows] == sorted(r.linkage_id for r in rows)
    assert {r.record_id for r in rows} == set(tables[2].record_ids)
    with pytest.raises(ResultsError, match="handed to party 1"):
        engines[1].resolve_results(res)
    unknown = dataclasses.replace(res, pseudonyms=res.pseudonyms ^ np.uint64(1))
    with pytest.raises(ResultsError, match="never issued"):
        engines[2].resolve_results(unknown)
    with pytest.raises(ResultsError, match="equally long"):
        engines[2].resolve_results(dataclasses.replace(res, similarities=res.similarities[:-1]))
    with pytest.raises(ResultsError, match="party index"):
        engines[0].results_for(cls, 5)
    assert (
        engines[1].resolve_results(
            PartyResults(1, np.zeros(0, np.uint64), np.zeros(0, np.float64), np.zeros(0, np.uint64))
        )
        == []
    )


def linked_run(seed: int, n: int) -> tuple[list[EncodedRecords], list[PartyEngine], Classification]:
    """Three parties holding the same n records (no noise), run to the end with one-to-one."""
    tables = linked_tables(np.random.default_rng(seed), 3, n, 96, shared=n, flip=0.0, blocks=1)
    engines, cls = finished_run(
        tables, ProtocolParameters(NAMES, 96, 0.9, 0.0, one_to_one=True, target="all")
    )
    assert cls.matches == n
    return tables, engines, cls


@pytest.mark.parametrize("bad", [1.0 + 2**-52, -(2**-1074), 1.5, float("nan"), float("inf")])
def test_results_with_a_similarity_outside_0_1_are_refused(bad: float) -> None:
    # every other field is valid (issued pseudonyms, distinct ids): only the range check can refuse
    _, engines, cls = linked_run(5, 6)
    res = engines[0].results_for(cls, 1)
    sims = res.similarities.copy()
    sims[2] = bad
    with pytest.raises(ResultsError, match=r"similarity outside \[0, 1\]"):
        engines[1].resolve_results(dataclasses.replace(res, similarities=sims))


def test_results_with_similarities_at_0_and_1_are_accepted() -> None:
    _, engines, cls = linked_run(6, 6)
    res = engines[0].results_for(cls, 1)
    sims = res.similarities.copy()
    sims[0], sims[1] = 0.0, 1.0
    rows = engines[1].resolve_results(dataclasses.replace(res, similarities=sims))
    by_id = {r.linkage_id: r.similarity for r in rows}
    assert by_id[linkage_label(int(res.linkage_ids[0]))] == 0.0
    assert by_id[linkage_label(int(res.linkage_ids[1]))] == 1.0


def test_compare_reports_progress_and_can_be_cancelled() -> None:
    engines, shares, _ = setup3(n=10)
    for sent in shares:
        for s in sent:
            engines[s.target].receive_share(s)
    seen: list[tuple[int, int]] = []
    stats = engines[0].compare(progress=lambda d, t: seen.append((d, t)))
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] == stats.candidate_sets
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(ComparisonCancelled):
        engines[1].compare(cancel=cancel)
    engines[1].compare()  # a cancelled comparison keeps nothing and can run again


def test_sub_blocks_respect_the_cap_and_partition_the_sets() -> None:
    members = [np.arange(10), np.arange(100, 103), np.arange(200, 207)]
    subs = sub_blocks(members, 4)
    assert len(subs) == 3  # ceil(10/4) = 3 chunks for party 0
    seen: set[tuple[int, int, int]] = set()
    for sub in subs:
        assert all(m.size <= 4 for m in sub)
        for a in sub[0]:
            for b in sub[1]:
                for c in sub[2]:
                    key = (int(a), int(b), int(c))
                    assert key not in seen
                    seen.add(key)
    assert sub_blocks(members, None) == [members]
    assert sub_blocks(members, 10) == [members]


def test_block_stats_describe_the_blocks() -> None:
    rng = np.random.default_rng(5)
    params = ProtocolParameters(("a", "b"), 64, 0.5, 0.0, max_block_size=5, target="all")
    t = random_table(rng, 30, 64, blocks=2)
    e = PartyEngine(0, params, t)
    stats = e.set_common_blocks(e.block_digests())
    assert stats.common_blocks == 2 and stats.records_in_common_blocks == 30
    assert stats.largest_block >= 15 and stats.blocks_over_cap == 2


def test_records_without_block_value_are_not_shared() -> None:
    rng = np.random.default_rng(6)
    params = ProtocolParameters(("a", "b"), 64, 0.5, 0.0, target="all")
    t = random_table(rng, 10, 64, blocks=1)
    digests = t.block_digests.copy()
    digests[:4] = 0
    e = PartyEngine(0, params, EncodedRecords(t.record_ids, t.filters, 64, digests))
    e.set_common_blocks(e.block_digests())
    assert (e.record_pseudonyms[:4] == 0).all() and (e.record_pseudonyms[4:] != 0).all()


def test_smallest_party_joins_first() -> None:
    rng = np.random.default_rng(7)
    tables = [
        random_table(rng, 60, 48, blocks=1, prefix="a"),
        random_table(rng, 60, 48, blocks=1, prefix="b"),
        random_table(rng, 1, 48, blocks=1, prefix="c"),
    ]
    params = ProtocolParameters(NAMES, 48, 0.5, 0.3, memory_budget_bytes=2**24, target="all")
    with_order = run_in_process(tables, params)
    stats = with_order.metrics.comparison[0]
    assert stats.join_order == [2, 0, 1]
    assert stats.evaluated_per_stage[1] == 60  # 1 x 60, not 60 x 60
    assert stats.candidate_sets == 3600
