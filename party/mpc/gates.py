"""The gate engine of one compute party: local XOR/NOT, AND and opening rounds, adder trees.

A shared wire vector is a ``Pair`` (first, second) of equally shaped uint64 arrays: compute party
(CP) i holds shares (x_i, x_{i+1}). Bit-sliced: bit k of a word is one candidate set ("lane").

Rounds. Every interactive step is one ``Round`` that CP i sends to CP (i + 2) % 3 while receiving
the same-sized payload CP (i + 1) % 3 sent for the same (batch, number):

* AND (Araki et al. CCS 2016, section 2.2): z_i = (x_i & y_i) ^ (x_i & y_{i+1}) ^ (x_{i+1} & y_i)
  ^ alpha_i with alpha_i from ``party.mpc.keys.ZeroShares`` for (batch, number); the payload is
  z_i (all gates of the layer, C order, little-endian words); the result is (z_i, z_{i+1}).
* Opening: the payload is the second share x_{i+1}; x = x_i ^ x_{i+1} ^ x_{i+2}.

Adder trees (``compress``): columns of bits of equal weight are reduced by layers of full adders
(Wallace): in each layer every column with m >= 3 bits uses f = m // 3 adders on its first 3f bits
(a = bits [0, f), b = [f, 2f), c = [2f, 3f)); a full adder costs one AND:
carry = ((a ^ c) & (b ^ c)) ^ c, sum = a ^ b ^ c; all adders of a layer share one round (their
(a ^ c, b ^ c) inputs concatenated in column order). The new column k is [sums of k, untouched
bits of k, carries from k - 1]. When no column has 3 bits a parallel-prefix adder adds the remaining
two rows with a Kogge-Stone carry tree: a_k, b_k are the first and second bit of column k (0
where absent), p = a ^ b, g = a & b for k < width - 1 (one round); then for d = 1, 2, 4, ... while
d < width - 1 one round computes, for k >= d, G_k ^= P_k & G_{k-d} and, when a later layer needs
it, P_k &= P_{k-d} (payload: the G products for k = d .. width-2, then the P products); the sum
bit k is p_k ^ G_{k-1}. Columns at or above ``width`` are dropped (arithmetic mod 2^width).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import dataclass

import numpy as np

from party.mpc._numba_gates import and_share_range, fa_and, fa_finish
from party.mpc.errors import MpcError
from party.mpc.keys import ZeroShares
from party.protocol.threads import run_split

Pair = tuple[np.ndarray, np.ndarray]
_U64 = np.dtype("<u8")
ALL_ONES = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class Round:
    """One message of CP i to CP (i + 2) % 3: batch, round number within the batch, payload
    (a view of the gates' array with ``Gates.payload_views``)."""

    batch: int
    number: int
    payload: bytes | memoryview

    def __repr__(self) -> str:  # never print shares
        return f"Round(batch={self.batch}, number={self.number}, bytes={len(self.payload)})"


Steps = Generator[Round, bytes, Pair]


def checked_reply(rnd: Round, incoming: object) -> bytes | bytearray | memoryview:
    """The reply to ``rnd``: bytes of the same length (the other side's payload of the round),
    else MpcError."""
    if not isinstance(incoming, bytes | bytearray | memoryview) or len(incoming) != len(
        rnd.payload
    ):
        got = len(incoming) if isinstance(incoming, bytes | bytearray | memoryview) else None
        raise MpcError(
            f"round {rnd.number} of batch {rnd.batch}: expected a payload of "
            f"{len(rnd.payload)} bytes, got {got}"
        )
    return incoming


class Gates:
    """Gate evaluation for CP ``index`` with its zero-share source; counts rounds, ANDs, bytes.

    ``workers`` threads share every layer's compiled kernels (``party.protocol.threads``): the same
    shares and payloads as one thread. ``payload_views``: each round's payload is a view of the
    array it sends, not a copy, for a consumer done with it before it sends the reply (a cluster
    worker copying it into a round file: ``party.cluster_mpc``).
    """

    def __init__(
        self, index: int, zero: ZeroShares, workers: int = 1, *, payload_views: bool = False
    ) -> None:
        self.index = index
        self._zero = zero
        self.workers = workers
        self.payload_views = payload_views
        self.batch = 0
        self.number = 0
        self.rounds = 0
        self.and_words = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.busy_seconds = 0.0  # computing between rounds (not waiting for a payload)
        self._resumed = time.perf_counter()

    def start_batch(self, batch: int) -> None:
        self.batch = batch
        self.number = 0
        self._resumed = time.perf_counter()

    def _exchange(self, payload: np.ndarray) -> Generator[Round, bytes, np.ndarray]:
        """Send ``payload`` (C-contiguous uint64), receive the same shape from the other side."""
        data = payload.data.cast("B") if self.payload_views else payload.tobytes()
        self.busy_seconds += time.perf_counter() - self._resumed
        rnd = Round(self.batch, self.number, data)
        incoming = checked_reply(rnd, (yield rnd))
        self._resumed = time.perf_counter()
        self.number += 1
        self.rounds += 1
        self.bytes_sent += len(data)
        self.bytes_received += len(data)
        return np.frombuffer(incoming, dtype=_U64).reshape(payload.shape)

    def and_fill(
        self,
        shape: tuple[int, ...],
        fill: Callable[[np.ndarray, np.ndarray, np.ndarray], None],
    ) -> Steps:
        """One AND round; ``fill(ka, kb, out)`` writes the local shares (alpha = ka ^ kb) to out."""
        words = int(np.prod(shape))
        ka, kb = self._zero.streams(self.batch, self.number, words)
        z = np.empty(shape, dtype=np.uint64)
        fill(ka, kb, z)
        self.and_words += words
        nxt = yield from self._exchange(z)
        return z, nxt

    def and_(self, x: Pair, y: Pair) -> Steps:
        """Shares of x & y (any equal shapes; inputs may be strided views)."""
        shape = x[0].shape
        three = _three_d(shape)

        def fill(ka: np.ndarray, kb: np.ndarray, z: np.ndarray) -> None:
            x0, x1, y0, y1 = (a.reshape(three) for a in (x[0], x[1], y[0], y[1]))
            out = z.reshape(three)

            def part(lo: int, hi: int) -> None:
                and_share_range(x0, x1, y0, y1, ka, kb, out, lo, hi)

            run_split(self.workers, three[2], part, words=z.size)

        return (yield from self.and_fill(shape, fill))

    def open(self, x: Pair) -> Generator[Round, bytes, np.ndarray]:
        """The plain value of a shared array (every CP learns it)."""
        third = yield from self._exchange(np.ascontiguousarray(x[1]))
        return x[0] ^ x[1] ^ third

    def not_(self, x: Pair) -> Pair:
        """Shares of ~x: share 0 is flipped (CP 0's first share, CP 2's second)."""
        if self.index == 0:
            return ~x[0], x[1]
        if self.index == 2:
            return x[0], ~x[1]
        return x

    def compress(
        self, columns: list[Pair], width: int, lanes: int
    ) -> Generator[Round, bytes, Pair]:
        """Shares of the sum of all bits, mod 2^width, as (width, lanes) rows of bits.

        ``columns[k]`` stacks the (m_k, lanes) bits of weight 2^k (m_k may be 0).
        """
        cols = yield from self.wallace(columns, width, lanes)
        return (yield from self._prefix_add(cols, width, lanes))

    def wallace(
        self, columns: list[Pair], width: int, lanes: int
    ) -> Generator[Round, bytes, list[Pair]]:
        """Full-adder layers until no column (< width) has 3 bits; same sum mod 2^width."""
        cols = [(c[0], c[1]) for c in columns[:width]]
        cols += [_empty(lanes)] * (width - len(cols))
        while any(c[0].shape[0] >= 3 for c in cols):
            cols = yield from self._wallace_layer(cols, width, lanes)
        return cols

    def _wallace_layer(
        self, cols: list[Pair], width: int, lanes: int
    ) -> Generator[Round, bytes, list[Pair]]:
        """One layer of full adders over every column with >= 3 bits (one round)."""
        adders = [c[0].shape[0] // 3 for c in cols]
        offsets = np.concatenate([[0], np.cumsum(adders)]).astype(int).tolist()

        def fill(ka: np.ndarray, kb: np.ndarray, z: np.ndarray) -> None:
            def part(lo: int, hi: int) -> None:
                for k, f in enumerate(adders):
                    if f:
                        o = offsets[k]
                        zk = z[o : o + f]
                        fa_and(
                            cols[k][0], cols[k][1], f, ka[o * lanes :], kb[o * lanes :], zk, lo, hi
                        )

            run_split(self.workers, lanes, part, words=z.size)

        z = yield from self.and_fill((offsets[-1], lanes), fill)
        sizes = [
            cols[k][0].shape[0] - 2 * adders[k] + (adders[k - 1] if k else 0) for k in range(width)
        ]
        new = [
            (np.empty((m, lanes), dtype=np.uint64), np.empty((m, lanes), dtype=np.uint64))
            for m in sizes
        ]
        for k, f in enumerate(adders):
            c0, c1 = cols[k]
            m = c0.shape[0]
            n0, n1 = new[k]
            n0[f : m - 2 * f] = c0[3 * f :]
            n1[f : m - 2 * f] = c1[3 * f :]

        def finish(lo: int, hi: int) -> None:
            for k, f in enumerate(adders):
                if not f:
                    continue
                c0, c1 = cols[k]
                n0, n1 = new[k]
                o = offsets[k]
                carry = k + 1 < width
                nxt = new[k + 1] if carry else new[k]
                fa_finish(
                    c0,
                    c1,
                    f,
                    z[0][o : o + f],
                    z[1][o : o + f],
                    n0[:f],
                    n1[:f],
                    nxt[0][nxt[0].shape[0] - f :],
                    nxt[1][nxt[1].shape[0] - f :],
                    carry,
                    lo,
                    hi,
                )

        run_split(self.workers, lanes, finish, words=2 * z[0].size)
        return new

    def _prefix_add(
        self, cols: list[Pair], width: int, lanes: int
    ) -> Generator[Round, bytes, Pair]:
        """Add the (at most) two rows left per column with a Kogge-Stone carry tree."""
        zeros = np.zeros((width, lanes), dtype=np.uint64)
        a = (zeros.copy(), zeros.copy())
        b = (zeros.copy(), zeros.copy())
        for k, (c0, c1) in enumerate(cols):
            if c0.shape[0] > 2:
                raise MpcError("internal: adder column has more than 2 bits after reduction")
            if c0.shape[0] >= 1:
                a[0][k], a[1][k] = c0[0], c1[0]
            if c0.shape[0] == 2:
                b[0][k], b[1][k] = c0[1], c1[1]
        p = (a[0] ^ b[0], a[1] ^ b[1])  # propagate
        if width == 1:
            return p
        top = width - 1  # carries into columns 1 .. width-1 need groups ending at 0 .. width-2
        g = yield from self.and_((a[0][:top], a[1][:top]), (b[0][:top], b[1][:top]))
        big_g = (g[0].copy(), g[1].copy())
        big_p = (p[0][:top].copy(), p[1][:top].copy())
        d = 1
        while d < top:
            # G_k ^= P_k & G_{k-d} and (if a later layer needs it) P_k &= P_{k-d}, for k >= d
            more = 2 * d < top
            x = (big_p[0][d:], big_p[1][d:])
            y = (big_g[0][: top - d], big_g[1][: top - d])
            if more:
                x = (np.concatenate([x[0], big_p[0][d:]]), np.concatenate([x[1], big_p[1][d:]]))
                y = (
                    np.concatenate([y[0], big_p[0][: top - d]]),
                    np.concatenate([y[1], big_p[1][: top - d]]),
                )
            z = yield from self.and_(x, y)
            n = top - d
            big_g[0][d:] ^= z[0][:n]
            big_g[1][d:] ^= z[1][:n]
            if more:
                big_p = (
                    np.concatenate([big_p[0][:d], z[0][n:]]),
                    np.concatenate([big_p[1][:d], z[1][n:]]),
                )
            d *= 2
        out = (p[0].copy(), p[1].copy())
        out[0][1:] ^= big_g[0]
        out[1][1:] ^= big_g[1]
        return out


def _three_d(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 3:
        return (shape[0], shape[1], shape[2])
    if len(shape) == 2:
        return (1, shape[0], shape[1])
    if len(shape) == 1:
        return (1, 1, shape[0])
    raise MpcError("internal: AND inputs must have 1 to 3 dimensions")


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _empty(lanes: int) -> Pair:
    return np.zeros((0, lanes), dtype=np.uint64), np.zeros((0, lanes), dtype=np.uint64)
