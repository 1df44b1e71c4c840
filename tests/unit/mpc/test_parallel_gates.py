"""mpc3 gates on several threads: the same keystreams, round payloads and outcome as one thread."""

from __future__ import annotations

import numpy as np
import pytest

import party.protocol.kernel as kernel
import party.protocol.threads as parallel
from party.mpc.candidates import candidate_sets
from party.mpc.compute import ComputeParty
from party.mpc.driver import drive, run_keys
from party.mpc.errors import MpcError
from party.mpc.inputs import input_shares
from party.mpc.keys import ZeroShares, keystream
from party.protocol.blocks import common_blocks
from party.protocol.engine import PartyEngine
from tests.unit.mpc.helpers import recorded
from tests.unit.mpc.test_mpc3_oracle import check_equal, mpc_params
from tests.unit.protocol.helpers import linked_tables


@pytest.fixture
def split_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every layer, however small, is cut into one range per thread."""
    monkeypatch.setattr(parallel, "PARALLEL_MIN_WORDS", 1)
    monkeypatch.setattr(kernel, "PARALLEL_MIN_BLOCKS", 1)


@pytest.mark.parametrize("total", [1, 2, 7, 64, 1000, 1001])
@pytest.mark.parametrize("parts", [1, 2, 3, 7])
@pytest.mark.parametrize("align", [1, 2, 8])
def test_split_range_covers_in_order(total, parts, align):
    pieces = parallel.split_range(total, parts, align)
    assert pieces[0][0] == 0 and pieces[-1][1] == total
    assert all(a < b for a, b in pieces)
    assert all(b == c for (_, b), (c, _) in zip(pieces[:-1], pieces[1:], strict=True))
    assert all(a % align == 0 for a, _ in pieces)
    assert len(pieces) <= parts


def test_split_range_of_nothing_is_empty():
    assert parallel.split_range(0, 4) == []


@pytest.mark.parametrize("workers", [2, 3, 5])
@pytest.mark.parametrize("words", [1, 2, 3, 17, 4096, 4097])
def test_parallel_keystreams_equal_one_context(split_everything, workers, words):
    keys = run_keys()[1]
    one = ZeroShares(keys)
    many = ZeroShares(keys, workers)
    for batch, number in ((0, 0), (3, 2**32 - 1), (2**32 - 1, 5)):
        a = [s.copy() for s in one.streams(batch, number, words)]
        b = [s.copy() for s in many.streams(batch, number, words)]
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        want = keystream(keys.own, batch, number, 8 * words)
        assert b[0].astype("<u8").tobytes() == want


def test_counter_carries_across_the_low_64_bits(split_everything):
    """A range that starts past a 2^64-block boundary of the 128-bit counter carries into the
    round number, as one CTR context does."""
    keys = run_keys()[0]
    words = 64
    one = ZeroShares(keys).streams(7, 9, words)[0].copy()
    many = ZeroShares(keys, 4).streams(7, 9, words)[0].copy()
    assert np.array_equal(one, many)


def _inputs(p: int, seed: int):
    rng = np.random.default_rng(seed)
    l_bits = 16 * p + 3
    blocks = 3 if p <= 3 else 16  # a few thousand candidate sets at P = 3, about 1,000 at P = 5
    tables = linked_tables(rng, p, 36, l_bits, shared=16, blocks=blocks, flip=0.04)
    params = mpc_params(p, l_bits, 0.6, one_to_one=True)
    engines = [PartyEngine(i, params, tables[i]) for i in range(p)]
    common = common_blocks([e.block_digests() for e in engines])
    for e in engines:
        e.set_common_blocks(common)
    shares = [s for e in engines for s in input_shares(e)]
    return params, shares


def _run(params, shares, keys, workers: int):
    """Outcomes and every round payload of the three CPs (batches of 128 sets)."""
    cps = [ComputeParty(i, params, keys[i], batch_sets=128, workers=workers) for i in range(3)]
    for s in shares:
        cps[s.target].receive_input(s)
    sent: list[list[tuple[int, int, bytes]]] = [[], [], []]

    outcomes = drive([recorded(cp.run(), sent[i]) for i, cp in enumerate(cps)])
    return outcomes, sent


@pytest.mark.parametrize("p", [2, 3, 5])
def test_compute_party_threads_send_the_same_rounds(split_everything, p):
    params, shares = _inputs(p, 40 + p)
    keys = run_keys()
    base, base_sent = _run(params, shares, keys, 1)
    assert base[0].stats.batches > 1 and base[0].classification.matches > 0
    for workers in (2, 3):
        got, got_sent = _run(params, shares, keys, workers)
        assert got_sent == base_sent
        for a, b in zip(base, got, strict=True):
            assert np.array_equal(a.classification.candidates, b.classification.candidates)
            assert np.array_equal(a.classification.similarities, b.classification.similarities)
            assert a.stats.and_gates == b.stats.and_gates and a.stats.rounds == b.stats.rounds


@pytest.mark.parametrize("p", [3, 4])
@pytest.mark.parametrize("s_t", [0.0, 0.75, 1.0])
def test_threaded_run_equals_oracle(split_everything, p, s_t, monkeypatch):
    rng = np.random.default_rng(7 * p)
    l_bits = 14 * p
    tables = linked_tables(rng, p, 24, l_bits, shared=10, blocks=6, flip=0.03)
    import party.mpc.driver as driver

    real = driver.ComputeParty

    def threaded(*args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["workers"] = 3
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "ComputeParty", threaded)
    check_equal(tables, mpc_params(p, l_bits, s_t), batch_sets=64)


@pytest.mark.parametrize("workers", [0, -1, True, 1.5])
def test_bad_workers_are_refused(workers):
    params, _ = _inputs(3, 1)
    with pytest.raises(MpcError, match="workers must be a positive integer"):
        ComputeParty(0, params, run_keys()[0], workers=workers)


@pytest.mark.parametrize("keys", [1, 3])
@pytest.mark.parametrize("cap", [None, 4])
def test_candidate_sets_on_threads_equal_one_thread(split_everything, keys, cap):
    """Enumeration on 1..4 threads: the same sets in the same order, with one blocking key (block
    order, duplicates impossible) and three (de-duplicated, sorted), with and without capped
    sub-blocks; three keys really do repeat sets across blocks."""
    tables = linked_tables(np.random.default_rng(keys), 3, 120, 96, shared=60, blocks=4, keys=keys)
    params = mpc_params(3, 96, 0.8)
    engines = [PartyEngine(i, params, t) for i, t in enumerate(tables)]
    common = common_blocks([e.block_digests() for e in engines])
    for e in engines:
        e.set_common_blocks(common)
    shares = [s for e in engines for s in input_shares(e) if s.target == 0]
    pseud = [s.pseudonyms for s in shares]
    digs = [s.block_digests for s in shares]
    one = candidate_sets(pseud, digs, cap)
    assert one.shape[0] > 100
    if cap is None:  # every set of rows sharing a non-zero digest, by brute force
        import itertools

        members = [
            {
                int(d): {r for r in range(dg.shape[0]) if int(d) in set(dg[r].tolist())}
                for d in set(dg.ravel().tolist()) - {0}
            }
            for dg in digs
        ]
        want = {
            t
            for d in set(members[0]) & set(members[1]) & set(members[2])
            for t in itertools.product(*(sorted(m[d]) for m in members))
        }
        rows = [tuple(r) for r in one.tolist()]
        assert set(rows) == want and len(rows) == len(want)
        if keys > 1:
            assert rows == sorted(want)
    for workers in (2, 3, 4):
        many = candidate_sets(pseud, digs, cap, workers=workers)
        assert many.dtype == one.dtype
        np.testing.assert_array_equal(one, many)


@pytest.mark.parametrize("xg", [True, False])
@pytest.mark.parametrize("yg", [True, False])
@pytest.mark.parametrize(
    ("n", "lo", "hi"), [(300, 0, 300), (300, 8, 264), (300, 128, 256), (64, 0, 64), (300, 40, 40)]
)
def test_and_word_major_equals_the_share_formula(xg, yg, n, lo, hi):
    """Every set of [lo, hi) gets (x0 & (y0 ^ y1)) ^ (x1 & y0) ^ ka ^ kb, word by word, for tile
    edges inside and outside the range (``AND_TILE_SETS``); index -1 reads an all-zero row; the
    sets outside the range are not written."""
    from party.mpc._numba_gates import and_word_major

    rng = np.random.default_rng(n + lo + hi)
    words, records = 3, 50

    def operand(gathered: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(share 0, share 1, index, each set's pair of words as (n, words) rows)."""
        if gathered:
            s0, s1 = (rng.integers(0, 2**64, (records, words), dtype=np.uint64) for _ in range(2))
            idx = rng.integers(-1, records, n)
            zero = np.zeros(words, dtype=np.uint64)
            rows0 = np.array([s0[i] if i >= 0 else zero for i in idx])
            rows1 = np.array([s1[i] if i >= 0 else zero for i in idx])
            return s0, s1, idx, np.stack([rows0, rows1])
        s0, s1 = (rng.integers(0, 2**64, (words, n), dtype=np.uint64) for _ in range(2))
        return s0, s1, np.full(n, 7), np.stack([s0.T, s1.T])

    x0, x1, ix, xs = operand(xg)
    y0, y1, iy, ys = operand(yg)
    ka, kb = (rng.integers(0, 2**64, words * n, dtype=np.uint64) for _ in range(2))
    out = np.full((words, n), 0xDEADBEEF, dtype=np.uint64)
    and_word_major(x0, x1, ix, xg, y0, y1, iy, yg, ka, kb, out, lo, hi)
    alpha = (ka ^ kb).reshape(words, n).T
    want = ((xs[0] & (ys[0] ^ ys[1])) ^ (xs[1] & ys[0]) ^ alpha).T
    assert np.array_equal(out[:, lo:hi], want[:, lo:hi])
    assert (out[:, :lo] == 0xDEADBEEF).all() and (out[:, hi:] == 0xDEADBEEF).all()


@pytest.mark.parametrize("total", [0, 1, 63, 64, 65, 128, 129, 1000, 475_000, 1_000_001])
@pytest.mark.parametrize("batch_sets", [64, 128, 72_256])
def test_batches_are_even_ranges_of_at_most_batch_sets(total, batch_sets):
    """Consecutive ranges covering [0, total), as few as fit ``batch_sets`` each; all of one
    size, a multiple of 64, but the last, which is no larger."""
    from party.mpc.compute import batch_ranges

    got = batch_ranges(total, batch_sets)
    assert len(got) == -(-total // batch_sets)
    assert [lo for lo, _ in got] == [0, *(hi for _, hi in got[:-1])][: len(got)]
    assert (got[-1][1] if got else 0) == total
    sizes = [hi - lo for lo, hi in got]
    assert all(0 < n <= batch_sets for n in sizes)
    assert all(n == sizes[0] and n % 64 == 0 for n in sizes[:-1])
    if sizes:
        assert sizes[-1] <= sizes[0]
