#!/usr/bin/env python3
"""CPU and wall seconds of each step of a segments run (all parties in this process, wire included).

Generates P x N people (``party.synthetic.generate``), encodes them with the shipped schema (cached
in ``--out``), then runs what the nodes run, step by step, for every party: block digests, their
wire round trip (serialised and parsed protobuf chunks), the common blocks, the segment shares and
their wire round trip, validation, the comparison, the ring (three hops, wire included), the results,
their resolution to record ids and each party's matches.csv (under ``--out``/results). ``--code DIR``
imports the project from another checkout (e.g. a ``git worktree`` of an earlier commit) so two
versions are measured on the same encodings.

Example: python scripts/profile_segments.py --records 300000 --out /tmp/prof300k
"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import resource
import sys
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Steps:
    """Wall and CPU seconds per named step."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def __call__(self, name: str) -> Steps:
        self.name = name
        return self

    def __enter__(self) -> None:
        self.t, self.c = time.perf_counter(), _cpu()

    def __exit__(self, *exc: object) -> None:
        self.wall[self.name] = self.wall.get(self.name, 0.0) + time.perf_counter() - self.t
        self.cpu[self.name] = self.cpu.get(self.name, 0.0) + _cpu() - self.c


def encoded_tables(records: int, parties: int, seed: int, out: Path) -> tuple[list[Any], int]:
    """The parties' EncodedRecords (made once, then read from ``out``)."""
    cache = out / f"tables-p{parties}-n{records}-s{seed}.pkl"
    if cache.exists():
        with cache.open("rb") as fh:
            return pickle.load(fh)  # noqa: S301 - our own cache file
    from party.encoding.encoder import Encoder
    from party.encoding.parallel import encode_csv_parallel
    from party.synthetic.simulation import (
        SimulationConfig,
        load_schema_for,
        prepare_data,
        simulation_secret,
    )

    data = prepare_data(SimulationConfig(parties=parties, records=records, seed=seed, out_dir=out))
    schema, _, _ = load_schema_for(None, parties)
    tables = [
        encode_csv_parallel(Encoder(schema, simulation_secret(seed)), p, id_column="rec_id")[0]
        for p in data.paths
    ]
    with cache.open("wb") as fh:
        pickle.dump((tables, schema.output_bits), fh, protocol=5)
    return tables, schema.output_bits


async def _stream(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


def _round_trip(chunks: Iterator[Any], cls: Any) -> list[Any]:
    """The chunks as a receiver parses them (serialised and parsed, as gRPC does)."""
    return [cls.FromString(c.SerializeToString()) for c in chunks]


async def run_steps(
    tables: list[Any],
    bits: int,
    steps: Steps,
    out_dir: Path,
    target: str = "all",
    exchange_only: bool = False,
    piped: bool = False,
) -> dict[str, int]:
    from party.node import results as result_files
    from party.node import wire
    from party.protocol.engine import PartyEngine
    from party.protocol.params import ProtocolParameters
    from proto import common_pb2, party_pb2

    engine_class: Any = PartyEngine
    if target == "any":
        from party.protocol.pair_engine import PairEngine

        engine_class = PairEngine

    p = len(tables)
    params = ProtocolParameters(
        parties=tuple(f"party-{i}" for i in range(p)),
        filter_bits=bits,
        match_threshold=0.8,
        segment_threshold=0.7,
        one_to_one=target == "all",
        memory_budget_bytes=(1024 if target == "all" else 4096) * 2**20,
        target=target,
    )
    ref = common_pb2.RunRef(run_id="0" * 32, parameters_digest="d")
    engines = [engine_class(i, params, tables[i]) for i in range(p)]
    with steps("block digests"):
        mine = [e.block_digests() for e in engines]
    with steps("block digests: wire"):
        got = []
        for i in range(p):
            chunks = _round_trip(
                wire.blocks_to_chunks(ref, i, mine[i], b"k"), party_pb2.PushBlocksRequest
            )
            got.append(await wire.blocks_from_chunks(chunks[0], _stream(chunks[1:])))
    with steps("common blocks"):  # as the nodes do it (an older checkout: with block sizes)
        shared = [
            e.use_common_blocks(e.common_of(got))
            if hasattr(e, "use_common_blocks")
            else e.set_common_blocks(e.common_of(got)).records_in_common_blocks
            for e in engines
        ]
    with steps("segment shares"):
        shares = [s for e in engines for s in e.outgoing_shares()]
    with steps("segment shares: wire"):
        received = []
        for s in shares:
            chunks = _round_trip(wire.share_to_chunks(ref, s), party_pb2.PushShareRequest)
            received.append(await wire.share_from_chunks(chunks[0], _stream(chunks[1:])))
    with steps("receive shares"):
        for s in received:
            engines[s.target].receive_share(s)
    if exchange_only:  # what a node does in stage exchanging, nothing after it
        for e in engines:
            e.close()
        return {f"records shared (party {i})": n for i, n in enumerate(shared)}
    with steps("compare"):
        for e in engines:
            e.compare()
    with steps("ring: start (party 0)"):
        rows, parts = engines[0].ring_start_chunks()
        msg = _round_trip(
            wire.ring_stream_to_chunks(ref, 0, 0, rows, p, parts), party_pb2.PassRingRequest
        )
    for i in range(1, p):
        with steps(f"ring: step (party {i})"):
            bound = engines[i].candidate_set_bound
            if piped and i < p - 1:  # what a node's parties 1..P-2 do: each chunk passed on
                outs = []
                async for part in wire.ring_chunks(msg[0], _stream(msg[1:]), max_rows=bound):
                    outs.append(engines[i].ring_step_chunk(part))
                engines[i].ring_step_close()
                total = msg[0].total_rows
                piece = wire.ring_piped_chunks(ref, i, i, total, p, _stream(outs))
                msg = _round_trip(iter([c async for c in piece]), party_pb2.PassRingRequest)
                continue
            async for part in wire.ring_chunks(msg[0], _stream(msg[1:]), max_rows=bound):
                engines[i].ring_step_feed(part)
            out = engines[i].ring_step_end()
            msg = _round_trip(
                wire.ring_stream_to_chunks(ref, i, i, out, p, engines[i].ring_out_chunks()),
                party_pb2.PassRingRequest,
            )
    with steps("ring: finish (party 0)"):
        bound = engines[0].ring_rows_sent
        async for part in wire.ring_chunks(msg[0], _stream(msg[1:]), max_rows=bound):
            engines[0].ring_finish_feed(part)
    with steps("ring: classification and groups (party 0)"):
        summed, _, matches = engines[0].ring_finish_end()
    with steps("results"):
        for j in range(1, p):
            cols = (wire.result_columns(r) for r in engines[0].result_chunks(j))
            chunks = _round_trip(
                wire.results_stream_to_chunks(
                    ref, 0, j, engines[0].result_count(j), cols, target == "any"
                ),
                party_pb2.DeliverResultsRequest,
            )
            bound = engines[j].candidate_set_bound
            async for c in wire.results_chunks(chunks[0], _stream(chunks[1:]), max_rows=bound):
                engines[j].receive_results_chunk(wire.party_results(j, c))
            engines[j].results_end()
    with steps("resolve + write results"):  # what the nodes do: resolved chunks to matches.csv
        resolved = 0
        for j in range(p):
            own = engines[0].result_chunks(0) if j == 0 else engines[j].received_results()
            folder = out_dir / "results" / f"party-{j}"
            if hasattr(result_files, "write_match_chunks"):
                chunks = engines[j].resolved_chunks(own)
                resolved += result_files.write_match_chunks(folder, ref.run_id, chunks)[1]
            else:  # an older checkout (--code): rows written one by one
                rows = engines[j].resolved_rows(own)
                resolved += result_files.write_matches(folder, ref.run_id, rows)[1]
    stats = engines[0].comparison_stats
    assert stats is not None
    for e in engines:
        e.close()
    return {
        "candidate sets": stats.candidate_sets,
        "survivors (party 0)": stats.survivors,
        "sets summed": summed,
        "matches": matches,
        "result rows resolved": resolved,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000, help="records per party")
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="folder for the data and encodings")
    ap.add_argument(
        "--target", choices=("all", "any"), default="all", help="linkage target (any: pairs)"
    )
    ap.add_argument("--code", type=Path, default=None, help="import the project from this folder")
    ap.add_argument(
        "--exchange-only", action="store_true", help="stop after the segment shares are received"
    )
    ap.add_argument(
        "--piped",
        action="store_true",
        help="ring parties 1..P-2 pass each chunk on as it comes (ring_step_chunk), as a node does",
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(args.code or Path(__file__).resolve().parents[1]))
    args.out.mkdir(parents=True, exist_ok=True)
    tables, bits = encoded_tables(args.records, args.parties, args.seed, args.out)
    steps = Steps()
    counts = asyncio.run(
        run_steps(tables, bits, steps, args.out, args.target, args.exchange_only, args.piped)
    )
    print(f"{'step':24s} {'wall s':>8s} {'CPU s':>8s}")
    for name, wall in steps.wall.items():
        print(f"{name:24s} {wall:8.2f} {steps.cpu[name]:8.2f}")
    print(f"{'total':24s} {sum(steps.wall.values()):8.2f} {sum(steps.cpu.values()):8.2f}")
    for k, v in counts.items():
        print(f"{k}: {v}")
    if args.exchange_only:
        return 0
    per = steps.cpu["compare"] / max(1, args.parties * counts["candidate sets"]) * 1e6
    print(f"compare: {per:.3f} CPU-microseconds per candidate set (or pair) and party")
    return 0


if __name__ == "__main__":
    sys.exit(main())
