#!/usr/bin/env python3
"""Checks the compose demo's outcome: every party's matches.csv of one run, consistent and correct.

Run by the `check` service of docker-compose.yml (profile "check"; scripts/compose_smoke.sh calls it):

    python docker/check_results.py --party party-a=/volumes/party-a ... \
        [--truth /volumes/demo/data/truth.csv] [--run-id ID] [--min-f1 0.8]

Each party's volume holds `data/records.csv` (its records, id column `rec_id`) and
`results/<run-id>/matches.csv` (header `linkage_id,similarity,record_id`, written by the node). The run
checked is --run-id, else the newest run that has a matches.csv at EVERY party. Checks: the header; every
similarity a number in [0, 1]; every record id one of that party's records; each linkage id at most once per
party; the same linkage ids, with the same similarity, at every party; at least one match. With --truth
(the generated dataset's ground truth, party index = --party order) it also computes precision, recall and
F1 with party.synthetic's metrics and fails below --min-f1. Prints only counts and ids of runs, never
record values; exit 0 when every check passes, 1 when one fails, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import csv
import math
import pathlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

HEADER = ["linkage_id", "similarity", "record_id"]


class CheckFailed(Exception):
    """A check did not pass; the message says which, naming party and file."""


@dataclass(frozen=True)
class PartyVolume:
    name: str
    root: pathlib.Path

    @property
    def results(self) -> pathlib.Path:
        return self.root / "results"

    @property
    def records(self) -> pathlib.Path:
        return self.root / "data" / "records.csv"


def _party_arg(value: str) -> PartyVolume:
    name, sep, path = value.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=DIR, got {value!r}")
    return PartyVolume(name, pathlib.Path(path))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--party", type=_party_arg, action="append", required=True, help="NAME=DIR")
    ap.add_argument("--truth", type=pathlib.Path, help="truth.csv of the generated dataset")
    ap.add_argument("--run-id", help="run to check (default: newest run present at every party)")
    ap.add_argument("--min-f1", type=float, default=0.0, help="with --truth: lowest acceptable F1")
    ap.add_argument("--id-column", default="rec_id", help="record id column of data/records.csv")
    return ap


def pick_run(parties: Sequence[PartyVolume], run_id: str | None) -> str:
    """The run id to check: the given one, or the newest with a matches.csv at every party."""
    runs: list[dict[str, float]] = []
    for p in parties:
        found = {}
        if p.results.is_dir():
            for f in p.results.glob("*/matches.csv"):
                found[f.parent.name] = f.stat().st_mtime
        runs.append(found)
    if run_id is not None:
        missing = [p.name for p, r in zip(parties, runs, strict=True) if run_id not in r]
        if missing:
            raise CheckFailed(f"run {run_id}: no matches.csv at {', '.join(missing)}")
        return run_id
    common = set(runs[0]).intersection(*runs[1:])
    if not common:
        have = ", ".join(f"{p.name}: {len(r)} run(s)" for p, r in zip(parties, runs, strict=True))
        raise CheckFailed(f"no run has a matches.csv at every party ({have})")
    return max(common, key=lambda r: (max(x[r] for x in runs), r))


def read_ids(path: pathlib.Path, id_column: str) -> set[str]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if id_column not in (reader.fieldnames or []):
                raise CheckFailed(f"{path}: no column {id_column!r}")
            return {row[id_column] for row in reader}
    except OSError as exc:
        raise CheckFailed(f"{path}: cannot read ({exc.strerror})") from None


def read_matches(path: pathlib.Path, known_ids: set[str]) -> dict[str, float]:
    """linkage id -> similarity of one party's matches.csv, checking every row."""
    out: dict[str, float] = {}
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header != HEADER:
                raise CheckFailed(f"{path}: header is not {','.join(HEADER)}")
            for row_no, row in enumerate(reader, start=2):
                if len(row) != 3:
                    raise CheckFailed(f"{path} row {row_no}: expected 3 fields, got {len(row)}")
                linkage_id, sim_text, record_id = row
                try:
                    sim = float(sim_text)
                except ValueError:
                    raise CheckFailed(f"{path} row {row_no}: similarity is not a number") from None
                if not (math.isfinite(sim) and 0.0 <= sim <= 1.0):
                    raise CheckFailed(f"{path} row {row_no}: similarity outside [0, 1]")
                if record_id not in known_ids:
                    raise CheckFailed(f"{path} row {row_no}: record_id is not in the party's data")
                if linkage_id in out:
                    raise CheckFailed(f"{path} row {row_no}: linkage_id {linkage_id} repeated")
                out[linkage_id] = sim
    except OSError as exc:
        raise CheckFailed(f"{path}: cannot read ({exc.strerror})") from None
    return out


def check(args: argparse.Namespace) -> list[str]:
    """Run every check; returns the lines of the summary, raises CheckFailed on the first failure."""
    parties: list[PartyVolume] = args.party
    run_id = pick_run(parties, args.run_id)
    per_party = []
    for p in parties:
        ids = read_ids(p.records, args.id_column)
        per_party.append(read_matches(p.results / run_id / "matches.csv", ids))
    first = per_party[0]
    for p, matches in zip(parties[1:], per_party[1:], strict=True):
        if set(matches) != set(first):
            diff = len(set(matches) ^ set(first))
            raise CheckFailed(
                f"run {run_id}: {p.name} and {parties[0].name} differ in {diff} linkage id(s)"
            )
        bad = [lid for lid, sim in matches.items() if abs(sim - first[lid]) > 1e-9]
        if bad:
            raise CheckFailed(
                f"run {run_id}: {p.name} reports another similarity than {parties[0].name} "
                f"for {len(bad)} linkage id(s)"
            )
    if not first:
        raise CheckFailed(f"run {run_id}: no matches at all")
    lines = [
        f"run {run_id}: {len(first)} matched sets, consistent at "
        + ", ".join(p.name for p in parties)
    ]
    if args.truth is not None:
        from party.errors import PprlError
        from party.synthetic import evaluate_files, load

        try:
            dataset = load([p.records for p in parties], args.truth, id_column=args.id_column)
            quality = evaluate_files(
                [p.results / run_id / "matches.csv" for p in parties], dataset.truth
            )
        except PprlError as exc:
            raise CheckFailed(f"run {run_id}: cannot evaluate against the truth: {exc}") from None
        lines.append(
            f"precision {quality.precision:.4f}, recall {quality.recall:.4f}, F1 {quality.f1:.4f} "
            f"({quality.correct_sets} correct of {quality.matched_sets} matched, "
            f"{quality.true_sets} true sets)"
        )
        if quality.f1 < args.min_f1:
            raise CheckFailed(f"run {run_id}: F1 {quality.f1:.4f} is below --min-f1 {args.min_f1}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if len(args.party) < 2:
        print("check_results: error: at least two --party volumes are needed", file=sys.stderr)
        return 2
    try:
        lines = check(args)
    except CheckFailed as exc:
        print(f"check_results: FAILED: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(f"check_results: {line}")
    print("check_results: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
