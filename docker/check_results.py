#!/usr/bin/env python3
"""Checks the compose demo's outcome: every party's matches.csv of one run, consistent and correct.

Run by the `check` service of docker-compose.yml (profile "check"; scripts/compose_smoke.sh calls it):

    python docker/check_results.py --party party-a=/volumes/party-a ... \
        [--truth /volumes/demo/data/truth.csv] [--run-id ID] [--min-f1 0.8]

Each party's volume holds `data/records.csv` (its records, id column `rec_id`) and
`results/<run-id>/matches.csv` written by the node: header `linkage_id,similarity,record_id,group_size,parties`
for target any (the shipped default: groups of two or more parties) or `linkage_id,similarity,record_id`
for target all (sets of every party). The run checked is --run-id, else the newest run that has a
matches.csv at EVERY party. Checks: one header at every party; every similarity a number in [0, 1];
every record id one of that party's records; each linkage id at most once per party; each linkage id at
exactly the parties its rows name (target any; two or more) or at every party (target all), with the
same similarity and group size everywhere; at least one match. With --truth (the generated dataset's
ground truth, party index = --party order) it also computes precision, recall and F1 with
party.synthetic's metrics (pairwise for target any, of whole sets for target all) and fails below
--min-f1. Prints only counts and ids of runs, never record values; exit 0 when every check passes, 1
when one fails, 2 on unusable input.
"""

from __future__ import annotations

import argparse
import csv
import math
import pathlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

HEADER_ALL = ["linkage_id", "similarity", "record_id"]
HEADER_ANY = [*HEADER_ALL, "group_size", "parties"]


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


@dataclass(frozen=True)
class MatchRow:
    """One row of a party's matches.csv; group_size and parties only for target any."""

    similarity: float
    record_id: str
    group_size: int | None = None
    parties: tuple[str, ...] = ()


def read_matches(
    path: pathlib.Path, known_ids: set[str], party_names: Sequence[str]
) -> tuple[list[str], dict[str, MatchRow]]:
    """(header, linkage id -> row) of one party's matches.csv, checking every row."""
    out: dict[str, MatchRow] = {}
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header not in (HEADER_ANY, HEADER_ALL):
                raise CheckFailed(
                    f"{path}: header is neither {','.join(HEADER_ANY)} (target any) nor "
                    f"{','.join(HEADER_ALL)} (target all)"
                )
            for row_no, row in enumerate(reader, start=2):
                if len(row) != len(header):
                    raise CheckFailed(
                        f"{path} row {row_no}: expected {len(header)} fields, got {len(row)}"
                    )
                linkage_id = row[0]
                if linkage_id in out:
                    raise CheckFailed(f"{path} row {row_no}: linkage_id {linkage_id} repeated")
                out[linkage_id] = _match_row(path, row_no, row, known_ids, party_names)
    except OSError as exc:
        raise CheckFailed(f"{path}: cannot read ({exc.strerror})") from None
    return header, out


def _match_row(
    path: pathlib.Path, row_no: int, row: list[str], known_ids: set[str], party_names: Sequence[str]
) -> MatchRow:
    try:
        sim = float(row[1])
    except ValueError:
        raise CheckFailed(f"{path} row {row_no}: similarity is not a number") from None
    if not (math.isfinite(sim) and 0.0 <= sim <= 1.0):
        raise CheckFailed(f"{path} row {row_no}: similarity outside [0, 1]")
    if row[2] not in known_ids:
        raise CheckFailed(f"{path} row {row_no}: record_id is not in the party's data")
    if len(row) == len(HEADER_ALL):
        return MatchRow(sim, row[2])
    try:
        size = int(row[3])
    except ValueError:
        raise CheckFailed(f"{path} row {row_no}: group_size is not an integer") from None
    parties = tuple(row[4].split(";"))
    unknown = sorted(set(parties) - set(party_names))
    if unknown or len(set(parties)) != len(parties):
        raise CheckFailed(
            f"{path} row {row_no}: the parties column names a party not given with --party, "
            "or one party twice"
        )
    if size < 2 or size != len(parties):
        raise CheckFailed(f"{path} row {row_no}: group_size does not match the parties named")
    return MatchRow(sim, row[2], size, parties)


def check_consistent(
    run_id: str,
    parties: Sequence[PartyVolume],
    per_party: Sequence[dict[str, MatchRow]],
    any_: bool,
) -> dict[str, list[int]]:
    """Linkage id -> indexes of the parties holding it; raises unless every party agrees on it."""
    holders: dict[str, list[int]] = {}
    for p, matches in enumerate(per_party):
        for lid in matches:
            holders.setdefault(lid, []).append(p)
    names = [p.name for p in parties]
    for lid, held in holders.items():
        rows = [per_party[p][lid] for p in held]
        expected = sorted(names.index(n) for n in rows[0].parties) if any_ else list(held)
        if held != expected or (not any_ and len(held) != len(parties)):
            missing = sorted(set(expected if any_ else range(len(parties))) - set(held))
            extra = sorted(set(held) - set(expected))
            raise CheckFailed(
                f"run {run_id}: linkage id {lid} is missing at "
                f"{', '.join(names[i] for i in missing) or '-'} and unexpected at "
                f"{', '.join(names[i] for i in extra) or '-'}"
            )
        if any(abs(r.similarity - rows[0].similarity) > 1e-9 for r in rows[1:]):
            raise CheckFailed(
                f"run {run_id}: {', '.join(names[p] for p in held)} disagree on the "
                f"similarity of linkage id {lid}"
            )
        if any(r.parties != rows[0].parties for r in rows[1:]):
            raise CheckFailed(f"run {run_id}: parties disagree on the members of linkage id {lid}")
    return holders


def check(args: argparse.Namespace) -> list[str]:
    """Run every check; returns the lines of the summary, raises CheckFailed on the first failure."""
    parties: list[PartyVolume] = args.party
    names = [p.name for p in parties]
    run_id = pick_run(parties, args.run_id)
    headers, per_party = [], []
    for p in parties:
        ids = read_ids(p.records, args.id_column)
        header, rows = read_matches(p.results / run_id / "matches.csv", ids, names)
        headers.append(header)
        per_party.append(rows)
    if any(h != headers[0] for h in headers):
        raise CheckFailed(f"run {run_id}: the parties' matches.csv files have different headers")
    any_ = headers[0] == HEADER_ANY
    holders = check_consistent(run_id, parties, per_party, any_)
    if not holders:
        raise CheckFailed(f"run {run_id}: no matches at all")
    kind = "groups (target any)" if any_ else "matched sets (target all)"
    lines = [f"run {run_id}: {len(holders)} {kind}, consistent at " + ", ".join(names)]
    if args.truth is not None:
        lines.append(_quality_line(args, run_id, per_party, holders, any_))
    return lines


def _quality_line(
    args: argparse.Namespace,
    run_id: str,
    per_party: Sequence[dict[str, MatchRow]],
    holders: dict[str, list[int]],
    any_: bool,
) -> str:
    from party.errors import PprlError
    from party.synthetic import evaluate_sets, load
    from party.synthetic.metrics_any import evaluate_groups

    parties: list[PartyVolume] = args.party
    groups = [[(p, per_party[p][lid].record_id) for p in held] for lid, held in holders.items()]
    try:
        dataset = load([p.records for p in parties], args.truth, id_column=args.id_column)
        if any_:
            scores = evaluate_groups(groups, dataset.truth).pairwise
            what = f"pairwise: {scores.correct} correct of {scores.predicted} predicted pairs, "
            what += f"{scores.true} true pairs"
            precision, recall, f1 = scores.precision, scores.recall, scores.f1
        else:
            quality = evaluate_sets(groups, dataset.truth)
            what = f"{quality.correct_sets} correct of {quality.matched_sets} matched, "
            what += f"{quality.true_sets} true sets"
            precision, recall, f1 = quality.precision, quality.recall, quality.f1
    except PprlError as exc:
        raise CheckFailed(f"run {run_id}: cannot evaluate against the truth: {exc}") from None
    if f1 < args.min_f1:
        raise CheckFailed(f"run {run_id}: F1 {f1:.4f} is below --min-f1 {args.min_f1}")
    return f"precision {precision:.4f}, recall {recall:.4f}, F1 {f1:.4f} ({what})"


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
