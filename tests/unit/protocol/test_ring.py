"""Secure summation: uniform views, fresh masks, mod-2^64 edge cases and ring-order errors."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from party.encoding.records import EncodedRecords
from party.protocol.engine import PartyEngine
from party.protocol.errors import RingError, StateError, SummationError
from party.protocol.params import ProtocolParameters
from party.protocol.ring import RingMessage, add_mod64, sub_mod64
from tests.unit.protocol.helpers import engines_after_compare, linked_tables

# chi-square critical value for 15 degrees of freedom at p = 1e-6 is about 53.4: a uniform source
# fails this check about once in a million runs, a biased one (e.g. missing masks) every time.
CHI2_15_P1E6 = 53.4


def params3(s_t: float = 0.5, parties: int = 3) -> ProtocolParameters:
    return ProtocolParameters(
        tuple(f"p{i}" for i in range(parties)), 30 * parties, s_t, 0.0, target="all"
    )


def chi2_16(values: np.ndarray) -> float:
    counts = np.bincount(values.astype(np.int64), minlength=16)
    expected = values.size / 16
    return float(((counts - expected) ** 2 / expected).sum())


def nibble_stats(v: np.ndarray) -> tuple[float, float]:
    high = (v >> np.uint64(60)).astype(np.int64)
    low = (v & np.uint64(15)).astype(np.int64)
    return chi2_16(high), chi2_16(low)


@pytest.mark.parametrize("fill", [0.0, 0.5, 1.0])
def test_non_initiator_views_are_uniform_whatever_the_inputs(fill: float) -> None:
    # fill 0.0: every c_i and x_i is 0; fill 1.0: every one is maximal. The views must not differ.
    rng = np.random.default_rng(11)
    p = 3
    tables = linked_tables(rng, p, 16, 30 * p, shared=16, flip=0.0, fill=fill, blocks=1)
    engines = engines_after_compare(tables, params3())
    msg = engines[0].ring_start()
    assert len(msg) == 16**3  # 4096 sets, all seen by party 1
    views = [msg]
    views.append(engines[1].ring_step(msg))
    for view in views:
        for arr in (view.c_masked, view.x_masked):
            hi, lo = nibble_stats(arr)
            assert hi < CHI2_15_P1E6 and lo < CHI2_15_P1E6, (hi, lo)
            # and no value leaks through unmasked (all-zero inputs would show up as repeats)
            assert np.unique(arr).size == arr.size


def test_chi_square_check_detects_unmasked_values() -> None:
    # the statistic used above is not vacuous: raw sums or a weak mask fail it
    raw = np.full(4096, 45, dtype=np.uint64)
    assert max(nibble_stats(raw)) > CHI2_15_P1E6
    weak = np.random.default_rng(0).integers(0, 2**32, size=4096, dtype=np.uint64)
    assert max(nibble_stats(weak)) > CHI2_15_P1E6


def test_masks_are_fresh_and_never_repeat() -> None:
    rng = np.random.default_rng(12)
    tables = linked_tables(rng, 3, 10, 90, shared=10, flip=0.0, blocks=1)
    masks: list[np.ndarray] = []
    for _ in range(3):  # three runs on identical inputs
        engines = engines_after_compare(tables, params3())
        init = engines[0]
        assert init._survivors is not None
        surv_c = np.concatenate(list(init._survivors.chunks(10**6)))[:, 3]  # (pseudonyms, c)
        msg = init.ring_start()
        masks.append(sub_mod64(msg.c_masked, surv_c))
        x0 = init._x[init._shared_rows[np.searchsorted(init._pseudonyms, msg.candidates[:, 0])]]
        masks.append(sub_mod64(msg.x_masked, x0.astype(np.uint64)))
        with pytest.raises(StateError, match="masks are used once"):
            init.ring_start()
    allm = np.concatenate(masks)
    assert allm.size == 6 * 1000
    assert np.unique(allm).size == allm.size


def test_wraparound_masks_give_exact_sums() -> None:
    # masks at the top of Z_2^64 force every addition to wrap; results must still equal the
    # run with small masks
    rng = np.random.default_rng(13)
    tables = linked_tables(rng, 3, 6, 90, shared=4, flip=0.02, blocks=1)

    class Source:
        """os.urandom for pseudonyms, then an edge-case pattern for the masks."""

        def __init__(self, pattern: bytes) -> None:
            self.pattern = pattern
            self.edge = False

        def __call__(self, n: int) -> bytes:
            if not self.edge:
                return os.urandom(n)
            return (self.pattern * n)[:n]

    results = []
    for pattern in (b"\xff", b"\xff" * 7 + b"\xfe", b"\x00", b"\x01" + bytes(7)):
        source = Source(pattern)
        engines = engines_after_compare(tables, params3(0.0), random_bytes=source)
        source.edge = True
        msg = engines[0].ring_start()
        for e in engines[1:]:
            msg = e.ring_step(msg)
        cls = engines[0].ring_finish(msg)
        cand_ids = [
            tuple(
                int(engines[j]._shared_rows[np.searchsorted(engines[j]._pseudonyms, row[j])])
                for j in range(3)
            )
            for row in cls.candidates
        ]
        results.append(sorted(zip(cand_ids, cls.similarities.tolist(), strict=True)))
    assert all(r == results[0] for r in results)
    assert add_mod64(np.array([2**64 - 1], dtype=np.uint64), np.array([2], dtype=np.uint64))[0] == 1


def ring_to_end(engines: list[PartyEngine]) -> RingMessage:
    msg = engines[0].ring_start()
    for e in engines[1:]:
        msg = e.ring_step(msg)
    return msg


def test_wrong_party_order_is_rejected() -> None:
    rng = np.random.default_rng(14)
    engines = engines_after_compare(linked_tables(rng, 3, 5, 90, shared=3), params3())
    msg = engines[0].ring_start()
    with pytest.raises(RingError, match="wrong party order"):
        engines[2].ring_step(msg)  # party 1 was skipped
    with pytest.raises(StateError):
        engines[0].ring_step(msg)


def test_missing_party_is_rejected_by_the_initiator() -> None:
    rng = np.random.default_rng(15)
    engines = engines_after_compare(linked_tables(rng, 4, 5, 120, shared=3), params3(parties=4))
    msg = engines[0].ring_start()
    msg = engines[1].ring_step(msg)
    msg = engines[2].ring_step(msg)
    with pytest.raises(RingError, match="missing party"):
        engines[0].ring_finish(msg)  # party 3 never added its values


def test_mismatched_candidate_lists_are_rejected() -> None:
    rng = np.random.default_rng(16)
    engines = engines_after_compare(linked_tables(rng, 3, 5, 90, shared=3), params3())
    msg = engines[0].ring_start()
    # unsorted list
    rev = dataclasses.replace(
        msg,
        candidates=msg.candidates[::-1].copy(),
        c_masked=msg.c_masked[::-1].copy(),
        x_masked=msg.x_masked[::-1].copy(),
    )
    with pytest.raises(RingError, match="not sorted"):
        engines[1].ring_step(rev)
    # a pseudonym that party 1 never saw
    bad = msg.candidates.copy()
    bad[-1, 2] = np.uint64(12345)
    order = np.lexsort(bad.T[::-1])
    forged = RingMessage(0, bad[order], msg.c_masked[order], msg.x_masked[order])
    with pytest.raises(RingError, match="unknown pseudonym of party 2"):
        engines[1].ring_step(forged)
    # wrong shapes
    with pytest.raises(RingError, match="c_masked"):
        engines[1].ring_step(RingMessage(0, msg.candidates, msg.c_masked[:-1], msg.x_masked))
    with pytest.raises(RingError, match="candidates"):
        engines[1].ring_step(
            RingMessage(0, msg.candidates[:, :2].copy(), msg.c_masked, msg.x_masked)
        )
    # the initiator gets back a set it never sent (party 2 inserts a duplicate-free extra row)
    out = engines[2].ring_step(engines[1].ring_step(msg))
    sent = engines[0]._sent
    assert sent is not None and len(out) >= 1
    extra = out.candidates[0].copy()
    extra[0] = np.uint64(2**64 - 1)  # larger than any real pseudonym of party 0 here? make sure
    rows = np.vstack([out.candidates, extra[None, :]])
    order = np.lexsort(rows.T[::-1])
    tampered = RingMessage(
        2,
        rows[order],
        np.append(out.c_masked, np.uint64(0))[order],
        np.append(out.x_masked, np.uint64(0))[order],
    )
    with pytest.raises(RingError, match="never sent"):
        engines[0].ring_finish(tampered)


@pytest.mark.parametrize("field", ["c_masked", "x_masked"])
def test_out_of_range_sums_are_detected(field: str) -> None:
    rng = np.random.default_rng(17)
    engines = engines_after_compare(linked_tables(rng, 3, 5, 90, shared=3), params3())
    msg = ring_to_end(engines)
    shifted = add_mod64(getattr(msg, field), np.full(len(msg), 2**63, dtype=np.uint64))
    with pytest.raises(SummationError):
        if field == "c_masked":
            engines[0].ring_finish(dataclasses.replace(msg, c_masked=shifted))
        else:
            engines[0].ring_finish(dataclasses.replace(msg, x_masked=shifted))


def true_sums(
    engines: list[PartyEngine], tables: list[EncodedRecords], msg: RingMessage
) -> tuple[np.ndarray, np.ndarray]:
    """(sum c, sum x) of every set of ``msg`` from the full filters (computed here, not by the engine)."""
    rows = []
    for j, e in enumerate(engines):
        pseud = e.record_pseudonyms
        row_of = {int(v): r for r, v in enumerate(pseud.tolist()) if v}
        rows.append([row_of[int(v)] for v in msg.candidates[:, j].tolist()])
    acc = tables[0].filters[rows[0]]
    x = np.bitwise_count(tables[0].filters[rows[0]]).sum(axis=1)
    for j in range(1, len(engines)):
        acc = acc & tables[j].filters[rows[j]]
        x = x + np.bitwise_count(tables[j].filters[rows[j]]).sum(axis=1)
    return np.bitwise_count(acc).sum(axis=1).astype(np.uint64), x.astype(np.uint64)


def with_sums(
    engines: list[PartyEngine],
    tables: list[EncodedRecords],
    msg: RingMessage,
    c: int | np.ndarray,
    x: int | np.ndarray,
) -> RingMessage:
    """``msg`` altered (as a dishonest party could) so that the initiator unmasks sums c and x."""
    true_c, true_x = true_sums(engines, tables, msg)
    m = len(msg)
    want_c = np.broadcast_to(np.asarray(c, dtype=np.uint64), (m,))
    want_x = np.broadcast_to(np.asarray(x, dtype=np.uint64), (m,))
    return dataclasses.replace(
        msg,
        c_masked=add_mod64(msg.c_masked, sub_mod64(want_c, true_c)),
        x_masked=add_mod64(msg.x_masked, sub_mod64(want_x, true_x)),
    )


def ring_case(seed: int) -> tuple[list[PartyEngine], list[EncodedRecords], RingMessage]:
    rng = np.random.default_rng(seed)
    tables = linked_tables(rng, 3, 5, 90, shared=3, fill=0.5, blocks=1)
    engines = engines_after_compare(tables, params3())
    msg = ring_to_end(engines)
    assert len(msg) > 0
    return engines, tables, msg


def test_honest_sums_unmask_to_the_full_filter_counts() -> None:
    # the helper's premise: an unaltered message unmasks to the true sums (Dice from them)
    engines, tables, msg = ring_case(18)
    true_c, true_x = true_sums(engines, tables, msg)
    same = with_sums(engines, tables, msg, true_c, true_x)
    assert np.array_equal(same.c_masked, msg.c_masked)
    result = engines[0].ring_finish(msg)
    assert result.sets_summed == len(msg)
    expected = 3 * true_c.astype(np.float64) / true_x.astype(np.float64)
    assert sorted(result.similarities.tolist()) == sorted(expected[expected >= 0.5].tolist())


def test_sums_at_the_range_bounds_are_accepted() -> None:
    # Known answer at the bounds: c = l and x = P * l (every bit set everywhere) -> Dice exactly 1.
    engines, tables, msg = ring_case(21)
    result = engines[0].ring_finish(with_sums(engines, tables, msg, 90, 3 * 90))
    assert result.sets_summed == len(msg) and result.matches == len(msg)
    assert result.similarities.tolist() == [1.0] * len(msg)


def test_zero_sums_are_accepted_with_dice_zero() -> None:
    engines, tables, msg = ring_case(22)
    result = engines[0].ring_finish(with_sums(engines, tables, msg, 0, 0))
    assert result.sets_summed == len(msg) and result.matches == 0


@pytest.mark.parametrize(
    ("c", "x"),
    [
        (91, 3 * 90),  # c one above l (also P * c > x, but the range check must name it)
        (0, 3 * 90 + 1),  # x one above P * l, consistent otherwise
        (2**63, 3 * 90),  # a wrapped negative c
    ],
)
def test_sums_just_out_of_range_are_detected(c: int, x: int) -> None:
    engines, tables, msg = ring_case(23)
    with pytest.raises(SummationError, match="out of range"):
        engines[0].ring_finish(with_sums(engines, tables, msg, c, x))


def test_wrong_added_value_within_range_is_detected_when_inconsistent() -> None:
    # x lowered to P * c - 1 for one set: every sum is within [0, l] and [0, P * l], so only the
    # consistency check (P * c <= x for honest inputs) can see it.
    engines, tables, msg = ring_case(24)
    true_c, true_x = true_sums(engines, tables, msg)
    k = int(np.argmax(true_c))
    assert true_c[k] > 0
    x = true_x.copy()
    x[k] = np.uint64(3 * int(true_c[k]) - 1)
    assert int(x[k]) <= 3 * 90 and int(true_c[k]) <= 90
    with pytest.raises(SummationError, match="inconsistent"):
        engines[0].ring_finish(with_sums(engines, tables, msg, true_c, x))


def test_ring_steps_drop_sets_pruned_elsewhere() -> None:
    rng = np.random.default_rng(19)
    tables = linked_tables(rng, 3, 12, 90, shared=6, flip=0.05, blocks=1)
    params = ProtocolParameters(("a", "b", "c"), 90, 0.6, 0.5, target="all")
    engines = engines_after_compare(tables, params)
    from party.protocol.ring import row_keys

    # survivors are stored as (pseudonyms..., c) rows; read them before the ring consumes them
    survivors = [np.concatenate(list(e._survivors.chunks(10**6)))[:, :3] for e in engines]  # type: ignore[union-attr]
    kept_by = [set(row_keys(rows).tolist()) for rows in survivors]
    msg = engines[0].ring_start()
    assert len(msg) == engines[0].comparison_stats.survivors  # type: ignore[union-attr]
    msg1 = engines[1].ring_step(msg)
    assert set(row_keys(msg1.candidates).tolist()) == kept_by[0] & kept_by[1]
    final = engines[2].ring_step(msg1)
    assert set(row_keys(final.candidates).tolist()) == kept_by[0] & kept_by[1] & kept_by[2]


def test_row_set_helpers_match_python_sets() -> None:
    from party.protocol.ring import intersect_sorted_rows, sort_rows, unique_sorted_rows

    rng = np.random.default_rng(20)
    for _ in range(50):
        p = int(rng.integers(1, 5))
        a = rng.integers(0, 4, size=(int(rng.integers(0, 40)), p)).astype(np.uint64)
        high = np.asarray(rng.random(a.shape[0]) < 0.3, dtype=np.uint64)
        a[:, 0] |= np.uint64(2**63) * high
        b = rng.integers(0, 4, size=(int(rng.integers(0, 40)), p)).astype(np.uint64)
        ua = a[unique_sorted_rows(a)]
        ub = b[unique_sorted_rows(b)]
        assert [tuple(r) for r in ua.tolist()] == sorted({tuple(r) for r in a.tolist()})
        ia, ib = intersect_sorted_rows(ua, ub)
        assert np.array_equal(ua[ia], ub[ib])
        assert {tuple(r) for r in ua[ia].tolist()} == {tuple(r) for r in ua.tolist()} & {
            tuple(r) for r in ub.tolist()
        }
        assert np.array_equal(sort_rows(ua), np.arange(ua.shape[0]))
