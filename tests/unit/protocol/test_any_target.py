"""Target "any": the solver's rules and tie-breaks, and the in-process protocol against the oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding.bits import pack_rows
from party.encoding.records import EncodedRecords
from party.protocol.any_driver import run_any_in_process
from party.protocol.errors import ParameterError
from party.protocol.oracle_any import oracle_groups, oracle_pairs
from party.protocol.params import ProtocolParameters
from party.protocol.solver import DEFAULT_SOLVER, SOLVERS, solve_groups


def params(p: int, **kw: object) -> ProtocolParameters:
    base: dict[str, object] = dict(
        parties=tuple(f"p{i}" for i in range(p)),
        filter_bits=60 * p,
        match_threshold=0.8,
        segment_threshold=0.0,
        target="any",
    )
    base.update(kw)
    return ProtocolParameters(**base)  # type: ignore[arg-type]


# --- solver: known answers ---------------------------------------------------------------


def test_greedy_chains_but_weakest_link_refuses_a_missing_link() -> None:
    # A0-B0 0.9, B0-C0 0.85, A0-C0 not matched: greedy joins all three, weakest-link stops at two.
    pairs = [(0, 1, 1, 1, 0.9), (1, 1, 2, 1, 0.85)]
    greedy = solve_groups(pairs, 2, "greedy")
    assert [g.members for g in greedy] == [((0, 1), (1, 1), (2, 1))]
    assert greedy[0].similarity == pytest.approx((0.9 + 0.85) / 2)
    weak = solve_groups(pairs, 2, "weakest-link")
    assert [g.members for g in weak] == [((0, 1), (1, 1))]
    assert weak[0].similarity == 0.9
    # majority: 1 of 2 cross pairs matched is half -> accepted
    assert [g.members for g in solve_groups(pairs, 2, "majority")] == [((0, 1), (1, 1), (2, 1))]


def test_majority_needs_half_of_the_cross_pairs() -> None:
    # group {A,B} then C linked to A only, D linked to A only: {A,B}+{C} has 1/2 -> ok;
    # {A,B,C}+{D} has 1/3 -> rejected
    pairs = [(0, 1, 1, 1, 0.95), (0, 1, 2, 1, 0.9), (0, 1, 3, 1, 0.85)]
    got = solve_groups(pairs, 2, "majority")
    assert [g.members for g in got] == [((0, 1), (1, 1), (2, 1))]


def test_one_record_per_party_and_ties_broken_by_smaller_key() -> None:
    # A0 ties with B5 and B3 (same Dice): the pair with the smaller far end (B3) is visited first.
    pairs = [(0, 0, 1, 5, 0.9), (0, 0, 1, 3, 0.9)]
    for solver in SOLVERS:
        assert [g.members for g in solve_groups(pairs, 2, solver, 0.8)] == [((0, 0), (1, 3))]
    # the same tie seen from the other side: B3 ties with A9 and A2 -> A2 wins
    pairs = [(0, 9, 1, 3, 0.85), (1, 3, 0, 2, 0.85)]
    assert [g.members for g in solve_groups(pairs, 2, "greedy")] == [((0, 2), (1, 3))]


def test_min_parties_drops_small_groups_and_ids_follow_smallest_member() -> None:
    pairs = [(1, 7, 2, 7, 0.99), (0, 4, 1, 4, 0.9), (0, 4, 2, 4, 0.9), (1, 4, 2, 4, 0.9)]
    got = solve_groups(pairs, 2, "weakest-link")
    assert [g.members for g in got] == [((0, 4), (1, 4), (2, 4)), ((1, 7), (2, 7))]
    assert [g.members for g in solve_groups(pairs, 3, "weakest-link")] == [((0, 4), (1, 4), (2, 4))]


# guarded at s_t = 0.88: the weak band is [0.88, 0.9); 0.88 + 0.02 == 0.9 exactly in IEEE double.
A0, B0, C0, D5 = (0, 1), (1, 1), (2, 1), (3, 5)


def pair(u: tuple[int, int], v: tuple[int, int], d: float) -> tuple[int, int, int, int, float]:
    return (u[0], u[1], v[0], v[1], d)


def guarded(pairs: list[tuple[int, int, int, int, float]]) -> list[tuple[tuple[int, int], ...]]:
    got = solve_groups(pairs, 2, "guarded", 0.88)
    want = oracle_groups(pairs, 2, "guarded", match_threshold=0.88)
    assert [g.members for g in got] == [g.members for g in want]
    return [g.members for g in got]


def test_guarded_attaches_a_lone_record_whose_only_partners_are_in_the_group() -> None:
    strong = [pair(A0, B0, 0.95)]
    assert guarded(strong + [pair(C0, A0, 0.89), pair(C0, B0, 0.89)]) == [(A0, B0, C0)]
    # the same lone record with one more partner outside the group stays out (and so does D5:
    # two lone records are never joined by a weak pair)
    assert guarded(strong + [pair(C0, A0, 0.89), pair(C0, D5, 0.885)]) == [(A0, B0)]
    # greedy takes both chains
    chained = strong + [pair(C0, A0, 0.89), pair(C0, D5, 0.885)]
    assert [g.members for g in solve_groups(chained, 2, "greedy")] == [(A0, B0, C0, D5)]


def test_guarded_weak_band_ends_at_threshold_plus_band() -> None:
    # two lone records: refused at 0.8999, joined at 0.9 (= 0.88 + 0.02, the first strong Dice)
    assert guarded([pair(A0, B0, 0.8999)]) == []
    assert guarded([pair(A0, B0, 0.9)]) == [(A0, B0)]
    # two groups of two joined by weak pairs only: refused; by a strong pair: merged
    groups = [pair(A0, B0, 1.0), pair(C0, D5, 1.0)]
    weak = [pair(A0, C0, 0.89), pair(B0, D5, 0.89), pair(A0, D5, 0.89), pair(B0, C0, 0.89)]
    assert guarded(groups + weak) == [(A0, B0), (C0, D5)]
    assert guarded(groups + [pair(A0, C0, 0.9)]) == [(A0, B0, C0, D5)]


def test_guarded_ties_go_to_the_smaller_key_and_a_lone_record_between_groups_stays_out() -> None:
    # (2, 3) and (2, 5) both want the group {A0, B0} at the same Dice: (2, 3) is visited first
    tie = [pair(A0, B0, 0.95), pair((2, 5), A0, 0.89), pair((2, 3), A0, 0.89)]
    assert guarded(tie) == [(A0, B0, (2, 3))]
    # a lone record matched into two groups (equal Dice) joins neither
    two = [
        pair(A0, B0, 0.95),
        pair((3, 1), (4, 1), 0.95),
        pair(C0, A0, 0.89),
        pair(C0, (3, 1), 0.89),
    ]
    assert guarded(two) == [(A0, B0), ((3, 1), (4, 1))]


def test_guarded_needs_the_match_threshold() -> None:
    with pytest.raises(ParameterError, match="guarded.*match threshold"):
        solve_groups([pair(A0, B0, 0.9)], 2, "guarded")


def test_threshold_boundary_pair_is_a_match_in_the_protocol() -> None:
    # two records with Dice exactly 0.8 (c = 4, x = 10) match at s_t = 0.8
    a = np.zeros((1, 120), np.uint8)
    b = np.zeros((1, 120), np.uint8)
    a[0, [0, 1, 2, 3, 70]] = 1
    b[0, [0, 1, 2, 3, 71]] = 1
    dig = np.array([[5]], np.uint64)
    tables = [
        EncodedRecords(("a",), pack_rows(a), 120, dig),
        EncodedRecords(("b",), pack_rows(b), 120, dig),
    ]
    run = run_any_in_process(tables, params(2, solver="greedy"))
    assert [(r.record_id, r.similarity, r.group_size, r.parties) for r in run.matches[0]] == [
        ("a", 0.8, 2, ("p0", "p1"))
    ]
    # guarded at P = 2 is greedy: the pair at exactly s_t (its weak band) is a group
    run = run_any_in_process(tables, params(2, solver="guarded"))
    assert run.stats.matched_pairs == 1 and [r.record_id for r in run.matches[1]] == ["b"]
    # at P = 3 the weak band applies: the pair joins two lone records, so no group
    c = np.zeros((1, 120), np.uint8)
    c[0, [90, 91, 92]] = 1
    tables.append(EncodedRecords(("c",), pack_rows(c), 120, dig))
    run = run_any_in_process(tables, params(3, solver="guarded", filter_bits=120))
    assert run.stats.matched_pairs == 1 and run.matches == [[], [], []]


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 3),
            st.integers(0, 3),
            st.integers(0, 3),
            st.sampled_from([0.8, 0.82, 0.85, 0.86, 0.9, 1.0]),
        ),
        max_size=25,
    ),
    st.sampled_from(SOLVERS),
    st.integers(2, 4),
    st.sampled_from([0.78, 0.8, 0.83, 0.84, 0.88]),  # weak bands end at 0.8, 0.82+, 0.85, 0.86, 0.9
    st.randoms(use_true_random=False),
)
@settings(max_examples=200, deadline=None)
def test_solver_equals_the_independent_oracle_and_ignores_input_order(
    raw: list[tuple[int, int, int, int, float]], solver: str, m: int, s_t: float, rnd: object
) -> None:
    seen, pairs = set(), []
    for a, ra, b, rb, d in raw:
        ends = frozenset([(a, ra), (b, rb)])
        if a != b and ends not in seen and d >= s_t:
            seen.add(ends)
            pairs.append((a, ra, b, rb, d))
    got = solve_groups(pairs, m, solver, s_t)
    shuffled = list(pairs)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert solve_groups(shuffled, m, solver, s_t) == got
    want = oracle_groups(pairs, m, solver, match_threshold=s_t)
    assert [(g.members, g.similarity) for g in got] == [(g.members, g.similarity) for g in want]
    for g in got:
        assert len(set(g.parties)) == len(g.parties) >= m


# --- parameters --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "words"),
    [
        (dict(min_parties=1), "min_parties"),
        (dict(min_parties=4), "min_parties"),
        (dict(target="some"), "target"),
        (dict(solver="hungarian"), "solver"),
    ],
)
def test_bad_target_parameters_are_named(kw: dict[str, object], words: str) -> None:
    with pytest.raises(ParameterError, match=words):
        params(3, **kw)


# --- protocol against the oracle ---------------------------------------------------------


def subset_tables(seed: int, p: int, entities: int, flip: float) -> list[EncodedRecords]:
    """Entities at random subsets of p parties, with bit noise, few blocks (many candidates)."""
    rng = np.random.default_rng(seed)
    bits = 60 * p
    base = (rng.random((entities, bits)) < 0.3).astype(np.uint8)
    block = rng.integers(1, 4, size=(entities, 2)).astype(np.uint64)
    out = []
    for j in range(p):
        at = np.flatnonzero(rng.random(entities) < 0.6)
        noise = (rng.random((at.size, bits)) < flip).astype(np.uint8)
        dig = block[at].copy()
        dig[rng.random(dig.shape) < 0.2] = 0  # missing blocking values: blocks not common to all
        out.append(
            EncodedRecords(
                tuple(f"p{j}e{e}" for e in at.tolist()), pack_rows(base[at] ^ noise), bits, dig
            )
        )
    return out


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(("seed", "p"), [(1, 2), (2, 3), (3, 4), (4, 5)])
def test_sm_zero_groups_equal_the_oracle(seed: int, p: int, solver: str) -> None:
    tables = subset_tables(seed, p, 40, 0.06)
    prm = params(p, solver=solver, match_threshold=0.75)
    run = run_any_in_process(tables, prm)
    pairs = oracle_pairs(tables, prm)
    assert len(run.matched_pairs) == len(pairs)
    want = oracle_groups(pairs, 2, solver, run.pseudonyms, 0.75, parties=p)
    got = {
        (
            tuple(
                sorted(
                    (q, r.record_id)
                    for q, rows in enumerate(run.matches)
                    for r in rows
                    if r.linkage_id == lid
                )
            ),
            sim,
        )
        for lid, sim in {(r.linkage_id, r.similarity) for rows in run.matches for r in rows}
    }
    expected = {
        (tuple((q, tables[q].record_ids[row]) for q, row in g.members), g.similarity) for g in want
    }
    assert got == expected
    assert len(expected) > 0


def test_segment_filter_only_removes_pairs() -> None:
    tables = subset_tables(7, 4, 40, 0.06)
    full = oracle_pairs(tables, params(4))
    run = run_any_in_process(tables, params(4, segment_threshold=0.7))
    keyed = {(a, tables[a].record_ids[ra], b, tables[b].record_ids[rb]) for a, ra, b, rb, _ in full}
    lookup = [
        dict(zip(ps.tolist(), t.record_ids, strict=True))
        for ps, t in zip(run.pseudonyms, tables, strict=True)
    ]
    mine = {(a, lookup[a][x], b, lookup[b][y]) for a, x, b, y, _ in run.matched_pairs}
    assert mine <= keyed
    assert run.stats.pairs_summed < run.stats.candidate_pairs


def test_any_oracle_imports_only_types_and_validation() -> None:
    from tests.unit.test_reference_independence import (
        ORACLE_MAY_IMPORT,
        ROOT,
        imported_modules,
        project_modules,
    )

    names = project_modules(imported_modules(ROOT / "party" / "protocol" / "oracle_any.py"))
    modules = {n for n in names if n.rsplit(".", 1)[0] not in ORACLE_MAY_IMPORT}
    assert modules <= ORACLE_MAY_IMPORT, sorted(modules - ORACLE_MAY_IMPORT)


@pytest.mark.parametrize("ascending", [False, True])  # True: rows in key order (mpc3's shares)
@pytest.mark.parametrize("cap", [None, 1, 2, 3, 5])
def test_pair_candidates_follow_the_sub_blocking_rule_of_the_set_oracle(
    cap: int | None, ascending: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two-party blocks are sub-blocked like sets: the set oracle with P = 2 gives the same pairs,
    ordered by keys (with keys ascending in row order, by one sort of packed rows)."""
    import party.protocol.pairwise as pairwise
    from party.protocol.oracle import oracle_candidates
    from party.protocol.pairwise import pair_candidates
    from party.protocol.segments import new_pseudonyms

    seen: list[bool] = []
    original = pairwise._ascending

    def spy(k: np.ndarray) -> bool:
        seen.append(original(k))
        return seen[-1]

    monkeypatch.setattr(pairwise, "_ascending", spy)
    tables = subset_tables(11, 3, 60, 0.05)
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        ta, tb = tables[a], tables[b]
        keys = [new_pseudonyms(len(ta.record_ids)), new_pseudonyms(len(tb.record_ids))]
        if ascending:
            keys = [np.sort(k) for k in keys]
        got = pair_candidates(ta.block_digests, tb.block_digests, keys[0], keys[1], cap)
        assert seen[-1] == ascending
        two = params(2, filter_bits=ta.filter_bits, max_block_size=cap, target="all")
        want, _ = oracle_candidates([ta, tb], two, keys)
        assert {tuple(r) for r in got.tolist()} == {tuple(r) for r in want.tolist()}
        assert len(got) == len({tuple(r) for r in got.tolist()}) > 0
        ordered = [(int(keys[0][x]), int(keys[1][y])) for x, y in got.tolist()]
        assert ordered == sorted(ordered)


def test_the_wire_knows_the_same_solvers_and_default() -> None:
    from proto import linkage

    assert linkage.TARGET_SOLVERS == SOLVERS
    assert SOLVERS[0] == DEFAULT_SOLVER == "guarded"
