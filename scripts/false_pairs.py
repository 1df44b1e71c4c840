"""Which pairs of a simulate.py run's groups are false, and what their two records share.

Reads a results folder of ``scripts/simulate.py`` (target any): ``data/truth.csv`` (entity_id,
party, rec_id), ``data/party-<q>.csv`` (the generator's plaintext) and
``results/party-<q>/matches.csv`` (linkage_id, similarity, record_id, ...). Every pair of records
in one output group is a predicted pair, true iff both records belong to one entity (what
simulate.py's pairwise precision counts). For the false pairs it prints their number by group
size, by how many of the generator's fields differ, the most common sets of differing fields,
how many agree on given fields, and the quantiles of their groups' similarity. Counts only: no
record value is printed.

Usage: ``.venv/bin/python scripts/false_pairs.py /tmp/lead-1m-any``
"""

from __future__ import annotations

import argparse
import collections
import csv
import itertools
import sys
from pathlib import Path

FIELDS = ("given_name", "surname", "sex", "dob", "street_address", "suburb", "postcode", "state")
AGREE = {
    "postcode": ("postcode",),
    "given name + sex + postcode": ("given_name", "sex", "postcode"),
    "given name": ("given_name",),
    "surname": ("surname",),
    "date of birth": ("dob",),
    "street address": ("street_address",),
}


def _rows(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise SystemExit(f"error: {path} has no column {', '.join(missing)}")
        return list(reader)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a simulate.py results folder (with data/ and results/)")
    args = ap.parse_args(argv)
    run: Path = args.run
    truth_csv = run / "data" / "truth.csv"
    parties = sorted((run / "results").glob("party-*")) if (run / "results").is_dir() else []
    if not truth_csv.is_file() or not parties:
        ap.error(f"{run} is not a simulate.py results folder (data/truth.csv, results/party-*)")
    entity = {r["rec_id"]: r["entity_id"] for r in _rows(truth_csv, ("rec_id", "entity_id"))}
    values: dict[str, tuple[str, ...]] = {}
    groups: dict[str, list[str]] = collections.defaultdict(list)
    similarity: dict[str, float] = {}
    for folder in parties:
        q = folder.name.removeprefix("party-")
        for r in _rows(run / "data" / f"party-{q}.csv", ("rec_id", *FIELDS)):
            values[r["rec_id"]] = tuple(r[f] for f in FIELDS)
        matches = folder / "matches.csv"
        for r in _rows(matches, ("linkage_id", "similarity", "record_id")):
            if r["record_id"] not in entity or r["record_id"] not in values:
                raise SystemExit(f"error: {matches} names a record the run's data does not have")
            groups[r["linkage_id"]].append(r["record_id"])
            similarity[r["linkage_id"]] = float(r["similarity"])
    false: list[tuple[str, str, str, int]] = []
    true = 0
    for lid, members in groups.items():
        for a, b in itertools.combinations(members, 2):
            if entity[a] == entity[b]:
                true += 1
            else:
                false.append((lid, a, b, len(members)))
    print(f"pairs in groups: {true + len(false)}, true {true}, false {len(false)}")
    print("false pairs by group size:", sorted(collections.Counter(f[3] for f in false).items()))
    patterns: collections.Counter[tuple[str, ...]] = collections.Counter()
    agree: collections.Counter[str] = collections.Counter()
    for _, a, b, _ in false:
        va, vb = (
            dict(zip(FIELDS, values[a], strict=True)),
            dict(zip(FIELDS, values[b], strict=True)),
        )
        patterns[tuple(f for f in FIELDS if va[f] != vb[f])] += 1
        for name, fields in AGREE.items():
            agree[name] += all(va[f] == vb[f] for f in fields)
    by_count = collections.Counter()
    for pattern, n in patterns.items():
        by_count[len(pattern)] += n
    print("false pairs by number of differing fields:", sorted(by_count.items()))
    print("most common sets of differing fields:")
    for pattern, n in patterns.most_common(12):
        print(f"  {n:8d}  {','.join(pattern) or '(none)'}")
    print("false pairs whose two records agree on:", dict(agree))
    sims = sorted(similarity[f[0]] for f in false)
    if sims:
        q = [round(sims[int(p * (len(sims) - 1))], 4) for p in (0, 0.1, 0.5, 0.9, 1)]
        print("similarity of the false pairs' groups, quantiles 0/10/50/90/100%:", q)
    return 0


if __name__ == "__main__":
    sys.exit(main())
