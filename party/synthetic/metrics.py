"""Linkage quality against ground truth: precision, recall and F1 of matched sets.

Definitions (multi-party, as in Vatsalan & Christen's evaluation). A matched set is the group of
records, one from each party, that the linkage gave one linkage id; it is gathered from every party's
results (each party only knows its own record in each set). A matched set is CORRECT iff it holds
exactly one record from each of the P parties and all its records belong to one entity. The true sets
are the entities with a record at every party (`GroundTruth.complete_entities`).

    precision = correct sets / matched sets
    recall    = distinct true entities found by a correct set / true sets
    F1        = 2 * precision * recall / (precision + recall)

(The distinct count keeps recall <= 1 when a party holds duplicates of one entity.) With nothing
matched, precision is 1.0; with nothing to find, recall is 1.0; F1 is 0.0 when both are 0.

File format read here: a party's `matches.csv` (written by the party node) has the header
`linkage_id,similarity,record_id`, one row per matched set this party's record is in.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from party.errors import PprlError
from party.synthetic.truth import GroundTruth

MATCHES_HEADER = ("linkage_id", "similarity", "record_id")


class MetricsError(PprlError):
    """Matches that cannot be evaluated (unreadable file, unknown record ids, bad party count)."""


@dataclass(frozen=True)
class MatchEntry:
    """One row of a party's matches: the linkage id, the similarity and this party's record id."""

    linkage_id: str
    similarity: float
    record_id: str


@dataclass(frozen=True)
class LinkageQuality:
    matched_sets: int
    correct_sets: int
    true_sets: int
    found_entities: int
    precision: float
    recall: float
    f1: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "matched_sets": self.matched_sets,
            "correct_sets": self.correct_sets,
            "true_sets": self.true_sets,
            "found_entities": self.found_entities,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


def _field(match: Any, name: str) -> Any:
    if isinstance(match, Mapping):
        return match[name]
    return getattr(match, name)


def read_matches_csv(path: str | Path) -> list[MatchEntry]:
    """Read one party's matches.csv; errors name the file and row, never a value."""
    path = Path(path)
    try:
        fh = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise MetricsError(f"cannot read matches file {path}: {exc.strerror}") from exc
    out = []
    with fh:
        reader = csv.DictReader(fh)
        missing = [c for c in MATCHES_HEADER if c not in (reader.fieldnames or [])]
        if missing:
            raise MetricsError(f"{path}: missing column(s) {', '.join(missing)}")
        for row_no, row in enumerate(reader, start=2):
            try:
                sim = float(row["similarity"])
            except (TypeError, ValueError):
                raise MetricsError(f"{path} row {row_no}: similarity is not a number") from None
            out.append(MatchEntry(row["linkage_id"], sim, row["record_id"]))
    return out


def sets_from_matches(matches: Sequence[Iterable[Any]]) -> list[list[tuple[int, str]]]:
    """Group every party's match rows by linkage id into sets of (party, record id).

    Each element of `matches` is one party's rows (objects or mappings with `linkage_id` and
    `record_id`, e.g. the protocol's MatchRow or `MatchEntry`). Sets are ordered by linkage id.
    """
    groups: dict[str, list[tuple[int, str]]] = {}
    for party, rows in enumerate(matches):
        for m in rows:
            groups.setdefault(str(_field(m, "linkage_id")), []).append(
                (party, str(_field(m, "record_id")))
            )
    return [groups[k] for k in sorted(groups)]


def evaluate_sets(sets: Iterable[Sequence[tuple[int, str]]], truth: GroundTruth) -> LinkageQuality:
    """Quality of matched sets given as lists of (party index, record id)."""
    lookups = [truth.lookup(p) for p in range(truth.parties)]
    matched = correct = 0
    found: set[int] = set()
    for s in sets:
        matched += 1
        ents = set()
        parties_seen = set()
        for party, rid in s:
            if not 0 <= party < truth.parties:
                raise MetricsError(f"matches name party {party}, but the truth has {truth.parties}")
            ent = lookups[party].get(rid)
            if ent is None:
                raise MetricsError(
                    f"a record id in party {party}'s matches is not in that party's ground truth"
                )
            ents.add(ent)
            parties_seen.add(party)
        ok = len(s) == truth.parties and len(parties_seen) == truth.parties and len(ents) == 1
        ent0 = next(iter(ents)) if ents else -1
        if ok and ent0 >= 0:
            correct += 1
            found.add(ent0)
    true_sets = len(truth.complete_entities())
    precision = correct / matched if matched else 1.0
    recall = len(found) / true_sets if true_sets else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return LinkageQuality(matched, correct, true_sets, len(found), precision, recall, f1)


def evaluate(matches: Sequence[Iterable[Any]], truth: GroundTruth) -> LinkageQuality:
    """Quality of the linkage from every party's match rows (party order = truth's party order)."""
    if len(matches) != truth.parties:
        raise MetricsError(
            f"got matches from {len(matches)} parties, but the truth has {truth.parties}"
        )
    return evaluate_sets(sets_from_matches(matches), truth)


def evaluate_files(paths: Sequence[str | Path], truth: GroundTruth) -> LinkageQuality:
    """Quality of the linkage from every party's matches.csv (in party order)."""
    return evaluate([read_matches_csv(p) for p in paths], truth)


def evaluate_index_sets(
    index_sets: Iterable[Sequence[int]] | np.ndarray, truth: GroundTruth
) -> LinkageQuality:
    """Quality of matched sets given as one row index per party (e.g. the plaintext oracle's)."""
    ids = truth.record_ids
    return evaluate_sets(
        ([(p, ids[p][int(i)]) for p, i in enumerate(row)] for row in index_sets), truth
    )
