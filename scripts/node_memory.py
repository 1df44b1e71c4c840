"""Where one party's memory goes in a run of target any (segment mode), structure by structure.

Runs the whole protocol of P in-process PairEngines (the node's engine, steps in the node's order:
blocks, segment exchange, comparison, ring, groups, results) on generated people (the party CSVs of
a ``simulate.py`` results folder, or generated here with ``party.synthetic.subsets``, as
simulate.py's target any does), encoded with the shipped schema, and prints after each step:

- party 0's accounted resident structures (``PartyEngine.resident_bytes``: what the engine
  reserves on the node's budget) by name, in MiB;
- the step's peak of traced Python/numpy allocations above what was live before it (tracemalloc;
  the comparison is run for party 0 alone, so its row is one party's comparison working set);
- the process's resident set after the step (RSS, after glibc's malloc_trim) and its peak so far.

Per-peer buffers (a co-party makes this node hold them): the received segments (pseudonyms, block
digests, one segment per record) and their block positions, until the comparison ends; ring and
results messages are streamed through the spilling stores.

Usage: ``.venv/bin/python scripts/node_memory.py --records 300000 [--data results/sim-.../data]
[--budget-mib 1024]`` (encodings are cached under .bench/node_memory).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from party.node.heap import peak_rss_bytes, rss_bytes, trim  # noqa: E402

BENCH = ROOT / ".bench" / "node_memory"
SECRET = b"node-memory-linkage-secret-0123456789abcdef-0123456789abc"
MIB = 2**20


def tables(args: argparse.Namespace) -> list:  # type: ignore[type-arg]
    """The parties' encodings (cached)."""
    from party.encoding.encoder import Encoder
    from party.encoding.store import load_encodings, save_encodings
    from party.synthetic.simulation import load_schema_for

    folder = BENCH / (
        f"data-{Path(args.data).resolve().parent.name}"
        if args.data
        else f"p{args.parties}-n{args.records}-s{args.seed}"
    )
    paths = [folder / f"party-{j}.enc" for j in range(args.parties)]
    if not all(p.exists() for p in paths):
        folder.mkdir(parents=True, exist_ok=True)
        if args.data:
            csvs = [Path(args.data) / f"party-{j}.csv" for j in range(args.parties)]
        else:
            from party.synthetic.generator import write_dataset
            from party.synthetic.subsets import generate_subsets

            ds = generate_subsets(args.parties, args.records, seed=args.seed)
            csvs = write_dataset(ds, folder / "data")
        schema, _, _ = load_schema_for(None, args.parties)
        for csv_path, enc_path in zip(csvs, paths, strict=True):
            records, _ = Encoder(schema, SECRET).encode_csv(csv_path, id_column="rec_id")
            save_encodings(enc_path, records, schema.digest())
    return [load_encodings(p)[0] for p in paths]


class Sampler:
    """Samples the process's RSS every 20 ms; ``peak`` is the highest since the last reset."""

    def __init__(self) -> None:
        self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, rss_bytes())

    def reset(self) -> None:
        self.peak = rss_bytes()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--data", default=None, help="folder with party-<i>.csv (e.g. a simulate.py run's data)"
    )
    ap.add_argument("--budget-mib", type=int, default=1024)
    ap.add_argument("--s-t", type=float, default=0.8)
    args = ap.parse_args()
    if args.parties < 2 or args.records < 1 or args.budget_mib < 1:
        ap.error("--parties must be at least 2, --records and --budget-mib at least 1")
    if not 0.0 < args.s_t <= 1.0:
        ap.error("--s-t must be in (0, 1]")

    from party.protocol.driver import ring_in_process
    from party.protocol.kernel import warm_up
    from party.protocol.pair_engine import PairEngine
    from party.protocol.params import ProtocolParameters
    from party.protocol.spill import LocalGauge

    tabs = tables(args)
    warm_up()
    p = args.parties
    params = ProtocolParameters(
        parties=tuple(f"party-{j}" for j in range(p)),
        filter_bits=tabs[0].filter_bits,
        match_threshold=args.s_t,
        segment_threshold=round(args.s_t - 0.1, 6),
        memory_budget_bytes=args.budget_mib * MIB,
        target="any",
    )
    # each engine charges a gauge of the node's budget, as the node's buffer account does
    accounts = [LocalGauge(args.budget_mib * MIB) for _ in range(p)]
    sampler = Sampler()
    tracemalloc.start()
    rows: list[tuple[str, float, dict[str, int], int, int, int]] = []
    engines: list[PairEngine] = []

    def step(name: str, fn) -> object:  # type: ignore[no-untyped-def]
        trim()
        sampler.reset()
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        t0 = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        trim()
        held = engines[0].resident_bytes() if engines else {}
        rows.append((name, seconds, held, peak - base, rss_bytes(), sampler.peak))
        return out

    def make() -> None:
        engines.extend(
            PairEngine(i, params, tabs[i], memory=accounts[i], workers=2) for i in range(p)
        )

    step("engines (encodings loaded)", make)

    def blocks() -> None:
        common = engines[0].common_of([e.block_digests() for e in engines])
        for e in engines:
            e.set_common_blocks(common)

    step("common blocks", blocks)

    def exchange() -> None:
        for e in engines:
            for share in e.outgoing_shares():
                nbytes = (
                    share.pseudonyms.nbytes + share.block_digests.nbytes + share.segments.nbytes
                )
                accounts[share.target].try_reserve(nbytes)  # as the node's receiver does
                engines[share.target].receive_share(share, nbytes)

    step("segment exchange", exchange)
    stats = step("comparison, party 0 alone", lambda: engines[0].compare())
    step("comparison, parties 1..P-1", lambda: [e.compare() for e in engines[1:]])

    summed, matched, _ = step(  # type: ignore[misc]
        "ring, Dice and groups (party 0 solves)", lambda: ring_in_process(engines)
    )

    def results() -> int:
        count = sum(1 for _ in engines[0].resolved_rows(engines[0].result_chunks(0)))
        for e in engines[1:]:
            for part in engines[0].result_chunks(e.index):
                e.receive_results_chunk(part)
            e.results_end()
            count += sum(1 for _ in e.resolved_rows(e.received_results()))
        return count

    step("results delivered and resolved", results)
    for e in engines:
        e.close()
    step("run closed", lambda: None)
    sampler.stop()

    print(
        f"P={p} x {args.records:,} records, budget {args.budget_mib} MiB per party, target any, "
        f"segments; party 0: {stats.candidate_sets:,} candidate pairs, "  # type: ignore[attr-defined]
        f"{stats.survivors:,} survivors; {summed:,} pairs summed, {matched:,} matched; "
        f"{engines[0].group_count:,} groups; spilled {engines[0].comparison_stats.spilled_bytes // MIB} MiB"
    )
    names: list[str] = []
    for _, _, held, *_ in rows:
        names.extend(k for k in held if k not in names)
    print("\nparty 0's accounted structures after each step (MiB):")
    print(f"{'step':42s} " + " ".join(f"{n[:14]:>14s}" for n in names))
    for name, _, held, *_ in rows:
        print(f"{name:42s} " + " ".join(f"{held.get(n, 0) / MIB:14.1f}" for n in names))
    print("\nprocess (all P parties) per step:")
    print(f"{'step':42s} {'seconds':>8s} {'traced peak+':>12s} {'RSS after':>10s} {'RSS peak':>9s}")
    for name, seconds, _, traced, rss, peak in rows:
        print(f"{name:42s} {seconds:8.1f} {traced / MIB:12.1f} {rss / MIB:10.1f} {peak / MIB:9.1f}")
    print(f"peak RSS of the process: {peak_rss_bytes() / MIB:.0f} MiB")


if __name__ == "__main__":
    main()
