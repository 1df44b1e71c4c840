"""The compiled pair kernel (target any) against a plain oracle: every kept pair once, any threads."""

from __future__ import annotations

import numpy as np
import pytest

from party.encoding.bits import pack_rows
from party.protocol import kernel as kernel_module
from party.protocol import pairwise as pairwise_module
from party.protocol import threads as threads_module
from party.protocol._numba_pairs import bucket_rows
from party.protocol.blocks import (
    DigestLookup,
    block_counts,
    block_index_at,
    common_blocks,
    distinct_digests,
)
from party.protocol.kernel import threshold_table
from party.protocol.pairwise import (
    IndexedSide,
    PairPlan,
    bucket_keys,
    kept_rows_of_keys,
    pair_side,
    segment_pair_counts,
)


@pytest.fixture
def threads_always(monkeypatch):  # type: ignore[no-untyped-def]
    """Hand even the smallest piece to several threads."""
    monkeypatch.setattr(pairwise_module, "PARALLEL_MIN_PAIRS", 1)
    monkeypatch.setattr(kernel_module, "PARALLEL_MIN_PAIRS", 1)
    monkeypatch.setattr(threads_module, "PARALLEL_MIN_WORDS", 1)


def _party(rng: np.random.Generator, n: int, bits: int, passes: int, values: int):  # type: ignore[no-untyped-def]
    """Random 0/1 segments (some empty, some full) and digests with zeros and a digest repeated
    in two columns of a row."""
    fill = rng.choice([0.0, 0.2, 0.5, 1.0], size=(n, 1), p=[0.05, 0.45, 0.45, 0.05])
    bits01 = (rng.random((n, bits)) < fill).astype(np.uint8)
    dig = rng.integers(1, values + 1, size=(n, passes)).astype(np.uint64)
    dig[rng.random(dig.shape) < 0.25] = 0
    dig[::7, 1] = dig[::7, 0]
    return bits01, dig


def _oracle(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, threshold):  # type: ignore[no-untyped-def]
    """{(key_a, key_b): c} of the pairs sharing a non-zero digest and passing 2c >= s_m * s, and
    the kept pairs counted once per shared digest; plain Python."""
    kept: dict[tuple[int, int], int] = {}
    with_duplicates = 0
    for i in range(bits_a.shape[0]):
        da = {int(x) for x in dig_a[i] if x}
        for j in range(bits_b.shape[0]):
            shared = da & {int(x) for x in dig_b[j] if x}
            if not shared:
                continue
            c = int(np.sum(bits_a[i] & bits_b[j]))
            s = int(bits_a[i].sum()) + int(bits_b[j].sum())
            if float(2 * c) >= threshold * float(s):
                kept[(int(keys_a[i]), int(keys_b[j]))] = c
                with_duplicates += len(shared)
    return kept, with_duplicates


def _plan_and_sides(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, cap, workers, plan_workers=1):  # type: ignore[no-untyped-def]
    common = common_blocks([distinct_digests(dig_a), distinct_digests(dig_b)])
    look = DigestLookup(common)
    pos_a, pos_b = look.positions(dig_a), look.positions(dig_b)
    plan = PairPlan.from_indexes(
        block_index_at(pos_a, common.size, keys_a),
        block_index_at(pos_b, common.size, keys_b),
        cap,
        plan_workers,
    )
    seg_a, seg_b = pack_rows(bits_a), pack_rows(bits_b)
    sides = (
        pair_side(0, keys_a, seg_a, pos_a, workers),
        pair_side(2, keys_b, seg_b, pos_b, workers),
    )
    return plan, sides, (seg_a, seg_b)


def _joined(pieces):  # type: ignore[no-untyped-def]
    """(kept rows, pairs, with duplicates) of ``kept_pairs``-style pieces, joined."""
    rows, pairs, with_duplicates = [], 0, 0
    for found, n, kept in pieces:
        rows.extend(found)
        pairs += n
        with_duplicates += kept
    out = np.concatenate(rows) if rows else np.zeros((0, 4), np.uint64)
    return out, pairs, with_duplicates


def _kept(plan, sides, threshold, bits, max_pairs, workers):  # type: ignore[no-untyped-def]
    table = threshold_table(2, float(threshold), 2 * bits)
    return _joined(plan.kept_pairs(*sides, 3, table, max_pairs, workers))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("threshold", [0.0, 0.5, 0.7, 1.0])
def test_kept_pairs_equal_the_oracle_each_once(seed: int, threshold: float, threads_always) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    bits = [64, 96, 128][seed % 3]
    na, nb = int(rng.integers(1, 60)), int(rng.integers(1, 60))
    bits_a, dig_a = _party(rng, na, bits, 4, 6)
    bits_b, dig_b = _party(rng, nb, bits, 4, 6)
    keys_a = rng.permutation(np.arange(1, na + 1, dtype=np.uint64) * 3)
    keys_b = rng.permutation(np.arange(1, nb + 1, dtype=np.uint64) * 5)
    want, want_dup = _oracle(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, threshold)
    outputs = []
    # the plan on one thread (the kernel's block ranges cut by block_cuts) or on as many as the
    # kernel (cut at the plan's ranges)
    for workers, plan_workers in ((1, 1), (2, 1), (2, 2), (3, 1), (3, 3)):
        for max_pairs in (1, 5, 10**6):  # 1 and 5: blocks sliced by a's rows
            plan, sides, _ = _plan_and_sides(
                bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, None, workers, plan_workers
            )
            rows, pairs, dup = _kept(plan, sides, threshold, bits, max_pairs, workers)
            assert pairs == plan.total
            assert np.all(rows[:, 1] == 0) and np.all(rows[:, 0] != 0) and np.all(rows[:, 2] != 0)
            got = [(int(r[0]), int(r[2]), int(r[3])) for r in rows]
            assert len(got) == len(want), "each kept pair exactly once"
            row_of_a = {int(k): i for i, k in enumerate(keys_a)}
            row_of_b = {int(k): i for i, k in enumerate(keys_b)}
            order = [(row_of_a[a], row_of_b[b]) for a, b, _ in got]
            assert order == sorted(order), "by a's row, then b's row"
            assert {(a, b): c for a, b, c in got} == want
            assert dup == want_dup
            outputs.append((max_pairs, rows.tobytes()))
    for max_pairs in (1, 5, 10**6):  # the same rows in the same order for any number of threads
        assert len({b for m, b in outputs if m == max_pairs}) == 1


def test_boundary_pair_is_kept_and_one_bit_less_is_not() -> None:
    """2c == s_m * s exactly is kept (c = 4, s = 10, s_m = 0.8); c = 3 against s = 8 is not."""
    a = np.zeros((2, 64), np.uint8)
    b = np.zeros((2, 64), np.uint8)
    a[0, [0, 1, 2, 3, 40]] = 1
    b[0, [0, 1, 2, 3, 41]] = 1
    a[1, [0, 1, 2, 50]] = 1
    b[1, [0, 1, 2, 51]] = 1  # 2 * 3 = 6 < 0.8 * 8 = 6.4
    dig = np.array([[7, 9], [7, 0]], np.uint64)
    keys = np.array([1, 2], np.uint64)
    want, dup = _oracle(a, b, dig, dig, keys, keys, 0.8)
    assert want == {(1, 1): 4} and dup == 2
    plan, sides, _ = _plan_and_sides(a, b, dig, dig, keys, keys, None, 1)
    rows, _, got_dup = _kept(plan, sides, 0.8, 64, 100, 1)
    assert rows.tolist() == [[1, 0, 1, 4]] and got_dup == 2


@pytest.mark.parametrize("seed", range(4))
def test_with_a_cap_whole_blocks_and_sub_blocks_give_the_enumerated_pairs(
    seed: int, threads_always
) -> None:  # type: ignore[no-untyped-def]
    """Cap 3: the kept pairs of the whole blocks plus the filtered sub-block pairs are the pairs
    of every block's enumeration (``pieces``) that pass the filter, and no pair of a whole block
    repeats."""
    rng = np.random.default_rng(100 + seed)
    bits_a, dig_a = _party(rng, 50, 64, 3, 4)
    bits_b, dig_b = _party(rng, 40, 64, 3, 4)
    for dig in (dig_a, dig_b):  # passes 2 and 3: small blocks beside pass 1's large ones
        dig[:, 1:] = rng.integers(10, 60, dig[:, 1:].shape) * (dig[:, 1:] != 0)
    keys_a = np.arange(1, 51, dtype=np.uint64)
    keys_b = np.arange(1, 41, dtype=np.uint64)
    plan, sides, (seg_a, seg_b) = _plan_and_sides(
        bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, 3, 2
    )
    assert not plan.whole.all() and plan.whole.any()
    rows, _, _ = _kept(plan, sides, 0.6, 64, 7, 2)
    whole = [(int(r[0]), int(r[2])) for r in rows]
    assert len(whole) == len(set(whole))
    got = {(int(r[0]), int(r[2]), int(r[3])) for r in rows}
    for pairs in plan.sub_block_pairs():
        c, keep = segment_pair_counts(seg_a, seg_b, pairs, 0.6)
        got |= {
            (int(keys_a[x]), int(keys_b[y]), int(v))
            for (x, y), v in zip(pairs[keep].tolist(), c[keep].tolist(), strict=True)
        }
    want = set()
    for pairs in plan.pieces(10**6):
        c, keep = segment_pair_counts(seg_a, seg_b, pairs, 0.6)
        want |= {
            (int(keys_a[x]), int(keys_b[y]), int(v))
            for (x, y), v in zip(pairs[keep].tolist(), c[keep].tolist(), strict=True)
        }
    assert got == want and want


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_index_of_sorted_rows_equals_the_unsorted_index(workers: int, threads_always) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(5)
    pos = rng.integers(-1, 30, size=(200, 6)).astype(np.int32)
    pos[::5, 2] = pos[::5, 4]  # a block named twice in a row
    keys = rng.permutation(200).astype(np.uint64)
    want = block_index_at(pos, 30, keys)
    side = pair_side(0, keys, np.zeros((200, 1), np.uint64), pos.copy(), workers)
    assert np.all(np.diff(side.positions, axis=1) >= 0)
    counts = block_counts(side.positions, 30, workers, rows_sorted=True)
    assert counts.tolist() == np.diff(want.starts).tolist()
    for given in (None, counts):
        got = block_index_at(side.positions, 30, keys, workers, rows_sorted=True, counts=given)
        assert np.array_equal(got.starts, want.starts) and np.array_equal(got.rows, want.rows)


@pytest.mark.parametrize("parties", [2, 3, 5])
def test_shared_blocks_are_the_digests_of_two_or_more_parties(parties: int) -> None:
    """Against a plain count, with zeros, repeats, unsorted and already sorted inputs."""
    from party.protocol.blocks import shared_blocks

    rng = np.random.default_rng(parties)
    sets = [
        rng.integers(0, 60, size=int(rng.integers(0, 50))).astype(np.uint64) for _ in range(parties)
    ]
    sets[0] = np.unique(sets[0])  # sorted and distinct, as parties send them (with a 0 maybe)
    sets[1] = np.append(sets[1], np.uint64(2**64 - 1)) if parties > 2 else sets[1]
    count: dict[int, int] = {}
    for s in sets:
        for v in {int(x) for x in s.tolist() if x}:
            count[v] = count.get(v, 0) + 1
    want = sorted(v for v, k in count.items() if k >= 2)
    got = shared_blocks(sets)
    assert got.dtype == np.uint64 and got.tolist() == want


def _plain_shared(row_a, row_b, whole) -> list[int]:  # type: ignore[no-untyped-def]
    """The distinct whole blocks two position rows both name, increasing; plain Python."""
    return sorted(
        {int(x) for x in row_a if x >= 0} & {int(x) for x in row_b if x >= 0 and whole[x]}
    )


@pytest.mark.parametrize("check", [False, True])
def test_row_visits_equal_a_plain_count(check: bool) -> None:
    """Each row's candidate pairs counted once per whole block: -1s, a block named twice in a
    row, empty rows, blocks without b's rows, non-whole blocks when checked."""
    from party.protocol._numba_pairs import row_visits

    rng = np.random.default_rng(11 + check)
    width, blocks = 6, 12
    pos = rng.integers(-1, blocks, size=(300, width)).astype(np.int32)
    pos[::9] = -1  # empty rows
    pos[1::9] = rng.integers(0, 3, size=(pos[1::9].shape[0], width))  # repeats within a row
    pos[2::9, 3] = pos[2::9, 1]  # a repeat not next to the first (rows in any order)
    if check:
        pos.sort(axis=1)
    sizes_b = rng.integers(0, 4, size=blocks)
    starts_b = np.concatenate([[0], np.cumsum(sizes_b)]).astype(np.int64)
    whole = rng.random(blocks) < (0.7 if check else 2.0)
    out = np.full(pos.shape[0], -7, dtype=np.int64)
    row_visits(pos, starts_b, whole, check, 5, 290, out)
    want = [
        sum(int(sizes_b[x]) for x in {int(v) for v in row if v >= 0} if whole[x]) for row in pos
    ]
    assert out[5:290].tolist() == want[5:290] and set(out[:5].tolist() + out[290:].tolist()) == {-7}


@pytest.mark.parametrize("seed", range(6))
def test_emit_keys_equal_a_plain_walk_of_the_blocks(seed: int) -> None:
    """The keys of every whole block of a range of blocks, a's rows in [lo, hi), block by block:
    blocks of one row each (most), empty for a, b or both (also the last blocks, past the rows),
    several rows, non-whole blocks when checked; ``out`` exactly as long as the keys, a slot past
    it untouched; ``count_keys`` counts them."""
    from party.protocol._numba_pairs import count_keys, emit_keys

    rng = np.random.default_rng(40 + seed)
    blocks = int(rng.integers(1, 60))
    sizes_a = rng.choice([0, 1, 1, 1, 2, 3], size=blocks)
    sizes_b = rng.choice([0, 1, 1, 1, 2, 4], size=blocks)
    sizes_a[-1], sizes_b[-2 if blocks > 1 else -1] = 0, 0  # the last blocks past the rows
    starts_a = np.concatenate([[0], np.cumsum(sizes_a)]).astype(np.int64)
    starts_b = np.concatenate([[0], np.cumsum(sizes_b)]).astype(np.int64)
    rows_a = rng.integers(0, 20, size=int(starts_a[-1])).astype(np.int64)
    rows_b = rng.integers(0, 20, size=int(starts_b[-1])).astype(np.int64)
    whole = rng.random(blocks) < 0.7
    for check in (False, True):
        for x0, x1, lo, hi in ((0, blocks, 0, 20), (blocks // 3, blocks, 4, 15), (0, 0, 0, 20)):
            want = [
                int(rows_a[y]) << 32 | int(rows_b[z])
                for x in range(x0, x1)
                if not check or whole[x]
                for y in range(starts_a[x], starts_a[x + 1])
                if lo <= rows_a[y] < hi
                for z in range(starts_b[x], starts_b[x + 1])
            ]
            args = (starts_a, rows_a, starts_b, rows_b, whole, check)
            assert count_keys(x0, x1, lo, hi, starts_a, rows_a, starts_b, whole, check) == len(want)
            buf = np.full(len(want) + 1, 7, dtype=np.uint64)
            assert emit_keys(x0, x1, lo, hi, *args, buf[: len(want)]) == len(want)
            assert buf[: len(want)].tolist() == want and buf[-1] == 7


def test_with_a_cap_kept_with_duplicates_counts_whole_blocks_only(threads_always) -> None:  # type: ignore[no-untyped-def]
    """Kept pairs counted once per whole block they share (non-whole blocks not counted)."""
    rng = np.random.default_rng(7)
    bits_a, dig_a = _party(rng, 50, 64, 3, 4)
    bits_b, dig_b = _party(rng, 40, 64, 3, 4)
    for dig in (dig_a, dig_b):  # pass 3 repeats pass 2's small blocks: pairs share several
        dig[:, 1] = rng.integers(10, 30, dig.shape[0]) * (dig[:, 1] != 0)
        dig[:, 2] = np.where(dig[:, 1] != 0, dig[:, 1] + 1000, 0)
    keys_a = np.arange(1, 51, dtype=np.uint64)
    keys_b = np.arange(1, 41, dtype=np.uint64)
    for workers in (1, 2):
        plan, sides, _ = _plan_and_sides(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, 3, workers)
        assert not plan.whole.all() and plan.whole.any()
        rows, _, dup = _kept(plan, sides, 0.3, 64, 7, workers)
        pos_a, pos_b = sides[0].positions, sides[1].positions
        row_of_a = {int(k): i for i, k in enumerate(sides[0].keys)}
        row_of_b = {int(k): i for i, k in enumerate(sides[1].keys)}
        want = sum(
            len(_plain_shared(pos_a[row_of_a[int(r[0])]], pos_b[row_of_b[int(r[2])]], plan.whole))
            for r in rows
        )
        assert dup == want and want > rows.shape[0]


def _hundreds_of_partners(seed: int):  # type: ignore[no-untyped-def]
    """4 rows of a, 400 of b: every row of a in three blocks of a few hundred b rows each (many
    pairs in two of them): (bits_a, bits_b, dig_a, dig_b, keys_a, keys_b)."""
    rng = np.random.default_rng(seed)
    bits_a, dig_a = _party(rng, 4, 64, 3, 1)
    bits_b, dig_b = _party(rng, 400, 64, 3, 1)
    dig_a[:] = [1, 2, 3]
    dig_b[:, 0] = 1
    dig_b[:, 1] = np.where(rng.random(400) < 0.6, 2, 9)
    dig_b[:, 2] = np.where(rng.random(400) < 0.3, 3, 0)
    keys_a = np.arange(1, 5, dtype=np.uint64)
    keys_b = np.arange(1, 401, dtype=np.uint64)
    return bits_a, bits_b, dig_a, dig_b, keys_a, keys_b


@pytest.mark.parametrize("workers", [1, 2])
def test_a_row_with_hundreds_of_partners_equals_the_oracle(workers: int, threads_always) -> None:  # type: ignore[no-untyped-def]
    """A row of a meeting more rows of b than the kernel's first buffer holds (several blocks of
    a few hundred b rows each, many pairs in two of them): each kept pair once, duplicates right."""
    bits_a, bits_b, dig_a, dig_b, keys_a, keys_b = _hundreds_of_partners(21)
    want, want_dup = _oracle(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, 0.3)
    plan, sides, _ = _plan_and_sides(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, None, workers)
    rows, pairs, dup = _kept(plan, sides, 0.3, 64, 10**6, workers)
    got = [(int(r[0]), int(r[2]), int(r[3])) for r in rows]
    assert len(got) == len(want) and {(a, b): c for a, b, c in got} == want
    assert dup == want_dup and want_dup > len(want) > 256


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
def test_block_cuts_cover_the_blocks_with_their_pairs(parts: int) -> None:
    """Ranges of blocks cover every block in order (some empty: one block holds most pairs); the
    offsets are the running pairs of the whole blocks before each cut; about equal shares."""
    from party.protocol._numba_pairs import block_cuts

    rng = np.random.default_rng(parts)
    sizes_a, sizes_b = rng.integers(0, 4, 40), rng.integers(0, 4, 40)
    sizes_a[17], sizes_b[17] = 30, 30  # one block of 900 pairs
    whole = rng.random(40) < 0.8
    starts_a = np.concatenate([[0], np.cumsum(sizes_a)]).astype(np.int64)
    starts_b = np.concatenate([[0], np.cumsum(sizes_b)]).astype(np.int64)
    for check in (False, True):
        pairs = sizes_a * sizes_b * (whole if check else 1)
        cuts, offsets = block_cuts(starts_a, starts_b, whole, check, int(pairs.sum()), parts)
        assert cuts[0] == 0 and cuts[-1] == 40 and np.all(np.diff(cuts) >= 0)
        assert offsets.tolist() == [int(pairs[:c].sum()) for c in cuts]
        for k in range(1, parts):  # a cut is at the first block where k/parts of them are passed
            assert offsets[k] * parts >= int(pairs.sum()) * k
            assert cuts[k] == 0 or int(pairs[: cuts[k] - 1].sum()) * parts < int(pairs.sum()) * k


def test_kept_of_runs_merges_runs_and_counts_repeats_across_them() -> None:
    """A pair in several runs (and several times in one) is evaluated once with all its repeats;
    empty runs; rows in key order; the filter at its boundary (c == need kept, c < need not)."""
    from party.protocol._numba_pairs import kept_of_runs

    seg_a = np.array([[0b1111], [0b0011], [0]], dtype=np.uint64)
    seg_b = np.array([[0b0111], [0b111111], [0b1000]], dtype=np.uint64)
    pop_a, pop_b = popcount_rows_plain(seg_a), popcount_rows_plain(seg_b)
    table = threshold_table(2, 0.5, 16)  # (1, 1): 2c = 4 = 0.5 * (2 + 6), kept
    runs = [[(0, 0), (0, 0), (1, 1), (2, 2)], [], [(0, 0), (0, 2), (1, 1)], [(0, 1), (1, 1)]]
    keys = np.array([a << 32 | b for run in runs for a, b in sorted(run)], dtype=np.uint64)
    at = np.cumsum([0] + [len(r) for r in runs])
    keys_a = np.array([10, 11, 12], dtype=np.uint64)
    keys_b = np.array([20, 21, 22], dtype=np.uint64)
    out = np.full((keys.size, 3), 99, dtype=np.uint64)
    rec_a = np.column_stack([seg_a, pop_a, keys_a]).astype(np.uint64)  # the records' layout
    rec_b = np.column_stack([seg_b, pop_b, keys_b]).astype(np.uint64)
    written, dup, evaluated = kept_of_runs(
        keys, at[:-1].astype(np.int64), at[1:].astype(np.int64), rec_a, rec_b, table, 0, 1, 2,
        out,
    )  # fmt: skip
    rows = out[:written]
    assert np.all(out[written:] == 99)  # nothing written past the kept rows
    want = {}
    count: dict[tuple[int, int], int] = {}
    for run in runs:
        for a, b in run:
            count[(a, b)] = count.get((a, b), 0) + 1
    for (a, b), n in sorted(count.items()):
        c = bin(int(seg_a[a, 0]) & int(seg_b[b, 0])).count("1")
        if float(2 * c) >= 0.5 * float(pop_a[a] + pop_b[b]):
            want[(a, b)] = (c, n)
    assert (1, 1) in want and 2 * want[(1, 1)][0] == 0.5 * (pop_a[1] + pop_b[1])
    assert [(int(r[0]), int(r[1])) for r in rows] == [(10 + a, 20 + b) for a, b in want]
    assert rows[:, 2].tolist() == [c for c, _ in want.values()]
    assert dup == sum(n for _, n in want.values()) and 0 < len(want) < len(count)
    assert evaluated >= len(want)


def popcount_rows_plain(segs: np.ndarray) -> np.ndarray:
    """Each row's 1-bits, plain Python."""
    return np.array([sum(bin(int(w)).count("1") for w in row) for row in segs], dtype=np.int64)


@pytest.mark.parametrize("seed", range(4))
def test_merge_partner_rows_equals_a_plain_sort(seed: int) -> None:
    """A party's kept rows with several partners (runs in partner order, each sorted by the
    party's then the partner's pseudonym), merged: the rows in plain lexicographic order. Equal
    pseudonyms of the party across runs and within one, empty runs, one run."""
    from party.protocol._numba_pairs import merge_partner_rows

    rng = np.random.default_rng(40 + seed)
    parties = 5
    a = int(rng.integers(0, parties - 1))
    runs = []
    for b in range(a + 1, parties):
        m = int(rng.integers(0, 30)) if seed else (0 if b % 2 else 25)
        run = np.zeros((m, parties + 1), dtype=np.uint64)
        run[:, a] = rng.integers(1, 12, m)  # few values: ties across runs
        run[:, b] = rng.integers(1, 2**64 - 1, m, dtype=np.uint64)
        run[:, parties] = rng.integers(0, 99, m)
        runs.append(run[np.lexsort((run[:, b], run[:, a]))])
    rows = np.concatenate(runs)
    at = np.concatenate([[0], np.cumsum([r.shape[0] for r in runs])]).astype(np.int64)
    got = merge_partner_rows(rows, at, a)
    want = sorted(tuple(r) for r in rows.tolist())
    assert [tuple(r) for r in got.tolist()] == want
    one = merge_partner_rows(runs[-1], np.array([0, runs[-1].shape[0]], np.int64), a)
    assert np.array_equal(one, runs[-1])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("parts", [1, 2, 3, 5])
def test_partner_merge_in_ranges_equals_one_merge(seed: int, parts: int) -> None:
    """``partner_cuts`` + ``merge_partner_range`` per range (as the threads run them, here in
    reverse order) give the rows and order of one ``merge_partner_rows``: ties of a's pseudonym
    across runs and at the cuts (few values), empty runs, all rows empty, one value only."""
    from party.protocol._numba_pairs import (
        merge_partner_range,
        merge_partner_rows,
        partner_cuts,
    )

    rng = np.random.default_rng(70 + seed)
    parties, a = 4, 0
    values = [1, 2, 3, 12, 200, 200][seed]
    runs = []
    for b in range(a + 1, parties):
        m = 0 if seed == 5 else int(rng.integers(0, 80)) if b != 2 or seed % 2 else 0
        run = np.zeros((m, parties + 1), dtype=np.uint64)
        run[:, a] = rng.integers(1, values + 1, m)
        run[:, b] = rng.integers(1, 2**64 - 1, m, dtype=np.uint64)
        run[:, parties] = rng.integers(0, 99, m)
        runs.append(run[np.lexsort((run[:, b], run[:, a]))])
    rows = np.concatenate(runs)
    at = np.concatenate([[0], np.cumsum([r.shape[0] for r in runs])]).astype(np.int64)
    want = merge_partner_rows(rows, at, a)
    assert [tuple(r) for r in want.tolist()] == sorted(tuple(r) for r in rows.tolist())
    cuts = partner_cuts(rows, at, a, parts)
    assert cuts.shape == (parts + 1, len(runs))
    assert np.array_equal(cuts[0], at[:-1]) and np.array_equal(cuts[parts], at[1:])
    assert np.all(np.diff(cuts, axis=0) >= 0)
    firsts = (cuts - at[:-1]).sum(axis=1)
    got = np.full_like(rows, 7)
    for k in reversed(range(parts)):
        merge_partner_range(rows, cuts[k], cuts[k + 1], a, got, firsts[k])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_pair_engine_partner_merge_on_threads_equals_one_thread(
    workers: int, threads_always
) -> None:  # type: ignore[no-untyped-def]
    from party.protocol.pair_engine import _merged

    rng = np.random.default_rng(9)
    parties, a = 4, 1
    runs = []
    for b in range(a + 1, parties):
        m = int(rng.integers(50, 120))
        run = np.zeros((m, parties + 1), dtype=np.uint64)
        run[:, a] = rng.integers(1, 40, m)
        run[:, b] = rng.integers(1, 2**64 - 1, m, dtype=np.uint64)
        run = run[np.lexsort((run[:, b], run[:, a]))]
        runs.append([run[: m // 3], run[m // 3 :]])  # as the kernel's threads yield them
    want = np.concatenate(_merged([list(r) for r in runs], a, 1))
    got = np.concatenate(_merged([list(r) for r in runs], a, workers))
    assert np.array_equal(got, want)
    assert [tuple(r) for r in got.tolist()] == sorted(tuple(r) for r in got.tolist())
    one = [runs[0], [], []]  # one partner's rows: appended as they are, no copy
    parts = _merged([list(r) for r in one], a, workers)
    assert len(parts) == 2 and all(x is y for x, y in zip(parts, runs[0], strict=True))
    assert _merged([[], [], []], a, workers) == []


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("sizes", [[5], [0, 7, 0, 3], [40, 1, 0, 22, 9], [0, 0]])
def test_partner_merge_pieces_joined_on_threads_equal_a_concatenation(
    workers: int, sizes: list[int], threads_always
) -> None:  # type: ignore[no-untyped-def]
    """``_joined`` (the partner merge's pieces copied into place on the kernel threads) equals
    ``np.concatenate`` of the pieces: one piece, empty pieces, all empty; the list is emptied."""
    from party.protocol.pair_engine import _joined

    rng = np.random.default_rng(sum(sizes) + workers)
    pieces = [rng.integers(0, 2**63, size=(m, 4), dtype=np.uint64) for m in sizes]
    want = np.concatenate(pieces)
    given = list(pieces)
    got = _joined(given, workers)
    assert got.dtype == np.uint64 and np.array_equal(got, want) and given == []


@pytest.mark.parametrize("cap", [None, 1, 2])
@pytest.mark.parametrize("blocks", [0, 1, 2, 37, 500])
def test_plan_on_threads_equals_one_thread(cap, blocks: int, threads_always) -> None:  # type: ignore[no-untyped-def]
    """``PairPlan.from_indexes`` with 1, 2 and 3 threads: the same whole blocks and counts (no
    block, one block, fewer blocks than ranges, many), and the kernel's block ranges cut at the
    plan's ranges cover the blocks with their pairs as ``block_cuts`` counts them."""
    from party.protocol._numba_pairs import block_cuts
    from party.protocol.blocks import BlockIndex

    rng = np.random.default_rng(blocks + (cap or 0))
    sizes = rng.integers(0, 5, size=(2, blocks))
    if blocks:
        sizes[:, 0] = (3, 4)  # a block over a cap of 2
        sizes[:, -1] = (2, 2)  # at the cap: whole
    starts = [np.concatenate([[0], np.cumsum(s)]).astype(np.int64) for s in sizes]
    indexes = [BlockIndex(st, np.arange(st[-1], dtype=np.int64)) for st in starts]
    plans = [PairPlan.from_indexes(indexes[0], indexes[1], cap, workers) for workers in (1, 2, 3)]
    pairs = sizes[0] * sizes[1]
    whole = np.ones(blocks, bool) if cap is None else sizes.max(axis=0) <= cap
    for plan in plans:
        assert np.array_equal(plan.whole, whole)
        assert plan.whole_pairs == int(pairs[whole].sum())
        assert plan.uncapped == int(pairs.sum())
        assert plan.largest == int(pairs.max(initial=0))
        assert plan.check == (not whole.all())
        assert plan.total == plans[0].total
        for parts in (1, 2, 3):
            cuts, offsets = plan.block_ranges(parts)
            assert cuts.shape == offsets.shape == (parts + 1,)
            assert cuts[0] == 0 and cuts[-1] == blocks and np.all(np.diff(cuts) >= 0)
            running = np.concatenate([[0], np.cumsum(np.where(whole, pairs, 0))])
            assert np.array_equal(offsets, running[cuts])
            if plan.range_pairs.size == 1:  # one range: block_cuts
                want = block_cuts(*starts, plan.whole, plan.check, plan.whole_pairs, parts)
                assert np.array_equal(cuts, want[0]) and np.array_equal(offsets, want[1])


@pytest.mark.parametrize("cap", [-1, 2])
def test_plan_ranges_equal_plan_pairs_of_each_range(cap: int) -> None:
    """``plan_ranges`` (a thread's share of a plan's ranges of blocks in one call) writes the sums
    ``plan_pairs`` gives each of its ranges k0..k1-1 (empty ranges too), and the whole-block flags
    of their blocks; the other ranges' sums and blocks' flags are not touched."""
    from party.protocol._numba_pairs import plan_pairs, plan_ranges

    rng = np.random.default_rng(cap + 2)
    blocks = 90
    sizes = rng.integers(0, 5, size=(2, blocks))
    starts_a, starts_b = (np.concatenate([[0], np.cumsum(s)]).astype(np.int64) for s in sizes)
    cuts = np.array([0, 10, 10, 35, 60, 61, 90], dtype=np.int64)  # range 1 empty
    ranges = cuts.size - 1
    want_sums = np.zeros((ranges, 3), dtype=np.int64)
    want_whole = np.zeros(blocks if cap >= 0 else 0, dtype=np.bool_)
    for k in range(ranges):
        plan_pairs(starts_a, starts_b, cap, cuts[k], cuts[k + 1], want_whole, want_sums[k])
    for k0, k1 in ((0, ranges), (1, 4), (2, 3), (5, 5)):
        sums = np.full((ranges, 3), -7, dtype=np.int64)
        whole = np.zeros(blocks if cap >= 0 else 0, dtype=np.bool_)
        plan_ranges(starts_a, starts_b, cap, cuts, k0, k1, whole, sums)
        assert np.array_equal(sums[k0:k1], want_sums[k0:k1])
        assert np.all(sums[:k0] == -7) and np.all(sums[k1:] == -7)
        inside = slice(int(cuts[k0]), int(cuts[k1])) if cap >= 0 else slice(0, 0)
        assert np.array_equal(whole[inside], want_whole[inside])
        if cap >= 0:
            assert not whole[: int(cuts[k0])].any() and not whole[int(cuts[k1]) :].any()


@pytest.mark.parametrize("rows", [0, 1, 5, 300])
def test_party_records_hold_segment_popcount_key(rows: int, threads_always) -> None:  # type: ignore[no-untyped-def]
    """Each record row: the segment's words, their popcount, the pseudonym; read-only, the
    first row on a 64-byte boundary; the same on 1-3 threads; all-zero and all-one words."""
    from party.protocol.pairwise import party_records

    rng = np.random.default_rng(rows)
    segs = rng.integers(0, 2**64 - 1, size=(rows, 6), dtype=np.uint64)
    keys = rng.integers(1, 2**64 - 1, size=rows, dtype=np.uint64)
    if rows:
        segs[0] = 0
        segs[-1] = np.uint64(2**64 - 1)
    pops = [sum(bin(int(w)).count("1") for w in row) for row in segs]
    for workers in (1, 2, 3):
        (got,) = party_records([keys], [segs], workers)
        assert got.shape == (rows, 8) and got.dtype == np.uint64 and not got.flags.writeable
        assert got.ctypes.data % 64 == 0 or not rows
        assert np.array_equal(got[:, :6], segs)
        assert got[:, 6].tolist() == pops
        assert np.array_equal(got[:, 7], keys)


@pytest.mark.parametrize("cap", [None, 2])
def test_plans_of_several_pairs_at_once_equal_each_alone(cap, threads_always) -> None:  # type: ignore[no-untyped-def]
    """``PairPlan.from_index_pairs`` (the passes of several plans in one round of tasks) gives
    each pair of indexes the plan ``from_indexes`` gives it alone, on 1-3 threads: indexes of 0,
    1 and 200 blocks mixed, pairs with no pair at all."""
    from party.protocol.blocks import BlockIndex

    rng = np.random.default_rng(5)
    pairs: list[tuple[BlockIndex, BlockIndex]] = []
    for blocks in (200, 0, 1, 200):
        sizes = rng.integers(0, 5, size=(2, blocks))
        if blocks == 1:
            sizes[:, 0] = (3, 0)  # a block no pair of which exists
        starts = [np.concatenate([[0], np.cumsum(s)]).astype(np.int64) for s in sizes]
        ia, ib = (BlockIndex(st, np.arange(st[-1], dtype=np.int64)) for st in starts)
        pairs.append((ia, ib))
    for workers in (1, 2, 3):
        together = PairPlan.from_index_pairs(pairs, cap, workers)
        assert len(together) == len(pairs)
        for plan, (ia, ib) in zip(together, pairs, strict=True):
            alone = PairPlan.from_indexes(ia, ib, cap, workers)
            assert np.array_equal(plan.whole, alone.whole)
            assert np.array_equal(plan.range_cuts, alone.range_cuts)
            assert np.array_equal(plan.range_pairs, alone.range_pairs)
            for name in ("whole_pairs", "total", "uncapped", "largest", "check"):
                assert getattr(plan, name) == getattr(alone, name), name
    assert PairPlan.from_index_pairs([], cap, 2) == []


def test_pair_sides_equal_pair_side_of_each_party(threads_always) -> None:  # type: ignore[no-untyped-def]
    """``pair_sides`` (all parties' records in one round of tasks) gives every party the
    PairSide ``pair_side(..., sort=False)`` gives it alone, on 1-3 threads: parties of 0, 1 and
    300 rows."""
    from party.protocol.pairwise import pair_sides

    rng = np.random.default_rng(9)
    sizes = (300, 0, 1)
    keys = [np.sort(rng.choice(2**40, size=n, replace=False)).astype(np.uint64) for n in sizes]
    segs = [rng.integers(0, 2**64 - 1, size=(n, 3), dtype=np.uint64) for n in sizes]
    pos = [rng.integers(-1, 20, size=(n, 4)).astype(np.int32) for n in sizes]
    for workers in (1, 2, 3):
        got = pair_sides(keys, segs, pos, workers)
        for j, side in enumerate(got):
            alone = pair_side(j, keys[j], segs[j], pos[j], workers, sort=False)
            assert side.column == j
            for name in ("records", "keys", "segments", "pops", "positions"):
                x, y = getattr(side, name), getattr(alone, name)
                assert x.dtype == y.dtype and np.array_equal(x, y), name
            assert np.array_equal(side.pops, popcount_rows_plain(segs[j]))
    assert pair_sides([], [], [], 2) == []


def _kept_of_buckets(plan, sides, threshold, bits, parts):  # type: ignore[no-untyped-def]
    """``bucket_keys`` of ``parts`` ranges of blocks, then ``kept_rows_of_keys`` of each bucket
    of a's rows in order, its keys from every range (what Dask workers run)."""
    table = threshold_table(2, float(threshold), 2 * bits)
    a = IndexedSide.of(sides[0], plan.index_a)
    b = IndexedSide.of(sides[1], plan.index_b)
    whole = plan.whole if plan.check else None
    cuts, offsets = plan.block_ranges(parts)
    ranges = [
        bucket_keys(a, b, whole, cuts[k], cuts[k + 1], offsets[k + 1] - offsets[k], parts)
        for k in range(parts)
    ]
    return _joined(
        kept_rows_of_keys(
            a, b, np.concatenate([k[at[j] : at[j + 1]] for k, at in ranges]), table, 3
        )
        for j in range(parts)
    )


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cap", [None, 3])
def test_buckets_of_block_ranges_equal_kept_pairs(seed: int, cap) -> None:  # type: ignore[no-untyped-def]
    """Ranges of blocks put in buckets of a's rows, each bucket sorted and filtered (any number
    of ranges, more than a's rows too; a digest repeated in a row; with a cap, the whole blocks
    only) give kept_pairs' rows, in its order, and its counts."""
    rng = np.random.default_rng(300 + seed)
    bits = [64, 128][seed % 2]
    na, nb = int(rng.integers(1, 80)), int(rng.integers(1, 80))
    values = 5 if cap is None else 40  # with the cap: whole blocks beside sub-blocked ones
    bits_a, dig_a = _party(rng, na, bits, 4, values)
    bits_b, dig_b = _party(rng, nb, bits, 4, values)
    keys_a = np.sort(rng.choice(10**6, na, replace=False).astype(np.uint64) + 1)
    keys_b = np.sort(rng.choice(10**6, nb, replace=False).astype(np.uint64) + 1)
    plan, sides, _ = _plan_and_sides(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, cap, 1)
    want, want_pairs, want_dup = _kept(plan, sides, 0.5, bits, 10**6, 1)
    assert want.shape[0] > 0 and (cap is None or plan.check)
    for parts in (1, 2, 5, na, na + 3):
        got, pairs, dup = _kept_of_buckets(plan, sides, 0.5, bits, parts)
        assert got.tobytes() == want.tobytes(), parts
        assert (pairs, dup) == (want_pairs, want_dup)


def test_buckets_of_a_row_with_hundreds_of_partners_equal_kept_pairs() -> None:
    bits_a, bits_b, dig_a, dig_b, keys_a, keys_b = _hundreds_of_partners(22)
    plan, sides, _ = _plan_and_sides(bits_a, bits_b, dig_a, dig_b, keys_a, keys_b, None, 1)
    want, want_pairs, want_dup = _kept(plan, sides, 0.3, 64, 10**6, 1)
    for parts in (1, 2, 3):
        got, pairs, dup = _kept_of_buckets(plan, sides, 0.3, 64, parts)
        assert got.tobytes() == want.tobytes() and (pairs, dup) == (want_pairs, want_dup)
    assert want.shape[0] > 256 and dup > want.shape[0]


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_bucket_rows_groups_keys_by_row_range_in_their_order(step: int) -> None:
    """Each bucket holds the keys whose row of a (high 32 bits) // step is its number, in their
    order (a plain stable sort by bucket), including empty buckets and the last row."""
    rng = np.random.default_rng(step)
    rows = rng.integers(0, 40, 500).astype(np.uint64)
    rows[:3] = [0, 39, 39]
    keys = rows << np.uint64(32) | rng.integers(0, 2**32, 500).astype(np.uint64)
    buckets = 39 // step + 2  # one empty bucket at the end
    out = np.empty_like(keys)
    offsets = bucket_rows(keys, np.uint64(step), buckets, out)
    which = (keys >> np.uint64(32)) // np.uint64(step)
    assert offsets.tolist() == [0, *np.cumsum(np.bincount(which, minlength=buckets)).tolist()]
    assert np.array_equal(out, keys[np.argsort(which, kind="stable")])
    assert offsets[-1] == offsets[-2] == keys.size
