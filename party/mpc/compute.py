"""ComputeParty: one compute party's side of an mpc3 run, as a generator of rounds.

Driving it (the transport is the driver's business):

    cp = ComputeParty(i, params, keys)
    for share in shares_for_i: cp.receive_input(share)      # one per data party
    gen = cp.run(); incoming = None
    try:
        while True:
            rnd = gen.send(incoming)                       # first send(None) starts it
            send rnd.payload to CP (i + 2) % 3; incoming = payload CP (i + 1) % 3 sent for
            the same (rnd.batch, rnd.number)
    except StopIteration as stop: outcome = stop.value    # MpcOutcome

The batches' rounds interleave in windows of ``BATCHES_IN_FLIGHT`` batches (``party.mpc.flight``),
evaluated in this process (``LocalCircuits``) or where ``circuits`` says (``party.cluster_mpc``:
the party's Dask workers). The circuit per batch of candidate sets (``party.mpc.candidates``;
the batches are consecutive ranges of sets, as few as hold at most ``batch_sets`` each and of
even size (``batch_ranges``), each padded with all-zero sets to a multiple of 64):

1. P-way AND of the filters, results word-major: (words, n) per share, word m of set r at [m, r]
   (each word holds 64 filter bits of one set). Layer by layer the operands are paired in order
   (0 & 1, 2 & 3, ...; an odd last operand passes on), ceil(log2 P) rounds; the payload of a layer
   is its (pairs, words, n) AND shares in C order. The first layer gathers the data parties' rows
   by index (``_numba_gates.and_word_major``); padding sets are all-zero rows.
2. popcount c in cw = bit_length(l) bits: full-adder layers on whole words first (all bits of the
   (words, n) matrix have weight 1; ``Gates.wallace`` with n word-lanes), until every weight has at
   most 2 word rows; each such row is transposed (``rows_to_lanes``) into 64 bit-wires of its
   weight in lanes (wire bit k of lane word g = set 64 g + k); ``Gates.compress`` finishes.
3. S = K*c + sum_j t_j mod 2^w, with t_j the data parties' count terms (``party.mpc.inputs``) in
   lanes; column k holds the bits c_{k-e} for e in the set bits of K (ascending), then t_j bit k for
   j = 0..P-1. Match bit = NOT top bit of S (``party.mpc.threshold``); with s_t = 0 every set matches
   and no round is spent on it.
4. Rounds: open the match bits (payload: lanes words); then open, for the matched sets of the batch
   only (ascending), v = c | S << cw as one uint64 each (payload may be empty). Nothing else is
   opened. x = (K*c - S) / N; Dice = ``party.protocol.classify.dice(P, c, x)``.

After the last batch the matched sets are sorted by pseudonym tuple, resolved one-to-one when asked
(``greedy_one_to_one``) and numbered 1..k: the same ``Classification`` at all three compute parties.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass

import numpy as np

from party.encoding.bits import words_for
from party.mpc._numba_gates import and_word_major, lanes_to_values_range, rows_to_lanes_range
from party.mpc.candidates import candidate_sets
from party.mpc.errors import MpcCancelled, MpcError
from party.mpc.flight import (
    BATCHES_IN_FLIGHT,
    BatchJob,
    BatchResult,
    Circuits,
    GateCounts,
    LocalCircuits,
    run_window,
    windows,
)
from party.mpc.gates import Gates, Pair, Round
from party.mpc.inputs import InputShare, validate_input_share
from party.mpc.keys import ComputeKeys, ZeroShares
from party.mpc.threshold import ThresholdTest, run_threshold_test
from party.protocol.classify import Classification, dice, greedy_one_to_one
from party.protocol.errors import MemoryBudgetError
from party.protocol.params import ProtocolParameters
from party.protocol.threads import run_split

#: Makes what evaluates a compute party's batches: ``circuits(party, inputs)``.
CircuitsFactory = Callable[["ComputeParty", list[InputShare]], Circuits]

__all__ = [
    "BATCH_BYTES",
    "CircuitsFactory",
    "ComputeParty",
    "MpcOutcome",
    "MpcStats",
    "Round",
    "batch_ranges",
    "batch_sets_for",
]

#: Working memory one batch is sized for (a function of P and l only; with the number of sets,
#: which every CP has, it fixes the batches, so all CPs cut alike); a
#: window (``party.mpc.flight``) holds ``BATCHES_IN_FLIGHT`` of them.
BATCH_BYTES = 128 * 2**20


def batch_sets_for(parties: int, filter_bits: int) -> int:
    """Candidate sets per batch: a multiple of 64 that fits BATCH_BYTES (depends on P and l only)."""
    per_set = batch_bytes_per_set(parties, filter_bits)
    return max(64, (BATCH_BYTES // per_set) // 64 * 64)


def batch_ranges(total: int, batch_sets: int) -> list[tuple[int, int]]:
    """The [lo, hi) sets of each batch of ``total`` candidate sets: as few batches as hold at
    most ``batch_sets`` (a multiple of 64) each, all of one size, a multiple of 64, but the last,
    which may be smaller. Even batches keep a window's workers about equally busy: with full
    batches and a short last one, the worker given no short batch had 5% more work (3 x 400k,
    target any: 24 batches, three of them short, on 4 workers)."""
    if total <= 0:
        return []
    count = -(-total // batch_sets)
    even = -(-total // count)
    size = -(-even // 64) * 64  # <= batch_sets, a multiple of 64
    return [(lo, min(lo + size, total)) for lo in range(0, total, size)]


def batch_bytes_per_set(parties: int, filter_bits: int) -> int:
    """Working memory of one candidate set (of ``parties`` records) in a batch of the circuit."""
    return 8 * words_for(filter_bits) * (2 * parties + 10) + 64


@dataclass(frozen=True)
class MpcStats:
    """What one compute party did: sets, batches, rounds, AND gates (lanes), bytes, seconds
    (``gate_seconds``: computing the circuit's layers, not waiting for rounds, summed over the
    batches: more than ``seconds`` can hold when a window's batches ran side by side)."""

    candidate_sets: int
    batches: int
    rounds: int
    and_gates: int
    bytes_sent: int
    bytes_received: int
    seconds: float
    gate_seconds: float = 0.0


@dataclass(frozen=True)
class MpcOutcome:
    """The classification (identical at the three CPs) and this CP's statistics."""

    classification: Classification
    stats: MpcStats


class ComputeParty:
    """Compute party ``index`` (0, 1, 2) of one mpc3 run; see the module docstring.

    ``batch_sets`` overrides the batch size (a positive multiple of 64; all three CPs must use the
    same value); ``memory_budget_bytes`` (default: the parameters') bounds the candidate list and a
    window of batches' working memory; ``workers`` threads share every layer of the circuit (the node's
    ``[limits] workers``): the same payloads and outcome as one thread. ``circuits(party,
    inputs)`` makes what evaluates the batches of a window (``party.mpc.flight``; default
    ``LocalCircuits``: this process), the same payloads and outcome wherever they run;
    ``payload_views``: its gates' ``payload_views``.
    """

    def __init__(
        self,
        index: int,
        params: ProtocolParameters,
        keys: ComputeKeys,
        *,
        memory_budget_bytes: int | None = None,
        batch_sets: int | None = None,
        workers: int = 1,
        circuits: CircuitsFactory | None = None,
        payload_views: bool = False,
    ) -> None:
        if isinstance(index, bool) or index not in (0, 1, 2):
            raise MpcError(f"compute party index must be 0, 1 or 2, got {index!r}")
        if not isinstance(params, ProtocolParameters):
            raise MpcError("params must be ProtocolParameters")
        if params.mode != "mpc3":
            raise MpcError(f"parameters are for mode {params.mode!r}, not 'mpc3'")
        if not isinstance(keys, ComputeKeys):
            raise MpcError("keys must be ComputeKeys")
        self.index = index
        self.params = params
        self.parties = params.party_count
        self.test: ThresholdTest = run_threshold_test(params)  # P-way sets, or pairs (target any)
        if self.test.count_bits + self.test.width > 64:
            raise MpcError("filter length and threshold need more than 64 opened bits per set")
        self.budget = (
            params.memory_budget_bytes if memory_budget_bytes is None else memory_budget_bytes
        )
        if batch_sets is None:
            batch_sets = batch_sets_for(self.test.parties, params.filter_bits)
        if isinstance(batch_sets, bool) or batch_sets < 64 or batch_sets % 64:
            raise MpcError(f"batch_sets must be a positive multiple of 64, got {batch_sets}")
        self.batch_sets = batch_sets
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise MpcError(f"workers must be a positive integer, got {workers!r}")
        self.workers = workers
        self.payload_views = payload_views  # ``Gates.payload_views``
        self.keys = keys
        self._zero = ZeroShares(keys, workers)
        self._circuits = circuits
        self._counts = GateCounts()
        self._inputs: dict[int, InputShare] = {}
        self._digest_width: int | None = None
        self._ran = False

    def receive_input(self, share: InputShare) -> None:
        """Validate and keep one data party's input share (one per data party)."""
        if self._ran:
            raise MpcError("input shares arrived after the computation started")
        validate_input_share(
            share,
            target=self.index,
            parties=self.parties,
            filter_bits=self.params.filter_bits,
            digest_width=self._digest_width,
            count_bits=self.test.width,
        )
        src = int(share.source)
        if src in self._inputs:
            raise MpcError(f"compute party {self.index} already has the input of party {src}")
        self._inputs[src] = share
        self._digest_width = int(share.block_digests.shape[1])

    def run(
        self,
        progress: Callable[[int, int], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> Generator[Round, bytes, MpcOutcome]:
        """Evaluate the circuit on every candidate set (see the module docstring)."""
        t0 = time.perf_counter()
        inputs = self._take_inputs()
        # enumerated sets with duplicates (P int64 positions and a c from the blocks kernel) and
        # the 8-byte key and position of the de-duplication
        per_set = self.parties * 8 + 24
        sets = candidate_sets(
            [s.pseudonyms for s in inputs],
            [s.block_digests for s in inputs],
            self.params.max_block_size,
            max_sets=self.budget // per_set,
            workers=self.workers,
        )
        total = int(sets.shape[0])
        self._check_budget(sets.nbytes, total)
        matched_rows: list[np.ndarray] = []
        matched_c: list[np.ndarray] = []
        matched_x: list[np.ndarray] = []
        batches = done = 0
        if progress is not None:
            progress(0, total)
        sources = tuple(range(self.parties))
        jobs = (
            BatchJob(batch, sources, sets[lo:hi])
            for batch, (lo, hi) in enumerate(batch_ranges(total, self.batch_sets))
        )

        def take(job: BatchJob, result: BatchResult) -> None:
            nonlocal batches, done
            matched_rows.append(job.rows[result.hit])
            matched_c.append(result.common)
            matched_x.append(result.total)
            batches += 1
            done += job.rows.shape[0]
            if progress is not None:
                progress(done, total)

        yield from self._evaluate(inputs, jobs, take, cancel)
        classification = self._classify(inputs, matched_rows, matched_c, matched_x, total)
        return MpcOutcome(classification, self._stats(total, batches, t0))

    def _evaluate(
        self,
        inputs: list[InputShare],
        jobs: Iterable[BatchJob],
        take: Callable[[BatchJob, BatchResult], None],
        cancel: threading.Event | None,
    ) -> Generator[Round, bytes, None]:
        """Every job's circuit, window by window (``party.mpc.flight``); ``take(job, result)``
        in batch order as each window ends."""
        circuits = (
            LocalCircuits(self, inputs) if self._circuits is None else self._circuits(self, inputs)
        )
        try:
            for window in windows(jobs, BATCHES_IN_FLIGHT):
                if cancel is not None and cancel.is_set():
                    raise MpcCancelled("computation cancelled")
                results = yield from run_window(circuits, window)
                for job, result in zip(window, results, strict=True):
                    self._counts += result.counts
                    take(job, result)
        finally:
            circuits.close()

    def new_gates(self, batch: int) -> Gates:
        """The gates of one batch of this compute party (sharing its zero-share source)."""
        gates = Gates(self.index, self._zero, self.workers, payload_views=self.payload_views)
        gates.start_batch(batch)
        return gates

    def _take_inputs(self) -> list[InputShare]:
        """Start the run: every data party's input share, by source (the CP keeps none of them)."""
        missing = [j for j in range(self.parties) if j not in self._inputs]
        if missing:
            raise MpcError(f"compute party {self.index} is missing the inputs of parties {missing}")
        if self._ran:
            raise MpcError("run already started for this compute party")
        self._ran = True
        inputs = [self._inputs[j] for j in range(self.parties)]
        self._inputs.clear()  # the run's data is freed with the generator, also on failure
        return inputs

    def _check_budget(self, candidate_bytes: int, total: int) -> None:
        """MemoryBudgetError unless the candidate list and one window of batches in flight fit
        the memory budget."""
        window = sum(
            -(-min(self.batch_sets, total - lo) // 64) * 64
            for lo in range(0, min(total, BATCHES_IN_FLIGHT * self.batch_sets), self.batch_sets)
        )
        per_set = batch_bytes_per_set(self.test.parties, self.params.filter_bits)
        need = candidate_bytes + window * per_set
        if need > self.budget:
            raise MemoryBudgetError(
                f"compute party {self.index}: {total} candidates and the batches in flight need about "
                f"{need // 2**20 + 1} MiB, more than memory_budget_bytes={self.budget}; set "
                "max_block_size, use finer blocking, or raise the budget"
            )

    def _stats(self, total: int, batches: int, t0: float) -> MpcStats:
        g = self._counts
        return MpcStats(
            candidate_sets=total,
            batches=batches,
            rounds=g.rounds,
            and_gates=64 * g.and_words,
            bytes_sent=g.bytes_sent,
            bytes_received=g.bytes_received,
            seconds=time.perf_counter() - t0,
            gate_seconds=g.busy_seconds,
        )

    # ----------------------------------------------------------------- one batch
    def batch_circuit(
        self, inputs: list[InputShare], rows: np.ndarray, g: Gates
    ) -> Generator[Round, bytes, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """One batch's circuit on ``rows`` of ``inputs`` with gates ``g`` (module docstring,
        steps 1-4): the match bits of its sets, c and x of the matched ones."""
        test = self.test
        n = rows.shape[0]
        padded = -(-n // 64) * 64
        lanes = padded // 64
        l_bits = self.params.filter_bits
        words = words_for(l_bits)
        # 1. P-way AND tree, results word-major (words, sets): operands 0 & 1, 2 & 3, ... (an odd
        # last one passes on). An operand is (share, share, row index, gathered): gathered from a
        # data party's (records, words) shares (index -1: the all-zero padding sets), or a
        # previous layer's (words, sets) result.
        operands: list[tuple[np.ndarray, np.ndarray, np.ndarray, bool]] = []
        for j, share in enumerate(inputs):
            idx = np.full(padded, -1, dtype=np.int64)
            idx[:n] = rows[:, j]
            operands.append((share.filters[0], share.filters[1], idx, True))
        while len(operands) > 1:
            pairs = len(operands) // 2
            layer = operands

            def fill(
                ka: np.ndarray, kb: np.ndarray, z: np.ndarray, layer=layer, pairs=pairs
            ) -> None:
                step = padded * words

                def part(lo: int, hi: int) -> None:
                    for q in range(pairs):
                        x0, x1, ix, xg = layer[2 * q]
                        y0, y1, iy, yg = layer[2 * q + 1]
                        o = q * step
                        and_word_major(x0, x1, ix, xg, y0, y1, iy, yg, ka[o:], kb[o:], z[q], lo, hi)

                run_split(g.workers, padded, part, words=z.size, align=8)

            z = yield from g.and_fill((pairs, words, padded), fill)
            nxt = [(z[0][q], z[1][q], operands[0][2], False) for q in range(pairs)]
            if len(operands) % 2:
                nxt.append(operands[-1])
            operands = nxt
        both = (operands[0][0], operands[0][1])
        del operands
        # 2. popcount c: first full adders on whole words (each word of the (words, sets) matrix
        # holds 64 bits of one set, all of weight 1), then the <= 2 words left per weight are
        # transposed to lanes and the adder tree finishes there
        cw = test.count_bits
        word_cols = yield from g.wallace([both], cw, padded)
        del both
        srcs = [src for col in word_cols for src in col]
        outs = [np.empty((64 * src.shape[0], lanes), dtype=np.uint64) for src in srcs]

        def to_lanes(lo: int, hi: int) -> None:
            for src, out in zip(srcs, outs, strict=True):
                for r in range(src.shape[0]):
                    rows_to_lanes_range(src[r][:, None], out[64 * r : 64 * (r + 1)], lo, hi)

        run_split(g.workers, lanes, to_lanes, words=sum(s.size for s in srcs))
        bit_cols: list[Pair] = [(outs[2 * k], outs[2 * k + 1]) for k in range(len(word_cols))]
        del word_cols
        c = yield from g.compress(bit_cols, cw, lanes)
        del bit_cols
        # 3. S = K*c + sum of count terms, mod 2^w
        w = test.width
        vals = [np.zeros((padded, 1), dtype=np.uint64) for _ in range(2 * len(inputs))]
        for j, share in enumerate(inputs):
            for s in range(2):
                np.take(share.counts[s], rows[:, j], out=vals[2 * j + s][:n, 0])
        touts = [np.empty((w, lanes), dtype=np.uint64) for _ in vals]

        def terms_to_lanes(lo: int, hi: int) -> None:
            for v, out in zip(vals, touts, strict=True):
                rows_to_lanes_range(v, out, lo, hi)

        run_split(g.workers, lanes, terms_to_lanes, words=len(vals) * padded)
        terms = [(touts[2 * j], touts[2 * j + 1]) for j in range(len(inputs))]
        k_bits = [e for e in range(test.multiplier.bit_length()) if test.multiplier >> e & 1]
        columns: list[Pair] = []
        for k in range(w):
            parts0 = [c[0][k - e] for e in k_bits if 0 <= k - e < cw]
            parts1 = [c[1][k - e] for e in k_bits if 0 <= k - e < cw]
            parts0 += [t[0][k] for t in terms]
            parts1 += [t[1][k] for t in terms]
            columns.append((np.stack(parts0), np.stack(parts1)))
        s_bits = yield from g.compress(columns, w, lanes)
        # 4. open the match bits, then c and S of the matched sets
        if test.always:
            hit = np.ones(n, dtype=bool)
        else:
            match = g.not_((s_bits[0][w - 1 : w], s_bits[1][w - 1 : w]))
            opened = yield from g.open(match)
            hit = _lane_bits(opened[0], n)
        lane_rows = [np.concatenate([c[s], s_bits[s]]) for s in range(2)]
        plains = [np.zeros(padded, dtype=np.uint64) for _ in range(2)]

        def to_values(lo: int, hi: int) -> None:
            for src, v in zip(lane_rows, plains, strict=True):
                lanes_to_values_range(src, v, lo, hi)

        run_split(g.workers, lanes, to_values, words=2 * padded)
        values = [v[:n][hit] for v in plains]
        plain = yield from g.open((values[0], values[1]))
        common = (plain & np.uint64((1 << cw) - 1)).astype(np.int64)
        s_val = (plain >> np.uint64(cw)).astype(np.int64)
        return hit, common, self._totals(common, s_val)

    def _totals(self, common: np.ndarray, s_val: np.ndarray) -> np.ndarray:
        """x per matched set from the opened c and S (raises MpcError if impossible)."""
        test = self.test
        w = test.width
        signed = np.where(s_val >> (w - 1) != 0, s_val - (1 << w), s_val)
        num = test.multiplier * common - signed
        if np.any(num < 0) or np.any(num % test.numerator):
            raise MpcError("opened values are inconsistent: a round payload was altered")
        x = num // test.numerator
        if np.any(x > test.parties * test.filter_bits) or np.any(test.parties * common > x):
            raise MpcError("opened values are out of range: a round payload was altered")
        return x

    # ----------------------------------------------------------------- classification
    def _classify(
        self,
        inputs: list[InputShare],
        rows: list[np.ndarray],
        common: list[np.ndarray],
        total: list[np.ndarray],
        sets: int,
    ) -> Classification:
        p = self.parties
        r = np.concatenate(rows) if rows else np.zeros((0, p), dtype=np.int64)
        c = np.concatenate(common) if common else np.zeros(0, dtype=np.int64)
        x = np.concatenate(total) if total else np.zeros(0, dtype=np.int64)
        cand = np.empty(r.shape, dtype=np.uint64)
        for j in range(p):
            cand[:, j] = inputs[j].pseudonyms[r[:, j]]
        sim = dice(p, c, x)
        if np.any(sim < self.params.match_threshold):
            raise MpcError("a matched set has Dice below s_t: the computation is inconsistent")
        order = np.lexsort(cand.T[::-1]) if cand.shape[0] else np.zeros(0, dtype=np.int64)
        cand, sim = cand[order], sim[order]
        chosen = np.arange(cand.shape[0])
        if self.params.one_to_one and cand.shape[0]:
            chosen = greedy_one_to_one(cand, sim)
        return Classification(
            candidates=cand[chosen],
            similarities=sim[chosen],
            linkage_ids=np.arange(1, chosen.size + 1, dtype=np.uint64),
            sets_summed=sets,
            above_threshold=int(cand.shape[0]),
            matches=int(chosen.size),
        )


def _lane_bits(words: np.ndarray, n: int) -> np.ndarray:
    """(n,) bool: bit k of word g is set n = 64 g + k."""
    as_bytes = np.ascontiguousarray(words, dtype=np.dtype("<u8")).view(np.uint8)
    return np.unpackbits(as_bytes, bitorder="little")[:n].astype(bool)
