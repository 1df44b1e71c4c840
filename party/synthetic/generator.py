"""Synthetic multi-party person data: generation, overlap between parties, corruption, CSV output.

Model. `generate(P, n, overlap, corruption, seed)` draws clean people from the shipped frequency lists
(`party.synthetic.lists`): sex (1:1), a given name from the list of that sex, a surname, a date of birth
uniform over 1930-01-01..2009-12-31, a street address (house number, street name, street type), and a
suburb with its postcode and state. round(overlap * n) people are present at EVERY party (the
"common" entities); each party's other n - round(overlap * n) records are people present at that
party only (as in Vatsalan & Christen's experiments). Of the common entities, round(corruption *
common) are chosen at random to be corrupted; for each, k parties are chosen at random, k uniform in
1..P-1 (so at least one copy stays as generated), and each chosen party's copy gets 1..max_errors
errors (uniform) from `Corruptor`. Each party's rows are then shuffled.

Households (``households = h``): about a fraction h of all people live with others: they are cut into
groups of 2-4 (sizes uniform) and every member takes the first member's surname and whole address
(street address, suburb, postcode, state), as a family does. Such people differ only in given
name, sex and date of birth, which is what makes household data hard to link. Everything is deterministic
given the seed (numpy PCG64 and `random.Random` streams derived from it).

Output (`write_dataset`): `party-<i>.csv` for i = 0..P-1 with header
`rec_id,given_name,surname,sex,dob,street_address,suburb,postcode,state` (dob YYYY-MM-DD, sex m/f,
all text lower case), `truth.csv` (see `party.synthetic.truth`) and `dataset.json` (the generation
parameters and counts; no record values).
"""

from __future__ import annotations

import csv
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from party.errors import PprlError
from party.synthetic.corrupt import Corruptor
from party.synthetic.lists import load_lists
from party.synthetic.truth import GroundTruth

log = logging.getLogger(__name__)

COLUMNS = (
    "rec_id",
    "given_name",
    "surname",
    "sex",
    "dob",
    "street_address",
    "suburb",
    "postcode",
    "state",
)
DOB_START = np.datetime64("1930-01-01")
DOB_END = np.datetime64("2009-12-31")


class GenerationError(PprlError):
    """Invalid generation parameters."""


@dataclass
class SyntheticTable:
    """One party's records as columns (lists of str, one per COLUMNS entry, aligned)."""

    columns: dict[str, list[str]]

    def __len__(self) -> int:
        return len(self.columns["rec_id"])

    @property
    def record_ids(self) -> list[str]:
        return self.columns["rec_id"]

    def row(self, i: int) -> dict[str, str]:
        return {c: self.columns[c][i] for c in self.columns}

    def rows(self) -> Iterator[dict[str, str]]:
        """The records as dicts (built lazily, one at a time)."""
        names = list(self.columns)
        for values in zip(*(self.columns[c] for c in names), strict=True):
            yield dict(zip(names, values, strict=True))

    def write_csv(self, path: str | Path) -> None:
        """Write the table as CSV with a header (atomically: temp file, then rename)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        names = list(self.columns)
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(names)
            w.writerows(zip(*(self.columns[c] for c in names), strict=True))
        tmp.replace(path)


@dataclass
class SyntheticDataset:
    """P parties' tables, the ground truth and, per party, which rows were corrupted."""

    tables: list[SyntheticTable]
    truth: GroundTruth
    corrupted: list[np.ndarray]  # per party: bool (n,), True where the row got errors
    parameters: dict[str, object] = field(default_factory=dict)

    @property
    def parties(self) -> int:
        return len(self.tables)


HOUSEHOLD_SHARED = ("surname", "street_address", "suburb", "postcode", "state")


def _households(rng: np.random.Generator, people: dict[str, np.ndarray], share: float) -> None:
    """Put about ``share`` of the people into households of 2-4 (see the module docstring)."""
    count = people["surname"].size
    members = rng.permutation(count)[: round(share * count)]
    i = 0
    while i + 1 < members.size:
        size = min(int(rng.integers(2, 5)), members.size - i)
        group = members[i : i + size]
        for col in HOUSEHOLD_SHARED:
            people[col][group[1:]] = people[col][group[0]]
        i += size


def _people(rng: np.random.Generator, count: int, households: float = 0.0) -> dict[str, np.ndarray]:
    """`count` clean people as object arrays of str (no rec_id)."""
    lists = load_lists()
    female = rng.random(count) < 0.5
    given = np.empty(count, dtype=object)
    nf = int(female.sum())
    given[female] = lists.given_female.values[lists.given_female.sample(rng, nf)]
    given[~female] = lists.given_male.values[lists.given_male.sample(rng, count - nf)]
    sex = np.where(female, "f", "m").astype(object)
    surname = lists.surnames.values[lists.surnames.sample(rng, count)]
    span = int((DOB_END - DOB_START).astype(np.int64)) + 1
    days = rng.integers(0, span, size=count)
    dob = np.datetime_as_string(DOB_START + days.astype("timedelta64[D]"), unit="D").astype(object)
    # House numbers: mostly small, a long tail up to 999.
    number = np.minimum(1 + rng.geometric(0.03, size=count), 999).astype(str).astype(object)
    street = lists.streets.values[lists.streets.sample(rng, count)]
    stype = lists.street_types.values[lists.street_types.sample(rng, count)]
    address = number + " " + street + " " + stype
    sub = lists.suburbs.sample(rng, count)
    people = {
        "given_name": given,
        "surname": surname,
        "sex": sex,
        "dob": dob,
        "street_address": address,
        "suburb": lists.suburbs.values[sub],
        "postcode": lists.suburbs.extra["postcode"][sub],
        "state": lists.suburbs.extra["state"][sub],
    }
    if households > 0:
        _households(rng, people, households)
    return people


def generate(
    parties: int,
    records_per_party: int,
    overlap: float = 0.5,
    corruption: float = 0.2,
    seed: int = 0,
    *,
    max_errors: int = 2,
    households: float = 0.0,
) -> SyntheticDataset:
    """Generate P parties' person tables with known overlap and corruption (see module docstring).

    Raises GenerationError for parties < 2, records_per_party < 1, overlap, corruption or
    households outside [0, 1], or max_errors < 1.
    """
    problems = []
    if not isinstance(parties, int) or parties < 2:
        problems.append(f"parties must be an integer >= 2, got {parties!r}")
    if not isinstance(records_per_party, int) or records_per_party < 1:
        problems.append(f"records_per_party must be an integer >= 1, got {records_per_party!r}")
    if not 0.0 <= overlap <= 1.0:
        problems.append(f"overlap must be in [0, 1], got {overlap!r}")
    if not 0.0 <= corruption <= 1.0:
        problems.append(f"corruption must be in [0, 1], got {corruption!r}")
    if not 0.0 <= households <= 1.0:
        problems.append(f"households must be in [0, 1], got {households!r}")
    if not isinstance(max_errors, int) or max_errors < 1:
        problems.append(f"max_errors must be an integer >= 1, got {max_errors!r}")
    if problems:
        raise GenerationError("invalid generation parameters: " + "; ".join(problems))

    ss = np.random.SeedSequence(seed)
    people_ss, overlap_ss, corrupt_ss, shuffle_ss = ss.spawn(4)
    n = records_per_party
    n_common = round(overlap * n)
    n_own = n - n_common
    total = n_common + parties * n_own
    log.debug("generating %d people for %d parties", total, parties)
    people = _people(np.random.default_rng(people_ss), total, households)

    # Corruption plan: which common entities, at which parties, how many errors.
    crng = np.random.default_rng(overlap_ss)
    n_corrupt = round(corruption * n_common)
    chosen = (
        np.sort(crng.choice(n_common, size=n_corrupt, replace=False))
        if n_corrupt
        else np.zeros(0, dtype=np.int64)
    )
    # plan[p]: entity index -> number of errors for party p's copy.
    plan: list[dict[int, int]] = [{} for _ in range(parties)]
    for e in chosen.tolist():
        k = int(crng.integers(1, parties))  # 1..P-1 parties get a corrupted copy
        for p in crng.choice(parties, size=k, replace=False).tolist():
            plan[p][e] = int(crng.integers(1, max_errors + 1))

    corruptor = Corruptor(int(corrupt_ss.generate_state(1)[0]))
    srng = np.random.default_rng(shuffle_ss)
    tables: list[SyntheticTable] = []
    corrupted: list[np.ndarray] = []
    entity_codes: list[np.ndarray] = []
    common_idx = np.arange(n_common, dtype=np.int64)
    for p in range(parties):
        start = n_common + p * n_own
        ents = np.concatenate([common_idx, np.arange(start, start + n_own, dtype=np.int64)])
        ents = ents[srng.permutation(n)]
        cols: dict[str, list[str]] = {"rec_id": [f"p{p}r{i + 1}" for i in range(n)]}
        for name in COLUMNS[1:]:
            cols[name] = people[name][ents].tolist()
        flags = np.zeros(n, dtype=bool)
        if plan[p]:
            pos = np.flatnonzero(ents < n_common)
            for i in pos[np.isin(ents[pos], list(plan[p]))].tolist():
                rec = {c: cols[c][i] for c in COLUMNS[1:]}
                new = corruptor.corrupt(rec, plan[p][int(ents[i])])
                for c in COLUMNS[1:]:
                    cols[c][i] = new[c]
                flags[i] = True
        tables.append(SyntheticTable(cols))
        corrupted.append(flags)
        entity_codes.append(ents)

    truth = GroundTruth(
        record_ids=tuple(tuple(t.record_ids) for t in tables),
        entity_ids=tuple(entity_codes),
        labels=tuple(f"e{i}" for i in range(total)),
    )
    params: dict[str, object] = {
        "parties": parties,
        "records_per_party": records_per_party,
        "overlap": overlap,
        "corruption": corruption,
        "seed": seed,
        "max_errors": max_errors,
        "households": households,
        "common_entities": n_common,
        "corrupted_entities": n_corrupt,
        "corrupted_records_per_party": [int(f.sum()) for f in corrupted],
    }
    return SyntheticDataset(tables, truth, corrupted, params)


def party_csv_name(party: int) -> str:
    return f"party-{party}.csv"


def write_dataset(ds: SyntheticDataset, folder: str | Path) -> list[Path]:
    """Write party-<i>.csv, truth.csv and dataset.json into folder (created if needed).

    Returns the party CSV paths in party order. Existing files of the same names are replaced
    atomically one by one; other files in the folder are left alone.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GenerationError(f"cannot create output folder {folder}: {exc.strerror}") from exc
    paths = []
    for p, table in enumerate(ds.tables):
        path = folder / party_csv_name(p)
        table.write_csv(path)
        paths.append(path)
    ds.truth.write(folder / "truth.csv")
    meta = folder / "dataset.json"
    tmp = meta.with_name(meta.name + ".tmp")
    tmp.write_text(json.dumps(ds.parameters, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, meta)
    return paths
