"""mpc3 with target "any" in process: groups equal the independent oracle_any exactly, and the values
the compute parties open are exactly every candidate pair's match bit and (c, S) of matched pairs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from party.encoding.bits import pack_rows
from party.encoding.records import EncodedRecords
from party.mpc.gates import Gates
from party.mpc.pairs import PairComputeParty, run_mpc3_any_in_process
from party.mpc.threshold import threshold_test
from party.protocol.blocks import shared_blocks
from party.protocol.errors import ParameterError, ProtocolError
from party.protocol.oracle_any import oracle_groups, oracle_pairs
from party.protocol.params import ProtocolParameters
from party.protocol.solver import SOLVERS
from tests.unit.protocol.test_any_target import subset_tables


def any_params(p: int, l_bits: int, s_t: float, **kw: object) -> ProtocolParameters:
    names = tuple(f"p{i}" for i in range(p))
    base: dict[str, object] = dict(
        mode="mpc3",
        target="any",
        compute_parties=("p0", "p1", "helper") if p == 2 else (),
        memory_budget_bytes=2**27,
    )
    base.update(kw)
    return ProtocolParameters(names, l_bits, s_t, 0.0, **base)  # type: ignore[arg-type]


def groups_by_record_id(run, tables) -> set:
    """{(((party, record id), ...), similarity)} of a run's matches.csv rows."""
    by_lid: dict[str, list] = {}
    for q, rows in enumerate(run.matches):
        for r in rows:
            by_lid.setdefault(r.linkage_id, []).append((q, r.record_id, r.similarity, r.group_size))
    out = set()
    for members in by_lid.values():
        assert len({m[2] for m in members}) == 1 and all(m[3] == len(members) for m in members)
        out.add((tuple(sorted((q, rid) for q, rid, _, _ in members)), members[0][2]))
    return out


def oracle_by_record_id(tables, params, run) -> set:
    pairs = oracle_pairs(tables, params)
    want = oracle_groups(
        pairs,
        params.min_parties,
        params.solver,
        run.pseudonyms,
        params.match_threshold,
        parties=params.party_count,
    )
    assert len(run.matched_pairs) == len(pairs)
    return {
        (tuple((q, tables[q].record_ids[row]) for q, row in g.members), g.similarity) for g in want
    }


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(("seed", "p"), [(1, 2), (2, 3), (3, 4), (4, 5)])
def test_groups_equal_the_oracle(seed: int, p: int, solver: str) -> None:
    tables = subset_tables(seed, p, 40, 0.06)
    prm = any_params(p, tables[0].filter_bits, 0.75, solver=solver)
    run = run_mpc3_any_in_process(tables, prm, batch_sets=64)
    want = oracle_by_record_id(tables, prm, run)
    assert groups_by_record_id(run, tables) == want
    assert len(want) > 0
    stats = run.mpc_stats
    assert stats[0].batches > p * (p - 1) // 2  # several batches, batches never mix party pairs
    assert [s.candidate_sets for s in stats] == [run.stats.candidate_pairs] * 3
    assert len({(s.rounds, s.bytes_sent) for s in stats}) == 1


@pytest.mark.parametrize("m", [3, 4])
def test_min_parties_and_one_record_per_party(m: int) -> None:
    tables = subset_tables(9, 5, 60, 0.04)
    prm = any_params(5, tables[0].filter_bits, 0.7, min_parties=m, solver="greedy")
    run = run_mpc3_any_in_process(tables, prm)
    assert groups_by_record_id(run, tables) == oracle_by_record_id(tables, prm, run)
    for g in run.groups:
        assert len(g.members) >= m and len(set(g.parties)) == len(g.parties)


def _tie_tables(l_bits: int) -> list[EncodedRecords]:
    """Ties, a pair exactly at 0.8, empty filters at one and at both ends, one shared block."""

    def table(prefix: str, ones: list[list[int]]) -> EncodedRecords:
        bits = np.zeros((len(ones), l_bits), np.uint8)
        for r, idx in enumerate(ones):
            bits[r, idx] = 1
        dig = np.full((len(ones), 1), 5, np.uint64)
        return EncodedRecords(
            tuple(f"{prefix}{i}" for i in range(len(ones))), pack_rows(bits), l_bits, dig
        )

    same = list(range(10))
    return [
        table("a", [same, [0, 1, 2, 3, 70], [], same]),  # a0 and a3 identical: ties
        table("b", [same, [0, 1, 2, 3, 71], []]),  # b1 with a1: Dice exactly 0.8
        table("c", [same, [], [40, 41]]),
    ]


@pytest.mark.parametrize("s_t", [0.0, 0.8, 1.0])
@pytest.mark.parametrize("solver", SOLVERS)
def test_ties_boundaries_and_empty_filters(s_t: float, solver: str) -> None:
    tables = _tie_tables(120)
    prm = any_params(3, 120, s_t, solver=solver)
    run = run_mpc3_any_in_process(tables, prm)
    want = oracle_by_record_id(tables, prm, run)
    assert groups_by_record_id(run, tables) == want
    matched = {
        (a, b, round(s, 12)) for a, _, b, _, s in run.matched_pairs
    }  # the boundary pair a1-b1 (Dice 0.8) matches at s_t = 0.8
    if s_t == 0.8:
        assert (0, 1, 0.8) in matched
    if s_t == 0.0:  # everything matches, empty-with-empty too (Dice 0)
        assert run.stats.matched_pairs == run.stats.candidate_pairs
    if s_t == 1.0:
        assert {s for *_, s in run.matched_pairs} == {1.0}


def _candidates(tables, a: int, b: int, keys) -> list[tuple[int, int]]:
    """Rows (ra, rb) sharing a non-zero digest, ordered by pseudonym tuple (written for the test)."""
    da = [set(map(int, r)) - {0} for r in tables[a].block_digests]
    db = [set(map(int, r)) - {0} for r in tables[b].block_digests]
    rows = [(x, y) for x in range(len(da)) for y in range(len(db)) if da[x] & db[y]]
    return sorted(rows, key=lambda r: (int(keys[a][r[0]]), int(keys[b][r[1]])))


def _plain(table: EncodedRecords, row: int) -> int:
    return int.from_bytes(np.asarray(table.filters[row], dtype="<u8").tobytes(), "little")


@pytest.mark.parametrize("s_t", [0.75, 0.0])
def test_compute_parties_open_only_match_bits_and_matched_c_and_s(monkeypatch, s_t) -> None:
    """Spy on every opening at every compute party: per batch, the match bit of each candidate
    pair (then the padding lanes' constant bits), then c | S << cw of the matched pairs only; nothing else."""
    opened: list[list[tuple[int, np.ndarray]]] = [[], [], []]
    original = Gates.open

    def spy_open(self, x):
        value = yield from original(self, x)
        opened[self.index].append((self.batch, np.array(value, copy=True)))
        return value

    monkeypatch.setattr(Gates, "open", spy_open)
    tables = subset_tables(5, 3, 30, 0.05)
    l_bits = tables[0].filter_bits
    prm = any_params(3, l_bits, s_t)
    run = run_mpc3_any_in_process(tables, prm, batch_sets=64)
    for i in (1, 2):
        assert [b for b, _ in opened[i]] == [b for b, _ in opened[0]]
        assert all(
            np.array_equal(x, y) for (_, x), (_, y) in zip(opened[i], opened[0], strict=True)
        )
    test = threshold_test(2, l_bits, s_t)
    cw, w = test.count_bits, test.width
    per_batch: dict[int, list[np.ndarray]] = {}
    for batch, value in opened[0]:
        per_batch.setdefault(batch, []).append(value)
    batch = 0
    for a, b in itertools.combinations(range(3), 2):
        cand = _candidates(tables, a, b, run.pseudonyms)
        for lo in range(0, len(cand), 64):
            part = cand[lo : lo + 64]
            values = per_batch.pop(batch)
            bits, vals = [], []
            for ra, rb in part:
                fa, fb = _plain(tables[a], ra), _plain(tables[b], rb)
                c, x = (fa & fb).bit_count(), fa.bit_count() + fb.bit_count()
                hit = s_t == 0.0 or (x > 0 and 2 * c / x >= s_t)
                bits.append(hit)
                if hit:
                    s = (test.multiplier * c - test.numerator * x) % (1 << w)
                    vals.append(c | s << cw)
            if s_t == 0.0:  # every pair matches: no match-bit opening at all
                assert len(values) == 1
            else:
                assert len(values) == 2
                lane_bits = np.unpackbits(
                    values[0].astype("<u8").view(np.uint8), bitorder="little"
                ).astype(bool)
                # padding lanes are public all-zero sets (S = 0 reads as a match): not data
                assert lane_bits[: len(bits)].tolist() == bits
                assert lane_bits[len(bits) :].all()
            assert values[-1].tolist() == vals
            batch += 1
    assert per_batch == {}  # no other batch opened anything
    assert batch == run.mpc_stats[0].batches


def test_shared_blocks_are_digests_at_two_or_more_parties() -> None:
    u = np.uint64
    got = shared_blocks(
        [np.array([0, 3, 5, 5, 9], u), np.array([5, 7], u), np.array([3, 11], u), np.array([], u)]
    )
    assert got.tolist() == [3, 5]
    with pytest.raises(ProtocolError, match="at least 2 parties"):
        shared_blocks([np.array([1], u)])


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ParameterError, match="min_parties"):
        any_params(3, 60, 0.8, min_parties=4)
    with pytest.raises(ParameterError, match="segment_threshold must be 0"):
        ProtocolParameters(("a", "b", "c"), 60, 0.8, 0.5, mode="mpc3", target="any")
    from party.mpc.driver import run_keys
    from party.mpc.errors import MpcError

    with pytest.raises(MpcError, match="not 'any'"):
        PairComputeParty(0, any_params(3, 60, 0.8, target="all"), run_keys()[0])
    with pytest.raises(ProtocolError, match="target 'any'"):
        run_mpc3_any_in_process(subset_tables(1, 3, 5, 0.0), any_params(3, 180, 0.8, target="all"))


def test_compute_party_class_follows_the_target() -> None:
    from party.mpc.compute import ComputeParty
    from party.mpc.pairs import compute_party_class

    assert compute_party_class(any_params(3, 60, 0.8)) is PairComputeParty
    assert compute_party_class(any_params(3, 60, 0.8, target="all")) is ComputeParty


def test_matched_pairs_beyond_the_memory_budget_are_refused() -> None:
    """The candidate pairs and a batch fit 1 MiB, but solving every pair as matched (s_t = 0) does
    not: MemoryBudgetError naming the matched pairs, not an out-of-memory."""
    from party.protocol.errors import MemoryBudgetError

    tables = subset_tables(1, 3, 150, 0.06)
    prm = any_params(3, tables[0].filter_bits, 0.0, memory_budget_bytes=2**20)
    with pytest.raises(MemoryBudgetError, match="matched pairs"):
        run_mpc3_any_in_process(tables, prm, batch_sets=64)
