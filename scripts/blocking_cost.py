#!/usr/bin/env python3
"""Blocking recall and cost of a schema, per pass, without running the protocol (any size).

Generates P parties' people (``party.synthetic.generate``) or loads a dataset folder, encodes them
with the schema, and prints per blocking pass (digest column): records of each party in a block
present at every party, the candidate sets the pass makes (sum over its common blocks of the
product of the parties' block sizes; what the engine enumerates before its segment filter), and the
candidate pairs target any enumerates (over every two parties, the sum over the blocks both hold of
the product of their block sizes), the true sets it keeps and those only it keeps (its marginal
recall); then the true sets lost by all
passes together, those whose records pairwise comparison (target any) could still connect, and the
candidate sets against the node's survivor capacity (a quarter of the memory budget at 8 * (P + 1)
bytes per set). A schema without LSH keys is measured from the column values alone (no filters are
encoded: ``blocking_recall.digests_of_columns``), so 3 x 1,000,000 takes minutes.

``--pair-dice T ...`` also encodes the filters and prints the fill, the distinct candidate pairs (a
pair found by several passes once) and how many of them have a full-filter Dice >= each T: the
matched pairs target any's solver receives at s_t = T (``blocking_recall.candidate_pair_dice_counts``;
the segment filter can only remove some of them). With ``--scale-bits S ...`` it does so once per
factor S, the schema's bitsPerFeature scaled by S (``party.synthetic.fill``; the blocks do not
change), so one run compares encodings on the same records.

Example: python scripts/blocking_cost.py --parties 3 --records 1000000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from party.encoding.bits import popcount_rows  # noqa: E402
from party.encoding.encoder import Encoder  # noqa: E402
from party.encoding.records import EncodedRecords  # noqa: E402
from party.encoding.schema import LinkageSchema, load_schema, parse_schema  # noqa: E402
from party.synthetic.blocking_recall import (  # noqa: E402
    blocking_recall,
    candidate_pair_dice_counts,
    digests_of_columns,
)
from party.synthetic.fill import scale_bits_per_feature  # noqa: E402
from party.synthetic.generator import SyntheticTable, generate  # noqa: E402
from party.synthetic.simulation import default_schema_path, simulation_secret  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--records", type=int, default=10000)
    ap.add_argument("--overlap", type=float, default=0.5)
    ap.add_argument("--corruption", type=float, default=0.4)
    ap.add_argument("--households", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schema", type=Path, default=None)
    ap.add_argument("--memory-budget-mib", type=int, default=256)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument(
        "--pair-dice",
        type=float,
        nargs="+",
        default=None,
        metavar="T",
        help="encode the filters and count the distinct candidate pairs with Dice >= each T",
    )
    ap.add_argument(
        "--scale-bits",
        type=float,
        nargs="+",
        default=[1.0],
        metavar="S",
        help="with --pair-dice: one count per bitsPerFeature scale factor (default 1)",
    )
    args = ap.parse_args(argv)
    if args.scale_bits is not None and any(not f > 0 for f in args.scale_bits):
        ap.error("--scale-bits: every factor must be positive")
    schema_path = args.schema or default_schema_path()
    schema = load_schema(schema_path)
    t0 = time.perf_counter()
    ds = generate(
        args.parties,
        args.records,
        overlap=args.overlap,
        corruption=args.corruption,
        seed=args.seed,
        households=args.households,
    )
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    secret = simulation_secret(args.seed)
    tables = [_blocked(schema, secret, t) for t in ds.tables]
    t_enc = time.perf_counter() - t0
    encoded = "encode" if any(b.lsh is not None for b in schema.blocking) else "block digests"
    extra: dict[str, object] = {}
    if args.pair_dice is not None:
        raw = json.loads(schema_path.read_text())
        for scale in args.scale_bits:
            label = f"bitsPerFeature x {scale}"
            scaled = parse_schema(scale_bits_per_feature(raw, scale), label)
            extra[repr(scale)] = _pair_dice(
                label, scaled, secret, ds.tables, tables, args.pair_dice
            )
    del ds.tables[:]
    t0 = time.perf_counter()
    br = blocking_recall(tables, ds.truth)
    t_blk = time.perf_counter() - t0
    names = [
        b.name if b.lsh is None else f"{b.name}/{i}"
        for b in schema.blocking
        for i in range(b.width)
    ]
    names = names or ["all pairs"]
    print(
        f"P = {args.parties}, {args.records} records per party, schema {args.schema or 'shipped'}"
    )
    print(
        f"{'pass':28s} {'records in common blocks (per party)':40s} {'candidate sets':>16s} "
        f"{'candidate pairs':>16s} {'true sets kept':>15s} {'only this pass':>15s}"
    )
    for p, name in zip(br.passes, names, strict=True):
        rec = ", ".join(str(x) for x in p.records_in_common_blocks)
        print(
            f"{name:28s} {rec:40s} {p.candidate_sets:16,d} {p.candidate_pairs:16,d} "
            f"{p.true_sets_kept:15,d} {p.true_sets_only_here:15,d}"
        )
    capacity = args.memory_budget_mib * 2**20 // 4 // (8 * (args.parties + 1))
    print(
        f"true sets {br.true_sets:,}, lost to blocking {br.lost:,} ({br.lost_fraction:.4%}), "
        f"pair-connected (target any) {br.true_sets_pair_connected:,}; "
        f"candidate sets, all passes: {br.candidate_sets:,}; candidate pairs (target any), "
        f"all passes: {br.candidate_pairs:,}; survivor capacity of a "
        f"{args.memory_budget_mib} MiB budget: {capacity:,} sets"
    )
    load = os.getloadavg()
    print(
        f"generate {t_gen:.0f} s, {encoded} {t_enc:.0f} s, blocking figures {t_blk:.0f} s; "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(br.as_dict() | {"pass_names": names, "pair_dice": extra}, indent=2) + "\n"
        )
    return 0


def _pair_dice(
    label: str,
    schema: LinkageSchema,
    secret: bytes,
    rows: list[SyntheticTable],
    blocked: list[EncodedRecords],
    thresholds: list[float],
) -> dict[str, object]:
    """Fill and candidate pairs reaching each threshold with this schema's filters (module
    docstring), printed and returned."""
    t0 = time.perf_counter()
    tables = [
        replace(
            Encoder(schema, secret).encode_rows(t.rows(), id_column="rec_id"),
            block_digests=b.block_digests,
        )
        for t, b in zip(rows, blocked, strict=True)
    ]
    t_enc = time.perf_counter() - t0
    distinct, reached = candidate_pair_dice_counts(tables, thresholds)
    fill = sum(int(popcount_rows(t.filters).sum()) for t in tables) / (
        schema.output_bits * sum(len(t) for t in tables)
    )
    print(
        f"{label}: fill {fill:.4f}; distinct candidate pairs {distinct:,}; with "
        "full-filter Dice >= "
        + ", ".join(f"{t}: {n:,}" for t, n in reached.items())
        + f" (encode {t_enc:.0f} s, count {time.perf_counter() - t0 - t_enc:.0f} s)",
        flush=True,
    )
    return {
        "fill": round(fill, 4),
        "distinct_candidate_pairs": distinct,
        "pairs_with_dice_at_or_above": {repr(t): n for t, n in reached.items()},
    }


def _blocked(schema: LinkageSchema, secret: bytes, table: SyntheticTable) -> EncodedRecords:
    """One party's block digests (filters only when LSH keys need them: else 1-word zeros)."""
    if any(b.lsh is not None for b in schema.blocking):
        return Encoder(schema, secret).encode_rows(table.rows(), id_column="rec_id")
    n = len(table)
    digests = digests_of_columns(schema, secret, table.columns)
    return EncodedRecords(tuple(table.record_ids), np.zeros((n, 1), np.uint64), 64, digests)


if __name__ == "__main__":
    sys.exit(main())
