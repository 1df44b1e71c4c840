"""Compiled loops for blocks and row stores: digest lookups, CSR membership, first row per key.

The sort-based numpy versions sort every (record, pass) digest (n * B of them: 16 M at 1 M records
and 16 passes); these are linear: a hash table of the common digests answers each lookup in O(1),
and a counting sort by block places each row without comparing keys (``DigestLookup`` in
blocks.py keeps one table per run for every lookup against the common blocks). Results equal the sort-based
definitions exactly (tests/unit/protocol/test_blocks_index.py checks them against a plain oracle).
``first_of_each_key`` drops repeated keys of a row store in one pass before it is sorted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from party.numba_jit import jit
from party.protocol._numba_party_arrays import PartyArrays, u64_item, u64_values

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_LOW = np.uint64(0xFFFFFFFF)
_HALF = np.uint64(32)


@jit
def table_bits(count: int) -> int:
    bits = 4
    while (1 << bits) < 2 * count:
        bits += 1
    return bits


#: How many slots past its home slot (its top bits) a digest of a sorted table may sit
#: (``fill_sorted``), and the slots a table has past its 2^bits home slots. HMAC digests and random
#: pseudonyms sit at most ~12 past it at 16 M; a haystack clustered in its top bits is hashed
#: instead (``fill_hashed``), so a lookup reads at most this many slots past its home.
SORTED_REACH = 64


@jit
def fill_hashed(table: np.ndarray, bits: int, haystack: np.ndarray) -> None:
    """Fill the zeroed ``table`` (``(2^bits + SORTED_REACH)`` slots of 3 uint32 words: digest low
    and high half, index; a slot of digest 0 is empty; a probe reads one cache line) with the
    distinct non-zero uint64 ``haystack`` in any order: open addressing on a multiplicative hash
    over the first 2^bits slots, at most half full. Digest -> its index."""
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    for i in range(haystack.shape[0]):
        k = haystack[i]
        if k == 0:
            continue
        lo = np.uint32(k & _LOW)
        hi = np.uint32(k >> _HALF)
        h = np.int64((k * _GOLDEN) >> shift)
        while True:
            b = 3 * h
            if table[b] == lo and table[b + 1] == hi:
                break
            if table[b] == 0 and table[b + 1] == 0:
                break
            h = (h + 1) & mask
        table[b] = lo
        table[b + 1] = hi
        table[b + 2] = np.uint32(i)


@jit
def fill_sorted(table: np.ndarray, bits: int, haystack: np.ndarray) -> int:
    """Fill the zeroed ``table`` (as ``fill_hashed``) with the strictly increasing ``haystack``
    (zeros skipped): digest k goes to its home slot k >> (64 - bits) or, if taken, the slot after
    the previous digest's, so the table is written in one sequential pass and each run of occupied
    slots holds increasing digests. Returns the largest distance of a digest past its home slot,
    or -1 when some digest would sit more than SORTED_REACH past it (the table then holds a part
    of the haystack: zero it before ``fill_hashed``)."""
    shift = np.uint64(64 - bits)
    prev = -1
    reach = 0
    for i in range(haystack.shape[0]):
        k = haystack[i]
        if k == 0:
            continue
        home = np.int64(k >> shift)
        s = home if home > prev else np.int64(prev + 1)
        if s - home > SORTED_REACH:
            return -1
        if s - home > reach:
            reach = int(s - home)
        b = 3 * s
        table[b] = np.uint32(k & _LOW)
        table[b + 1] = np.uint32(k >> _HALF)
        table[b + 2] = np.uint32(i)
        prev = int(s)
    return reach


#: How many needles ahead ``table_positions`` asks for the home slot's cache line: a table of
#: hundreds of MiB misses the caches on nearly every probe, and a probe's branches (hit at home,
#: a later slot, a miss) keep the CPU from running far ahead on its own.
PREFETCH_AHEAD = 16


@intrinsic
def _prefetch(typingctx, array, index):  # type: ignore[no-untyped-def]
    """Ask the CPU to bring element ``index`` of a 1-D array into its caches (``llvm.prefetch``:
    no load, never faults, changes no result)."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        kind = signature.args[0]
        data = context.make_array(kind)(context, builder, args[0])
        item = cgutils.get_item_pointer(context, builder, kind, data, [args[1]], wraparound=False)
        address = builder.bitcast(item, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        hint = ir.FunctionType(ir.VoidType(), [address.type, i32, i32, i32])
        fn = builder.module.declare_intrinsic("llvm.prefetch", [address.type], hint)
        # read (0), keep in every cache level (3), data (1)
        builder.call(fn, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@jit
def table_positions(table: np.ndarray, bits: int, reach: int, needles: np.ndarray) -> np.ndarray:
    """For each needle (uint64), its index in the table's haystack, or -1 (needle 0: -1).
    ``reach``: what ``fill_sorted`` returned (-1: the table was filled by ``fill_hashed``). The
    home slot of the needle ``PREFETCH_AHEAD`` places on is prefetched (same results)."""
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    n = needles.shape[0]
    out = np.full(n, -1, dtype=np.int32)  # the table holds < 2^31 digests
    for i in range(n):
        if i + PREFETCH_AHEAD < n:
            ahead = needles[i + PREFETCH_AHEAD]
            if reach < 0:
                ahead = ahead * _GOLDEN
            _prefetch(table, 3 * np.int64(ahead >> shift))  # type: ignore[call-arg]
        k = needles[i]
        if k == 0:
            continue
        lo = np.uint32(k & _LOW)
        hi = np.uint32(k >> _HALF)
        if reach >= 0:
            # a run of occupied slots from the home slot on, digests increasing: stop at an empty
            # slot or a larger digest (the run is contiguous: fill_sorted's rule)
            h = np.int64(k >> shift)
            last = h + reach
            while h <= last:
                b = 3 * h
                t_lo = table[b]
                t_hi = table[b + 1]
                if t_lo == lo and t_hi == hi:
                    out[i] = np.int32(table[b + 2])
                    break
                if t_hi > hi or (t_hi == hi and t_lo > lo) or (t_lo == 0 and t_hi == 0):
                    break
                h += 1
            continue
        h = np.int64((k * _GOLDEN) >> shift)
        while True:
            b = 3 * h
            t_lo = table[b]
            t_hi = table[b + 1]
            if t_lo == lo and t_hi == hi:
                out[i] = np.int32(table[b + 2])
                break
            if t_lo == 0 and t_hi == 0:
                break
            h = (h + 1) & mask
    return out


@jit
def rows_in_blocks(pos: np.ndarray) -> np.ndarray:
    """int64 numbers of the rows of an (n, B) position matrix naming at least one block (>= 0)."""
    n, width = pos.shape
    keep = np.zeros(n, dtype=np.bool_)
    count = 0
    for r in range(n):
        for c in range(width):
            if pos[r, c] >= 0:
                keep[r] = True
                count += 1
                break
    out = np.empty(count, dtype=np.int64)
    k = 0
    for r in range(n):
        if keep[r]:
            out[k] = r
            k += 1
    return out


@jit
def positions_named(pos: np.ndarray, blocks: int) -> int:
    """How an (n, B) int32 position matrix names blocks (0..blocks-1; -1: none): 1 if a value is
    neither -1 nor a block position, else 2 if a row names no block, else 0."""
    n, width = pos.shape
    empty = False
    for r in range(n):
        named = False
        for c in range(width):
            b = pos[r, c]
            if b >= 0:
                if b >= blocks:
                    return 1
                named = True
            elif b != -1:
                return 1
        if not named:
            empty = True
    return 2 if empty else 0


@jit
def _first_in_row(pos: np.ndarray, r: int, c: int) -> bool:
    """True iff column c of row r names a block no earlier column of the row names."""
    b = pos[r, c]
    for e in range(c):  # noqa: SIM110 (a compiled loop, not a generator)
        if pos[r, e] == b:
            return False
    return True


@jit
def _first_of_block(pos: np.ndarray, r: int, c: int, rows_sorted: bool) -> bool:
    """True iff column c of row r names a block no earlier column of the row names (rows sorted:
    only the column before can)."""
    if rows_sorted:
        return c == 0 or pos[r, c - 1] != pos[r, c]
    return _first_in_row(pos, r, c)


@jit
def csr_count(
    pos: np.ndarray, lo: int, hi: int, counts: np.ndarray, rows_sorted: bool = False
) -> None:
    """counts[b + 1] += rows of the (n, B) position matrix naming block b, for b in [lo, hi)
    (a row once per block however many columns name it); other entries are not touched.
    ``rows_sorted``: every row is sorted (increasing), which makes each row's scan shorter."""
    n, width = pos.shape
    for r in range(n):
        for c in range(width):
            b = pos[r, c]
            if rows_sorted and b >= hi:
                break
            if lo <= b < hi and _first_of_block(pos, r, c, rows_sorted):
                counts[b + 1] += 1


@jit
def csr_fill(
    pos: np.ndarray,
    visit: np.ndarray,
    lo: int,
    hi: int,
    starts: np.ndarray,
    rows: np.ndarray,
    rows_sorted: bool = False,
) -> None:
    """Place the rows of blocks [lo, hi) in the order ``visit`` lists them: the rows of block b
    go to rows[starts[b] : starts[b + 1]] (``starts`` from ``csr_count``'s cumulative counts)."""
    width = pos.shape[1]
    fill = starts[lo:hi].copy()  # next free slot of each block of the range
    for i in range(visit.shape[0]):
        r = visit[i]
        for c in range(width):
            b = pos[r, c]
            if rows_sorted and b >= hi:
                break
            if lo <= b < hi and _first_of_block(pos, r, c, rows_sorted):
                rows[fill[b - lo]] = r
                fill[b - lo] += 1


@jit
def sort_rows_in_place(pos: np.ndarray, lo: int, hi: int) -> None:
    """Sort rows lo..hi-1 of an (n, B) int32 block-position matrix in place (insertion sort: B is
    a few dozen at most); -1 (no block) sorts first."""
    width = pos.shape[1]
    for r in range(lo, hi):
        for i in range(1, width):
            x = pos[r, i]
            j = i - 1
            while j >= 0 and pos[r, j] > x:
                pos[r, j + 1] = pos[r, j]
                j -= 1
            pos[r, j + 1] = x


@jit
def starts_of(counts: np.ndarray) -> np.ndarray:
    """(n + 1,) int64 CSR starts of n per-block counts: 0, then their running sums."""
    starts = np.empty(counts.shape[0] + 1, dtype=np.int64)
    starts[0] = 0
    for b in range(counts.shape[0]):
        starts[b + 1] = starts[b] + counts[b]
    return starts


@jit
def block_sizes(pos: np.ndarray, blocks: int) -> np.ndarray:
    """Rows per block of an (n, B) matrix of block positions (-1: none), a row counted once per
    block however many columns name it."""
    counts = np.zeros(blocks + 1, dtype=np.int64)
    csr_count(pos, 0, blocks, counts)
    return counts[1:]


@jit
def distinct_nonzero_in_place(ordered: np.ndarray) -> int:
    """Move the distinct non-zero values of a sorted 1-D uint64 array to its front, in order;
    return how many there are (the zeros sort first and read as the value before the first)."""
    kept = 0
    before = np.uint64(0)
    for t in range(ordered.shape[0]):
        value = ordered[t]
        ordered[kept] = value
        kept += value != before
        before = value
    return kept


@jit
def intersect_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Values in both strictly increasing 1-D uint64 arrays (a merge; increasing)."""
    out = np.empty(min(a.shape[0], b.shape[0]), dtype=np.uint64)
    k = _intersect_into(a, 0, b, 0, out, 0)
    return out[:k]


@jit
def _intersect_into(a: np.ndarray, i: int, b: np.ndarray, j: int, out: np.ndarray, k: int) -> int:
    """Write the values in both a[i:] and b[j:] (strictly increasing) to out[k:]; return the new
    end. Without branches on the values (random digests would mispredict every other step):
    each step writes its lower head and keeps it only if the heads are equal."""
    na, nb = a.shape[0], b.shape[0]
    while i < na and j < nb:
        x, y = a[i], b[j]
        out[k] = x
        k += x == y
        i += x <= y
        j += y <= x
    return k


@jit
def in_two_of_three(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Values in at least two of three strictly increasing 1-D uint64 arrays (increasing): a
    three-way merge with its heads in registers and no branch on the values (each step writes
    the lowest head, keeps it if two or three heads hold it, and moves the heads holding it);
    when one array is through, the other two's common values."""
    na, nb, nc = a.shape[0], b.shape[0], c.shape[0]
    out = np.empty((na + nb + nc) // 2, dtype=np.uint64)
    i = j = k = n = 0
    while i < na and j < nb and k < nc:
        x, y, z = a[i], b[j], c[k]
        low = min(x, y, z)
        in_a, in_b, in_c = x == low, y == low, z == low
        out[n] = low
        n += int(in_a) + int(in_b) + int(in_c) >= 2
        i += in_a
        j += in_b
        k += in_c
    if i >= na:
        n = _intersect_into(b, j, c, k, out, n)
    elif j >= nb:
        n = _intersect_into(a, i, c, k, out, n)
    else:
        n = _intersect_into(a, i, b, j, out, n)
    return out[:n].copy()


def in_two_or_more(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Values present in at least two of the strictly increasing 1-D uint64 arrays (increasing);
    one compiled variant for any number of arrays (``values_in_two_or_more``)."""
    values = PartyArrays(arrays, np.uint64)
    return values_in_two_or_more(values.at, values.rows)  # type: ignore[no-any-return]


@jit
def values_in_two_or_more(at: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``in_two_or_more`` of the uint64 ``PartyArrays`` ``at`` / ``rows``: a k-way merge over the
    arrays not yet through (``live``), each one's next value kept in ``head``; one pass finds the
    lowest and the arrays holding it (``hit``)."""
    p = at.shape[0]
    if p == 2:  # their common values: one merge
        return intersect_sorted(u64_values(at, rows, 0), u64_values(at, rows, 1))
    if p == 3:  # the heads in registers
        return in_two_of_three(
            u64_values(at, rows, 0), u64_values(at, rows, 1), u64_values(at, rows, 2)
        )
    heads = np.zeros(p, dtype=np.int64)
    head = np.zeros(p, dtype=np.uint64)
    live = np.empty(p, dtype=np.int64)
    hit = np.empty(p, dtype=np.int64)
    total = 0
    m = 0
    for j in range(p):
        total += rows[j]
        if rows[j] > 0:
            head[j] = u64_item(at, j, 0)
            live[m] = j
            m += 1
    out = np.empty(total // 2, dtype=np.uint64)
    n = 0
    while m > 0:
        low = head[live[0]]
        hit[0] = live[0]
        h = 1
        for t in range(1, m):
            j = live[t]
            v = head[j]
            if v < low:
                low = v
                hit[0] = j
                h = 1
            elif v == low:
                hit[h] = j
                h += 1
        if h >= 2:
            out[n] = low
            n += 1
        through = False
        for t in range(h):
            j = hit[t]
            heads[j] += 1
            if heads[j] < rows[j]:
                head[j] = u64_item(at, j, heads[j])
            else:
                through = True
        if through:  # drop the arrays that are through, keeping the others' order
            k = 0
            for t in range(m):
                if heads[live[t]] < rows[live[t]]:
                    live[k] = live[t]
                    k += 1
            m = k
    return out[:n].copy()


@jit
def strictly_increasing(a: np.ndarray) -> bool:
    """True iff the 1-D array is strictly increasing."""
    for i in range(1, a.shape[0]):  # noqa: SIM110 (a compiled loop, not a generator)
        if a[i] <= a[i - 1]:
            return False
    return True


@jit
def keys_strictly_increasing(rows: np.ndarray, key_columns: int) -> bool:
    """True iff the first ``key_columns`` columns of the rows of an (n, w) uint64 array are
    strictly increasing in lexicographic order (no two rows share a key)."""
    for i in range(1, rows.shape[0]):
        c = 0
        while c < key_columns and rows[i, c] == rows[i - 1, c]:
            c += 1
        if c == key_columns or rows[i, c] < rows[i - 1, c]:
            return False
    return True


@jit
def first_of_each_key(rows: np.ndarray, key_columns: int) -> np.ndarray:
    """Mask of the rows of an (n, w) uint64 array whose first ``key_columns`` columns no earlier
    row has (a hash set of the keys: linear time, whatever the order)."""
    n = rows.shape[0]
    keep = np.zeros(n, dtype=np.bool_)
    if n == 0:
        return keep
    bits = table_bits(n)
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    table = np.full(1 << bits, -1, dtype=np.int32)  # row number (n < 2^31) or -1
    for i in range(n):
        h = np.uint64(0)
        for c in range(key_columns):
            h = (h ^ rows[i, c]) * _GOLDEN
        slot = np.int64(h >> shift)
        while True:
            j = table[slot]
            if j < 0:
                table[slot] = i
                keep[i] = True
                break
            same = True
            for c in range(key_columns):
                if rows[j, c] != rows[i, c]:
                    same = False
                    break
            if same:
                break
            slot = (slot + 1) & mask
    return keep


@jit
def _row_less(rows: np.ndarray, a: int, b: int, first: int, last: int) -> bool:
    """True iff row a < row b lexicographically on columns first..last-1."""
    for c in range(first, last):
        x, y = rows[a, c], rows[b, c]
        if x != y:
            return bool(x < y)
    return False


@jit
def sort_ties(rows: np.ndarray, order: np.ndarray, key_columns: int, long_run: int):  # type: ignore[no-untyped-def]
    """``order`` (sorting the rows stably by column 0) with each run of equal column-0 values
    shorter than ``long_run`` sorted stably by columns 1..key_columns-1 (insertion sort for short
    runs, least-significant-column-first merge sorts for longer ones), and the (r, 2) int64
    [start, end) bounds of the runs of ``long_run`` rows or more, left for the caller to sort
    (numpy's stable sort is about 3x faster than numba's merge sort on long runs)."""
    n = order.shape[0]
    longs = np.empty((0, 2), dtype=np.int64)
    found = 0
    i = 0
    while i < n:
        v = rows[order[i], 0]
        j = i + 1
        while j < n and rows[order[j], 0] == v:
            j += 1
        if j - i > 1 and key_columns > 1:
            if j - i >= long_run:
                if found == longs.shape[0]:
                    grown = np.empty((max(8, 2 * found), 2), dtype=np.int64)
                    grown[:found] = longs[:found]
                    longs = grown
                longs[found, 0] = i
                longs[found, 1] = j
                found += 1
            elif j - i <= 32:
                for a in range(i + 1, j):
                    x = order[a]
                    b = a - 1
                    while b >= i and _row_less(rows, x, order[b], 1, key_columns):
                        order[b + 1] = order[b]
                        b -= 1
                    order[b + 1] = x
            else:
                sub = order[i:j].copy()
                keys = np.empty(j - i, dtype=np.uint64)
                for c in range(key_columns - 1, 0, -1):
                    for t in range(j - i):
                        keys[t] = rows[sub[t], c]
                    sub = sub[np.argsort(keys, kind="mergesort")]
                order[i:j] = sub
        i = j
    return order, longs[:found].copy()


@jit
def _key_below(rows: np.ndarray, i: int, bounds: np.ndarray, j: int, key_columns: int) -> bool:
    """True iff row i of ``rows`` is below row j of ``bounds`` on the first key columns."""
    for c in range(key_columns):
        x, y = rows[i, c], bounds[j, c]
        if x != y:
            return bool(x < y)
    return False


@jit
def rows_at_most(rows: np.ndarray, bound: np.ndarray) -> int:
    """How many leading rows of ``rows`` (sorted by their first ``bound.size`` columns) are at
    most ``bound`` on those columns: a binary search."""
    k = bound.shape[0]
    lo = 0
    hi = rows.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        above = False
        for c in range(k):
            x, y = rows[mid, c], bound[c]
            if x != y:
                above = x > y
                break
        if above:
            hi = mid
        else:
            lo = mid + 1
    return lo


@jit
def _key_range(rows: np.ndarray, i: int, splitters: np.ndarray, key_columns: int) -> int:
    """The key range of row i: how many of the sorted ``splitters`` are at most its key."""
    lo = 0
    hi = splitters.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if _key_below(rows, i, splitters, mid, key_columns):
            hi = mid
        else:
            lo = mid + 1
    return lo


@jit
def key_range_counts(
    rows: np.ndarray, splitters: np.ndarray, key_columns: int, lo: int, hi: int, counts: np.ndarray
) -> None:
    """Add to ``counts[r]`` how many of rows lo..hi-1 fall in key range r (``_key_range``);
    counted in this call's own array (the threads' ``counts`` may share a cache line)."""
    own = np.zeros(counts.shape[0], dtype=np.int64)
    for i in range(lo, hi):
        own[_key_range(rows, i, splitters, key_columns)] += 1
    for r in range(counts.shape[0]):
        counts[r] += own[r]


@jit
def key_range_fill(
    rows: np.ndarray,
    splitters: np.ndarray,
    key_columns: int,
    lo: int,
    hi: int,
    at: np.ndarray,
    out: np.ndarray,
) -> None:
    """Copy rows lo..hi-1 to ``out``, row i of key range r at ``at[r]`` + the rows of range r
    before it: rows of a range keep their order (positions advanced in this call's own array)."""
    width = rows.shape[1]
    nxt = at.copy()
    for i in range(lo, hi):
        r = _key_range(rows, i, splitters, key_columns)
        p = nxt[r]
        for c in range(width):
            out[p, c] = rows[i, c]
        nxt[r] = p + 1


@jit
def first_keys_in_order(rows: np.ndarray, order: np.ndarray, key_columns: int) -> np.ndarray:
    """The positions in ``order`` (a permutation sorting ``rows`` by key) of the first row of
    each key: of equal keys, the one the order puts first."""
    n = order.shape[0]
    keep = np.empty(n, dtype=np.int64)
    k = 0
    for t in range(n):
        if t == 0 or _key_below(rows, order[t - 1], rows, order[t], key_columns):
            keep[k] = t
            k += 1
    return keep[:k].copy()


@jit
def gather_rows(rows: np.ndarray, order: np.ndarray, picks: np.ndarray, out: np.ndarray) -> None:
    """out[t] = rows[order[picks[t]]] for every t."""
    width = rows.shape[1]
    for t in range(picks.shape[0]):
        i = order[picks[t]]
        for c in range(width):
            out[t, c] = rows[i, c]


@jit
def sort_high_ties(col: np.ndarray, packed: np.ndarray, order: np.ndarray, shift: int) -> None:
    """Finish a stable argsort of ``col`` begun by sorting ``packed`` (bits above ``shift``: an
    order-keeping reduction of each value, ``ring.argsort_stable``; below: its index) into
    ``order`` (the indices in that order): sort stably by the whole value each run of equal high
    bits whose values are not yet in order (insertion sort for short runs, a merge sort for longer
    ones)."""
    n = order.shape[0]
    high_shift = np.uint64(shift)
    i = 0
    while i < n:
        high = packed[i] >> high_shift
        j = i + 1
        while j < n and (packed[j] >> high_shift) == high:
            j += 1
        if j - i > 1:
            in_order = True
            for t in range(i + 1, j):
                if col[order[t]] < col[order[t - 1]]:
                    in_order = False
                    break
            if not in_order:
                if j - i <= 32:
                    for a in range(i + 1, j):
                        x = order[a]
                        b = a - 1
                        while b >= i and col[x] < col[order[b]]:
                            order[b + 1] = order[b]
                            b -= 1
                        order[b + 1] = x
                else:
                    sub = order[i:j].copy()
                    vals = np.empty(j - i, dtype=np.uint64)
                    for t in range(j - i):
                        vals[t] = col[sub[t]]
                    order[i:j] = sub[np.argsort(vals, kind="mergesort")]
        i = j


@jit
def merge_unique_runs(
    rows: np.ndarray, bounds: np.ndarray, key_columns: int, out: np.ndarray
) -> int:
    """Merge the runs ``rows[bounds[r]:bounds[r + 1]]`` (each sorted by its first ``key_columns``
    columns) into ``out`` (as many rows as ``rows``), sorted, one row per key: of equal keys, the
    first row of the earliest run. Returns the rows written."""
    runs = bounds.shape[0] - 1
    width = rows.shape[1]
    head = bounds[:-1].copy()
    written = 0
    while True:
        best = -1
        for r in range(runs):
            if head[r] < bounds[r + 1] and (
                best < 0 or _row_less(rows, head[r], head[best], 0, key_columns)
            ):
                best = r
        if best < 0:
            break
        i = head[best]
        head[best] = i + 1
        if written and _same_key(out, written - 1, rows, i, key_columns):
            continue
        for c in range(width):
            out[written, c] = rows[i, c]
        written += 1
    return written


@jit
def _same_key(a: np.ndarray, i: int, b: np.ndarray, j: int, key_columns: int) -> bool:
    """True iff row i of ``a`` and row j of ``b`` have the same first ``key_columns`` columns."""
    for c in range(key_columns):  # noqa: SIM110 (a compiled loop, not a generator)
        if a[i, c] != b[j, c]:
            return False
    return True


@jit
def csr_keys(
    pos: np.ndarray, rank: np.ndarray, lo: int, hi: int, out: np.ndarray, rows_sorted: bool
) -> None:
    """Write, row after row, ``b << 32 | rank[r]`` for every block b in [lo, hi) that row r of the
    (n, B) position matrix names (once per block) to ``out`` (as many as ``csr_count`` counts):
    sorted, they are the range's CSR rows (block by block, by rank within a block) in their low
    32 bits. Sequential writes, where ``csr_fill`` writes every row at a random place."""
    n, width = pos.shape
    k = 0
    for r in range(n):
        low = np.int64(rank[r])
        for c in range(width):
            b = pos[r, c]
            if rows_sorted and b >= hi:
                break
            if lo <= b < hi and _first_of_block(pos, r, c, rows_sorted):
                out[k] = (np.int64(b) << 32) | low
                k += 1


@jit
def _range_of(b, cuts):  # type: ignore[no-untyped-def]
    """The range k of block b (cuts[k] <= b < cuts[k + 1]), or len(cuts) - 1 for b < 0; compares
    summed, not branched on (blocks fall in the ranges at random)."""
    parts = cuts.shape[0] - 1
    k = np.int64(0)
    for j in range(1, parts):
        k += np.int64(b >= cuts[j])
    return parts if b < 0 else k


@jit
def range_entry_counts(
    pos: np.ndarray, r0: int, r1: int, cuts: np.ndarray, counts: np.ndarray
) -> None:
    """counts[k] = the entries of rows r0..r1-1 of an (n, B) position matrix naming a block of
    range k (cuts[k] <= b < cuts[k + 1]; a row's repeats of a block included); -1 not counted."""
    parts = cuts.shape[0] - 1
    width = pos.shape[1]
    own = np.zeros(parts + 1, dtype=np.int64)  # own[parts]: the -1 entries
    for r in range(r0, r1):
        for c in range(width):
            own[_range_of(pos[r, c], cuts)] += 1
    for k in range(parts):
        counts[k] = own[k]


@jit
def range_entry_keys(
    pos: np.ndarray, r0: int, r1: int, cuts: np.ndarray, fill: np.ndarray, out: np.ndarray
) -> None:
    """Write ``b << 32 | r`` (int64) for every entry b >= 0 of rows r0..r1-1 to out[fill[k]], the
    next slot of its range k, row after row; fill[len(cuts) - 1] is a slot the -1 entries are
    written to and not advanced past (no branch per entry). Sorted, a range's keys list its
    blocks' rows in row order, a row's repeats of a block next to each other."""
    f = fill.copy()
    width = pos.shape[1]
    for r in range(r0, r1):
        low = np.int64(r)
        for c in range(width):
            b = np.int64(pos[r, c])
            k = _range_of(b, cuts)
            out[f[k]] = (b << 32) | low
            f[k] += np.int64(b >= 0)


@jit
def rows_of_sorted_keys(keys: np.ndarray, lo: int, hi: int, base: int, starts: np.ndarray) -> int:
    """From the sorted ``range_entry_keys`` of blocks [lo, hi): each distinct key's row (its low 32
    bits) written over the keys from the front, a repeated key once; starts[b] = base + where
    block b's rows begin, for b in [lo, hi). Returns how many rows (keys.size when none repeats).
    Two passes without a branch per key or block (most blocks hold 0 or 1 row of a party, at
    random): each block's rows counted in ``starts`` as the keys are read, then summed up."""
    for b in range(lo, hi):
        starts[b] = 0
    w = 0
    prev = np.int64(-1)
    for j in range(keys.shape[0]):
        x = keys[j]
        kept = int(x != prev)
        keys[w] = x & 0xFFFFFFFF  # w <= j: a slot already read
        w += kept
        starts[x >> 32] += kept
        prev = x
    at = np.int64(base)
    for b in range(lo, hi):
        count = starts[b]
        starts[b] = at
        at += count
    return w
