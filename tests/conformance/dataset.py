"""The conformance data set: three small tables with a hand-made known answer, and its parameters.

Four people appear with identical values at all three parties, so their three filters are equal and
their multi-party Dice is exactly 1.0; every other record is a different person (some present at two
parties only, some sharing a blocking key with a true match), so no other 3-way candidate set comes
near the match threshold 0.8. The expected answer therefore does not depend on any implementation:
each party's matches.csv lists exactly the four shared people, similarity 1.0, and the linkage ids
group the same person at every party.
"""

from __future__ import annotations

import csv
import pathlib
from typing import Any

PARTIES = ("party-a", "party-b", "party-c")
COLUMNS = ("rec_id", "given_name", "surname", "dob", "postcode")
FILTER_BITS = 840  # divisible by 2..8, so the same schema serves probe runs (P = 2) and P = 3

SHARED = {
    "margaret": ("Margaret", "Thompson", "1961-04-12", "2600"),
    "rajesh": ("Rajesh", "Patel", "1985-11-30", "3052"),
    "sophie": ("Sophie", "Nguyen", "1992-07-08", "4000"),
    "liam": ("Liam", "O'Connor", "1978-02-19", "6008"),
}

# (record id, person key or None, values) per party; the row order differs between parties.
_ONLY: dict[str, list[tuple[str, tuple[str, str, str, str]]]] = {
    "party-a": [
        (
            "a-x1",
            ("Thomas", "Thomsen", "1961-09-02", "2611"),
        ),  # same soundex/year blocks as Margaret
        ("a-x2", ("Hannah", "Schmidt", "1990-03-14", "5000")),  # also at party-b, not at party-c
        ("a-x3", ("Priya", "Patil", "1985-01-22", "3050")),  # Patel's soundex block
    ],
    "party-b": [
        ("b-x1", ("Hannah", "Schmidt", "1990-03-14", "5000")),
        ("b-x2", ("Oscar", "Nygaard", "1992-12-01", "4101")),  # Nguyen's soundex/year block
        ("b-x3", ("Maria", "Tomson", "1955-05-05", "2000")),
    ],
    "party-c": [
        ("c-x1", ("Liang", "O'Conner", "1979-08-30", "6100")),  # O'Connor's soundex block
        ("c-x2", ("Peter", "Pattel", "1984-06-06", "3000")),
        ("c-x3", ("Grace", "Ng", "2001-10-10", "4870")),
    ],
}

_SHARED_IDS = {
    "party-a": {"margaret": "a-0003", "rajesh": "a-0001", "sophie": "a-0004", "liam": "a-0002"},
    "party-b": {"margaret": "b-0101", "rajesh": "b-0104", "sophie": "b-0102", "liam": "b-0103"},
    "party-c": {"margaret": "c-7", "rajesh": "c-5", "sophie": "c-9", "liam": "c-1"},
}


def rows(party: str) -> list[dict[str, str]]:
    """The table of ``party`` as CSV rows (shared people interleaved with the others)."""
    out: list[dict[str, str]] = []
    shared = list(_SHARED_IDS[party].items())
    only = _ONLY[party]
    for i in range(max(len(shared), len(only))):
        if i < len(only):
            rid, vals = only[i]
            out.append(dict(zip(COLUMNS, (rid, *vals), strict=True)))
        if i < len(shared):
            person, rid = shared[i]
            out.append(dict(zip(COLUMNS, (rid, *SHARED[person]), strict=True)))
    return out


def write_tables(folder: pathlib.Path) -> list[pathlib.Path]:
    """Write one CSV per party into ``folder``; return the paths in PARTIES order."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for party in PARTIES:
        path = folder / f"{party}.csv"
        with path.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=COLUMNS)
            writer.writeheader()
            writer.writerows(rows(party))
        paths.append(path)
    return paths


def expected_groups() -> list[dict[str, str]]:
    """The known answer: per shared person, party name -> that party's record id."""
    return [{p: _SHARED_IDS[p][person] for p in PARTIES} for person in SHARED]


def schema(filter_bits: int = FILTER_BITS) -> dict[str, Any]:
    """The linkage schema of the conformance data (fields as in examples/schema.json)."""
    return {
        "version": 1,
        "l": filter_bits,
        "hashing": {"scheme": "hmac-sha256-random", "k": 20},
        "hardening": {"xorFold": False, "balance": False, "blip": None},
        "features": [
            {"identifier": "given_name", "comparison": {"type": "ngram", "n": 2}},
            {
                "identifier": "surname",
                "comparison": {"type": "ngram", "n": 2},
                "strategy": {"weight": 1.5},
            },
            {
                "identifier": "dob",
                "comparison": {"type": "ngram", "n": 2, "padding": False},
                "strategy": {"bitsPerToken": 15},
            },
            {
                "identifier": "postcode",
                "normalisation": {"whitespace": "remove"},
                "comparison": {"type": "ngram", "n": 2},
                "strategy": {"bitsPerToken": 10},
            },
        ],
        "blocking": [
            {"name": "soundex_surname", "parts": [{"field": "surname", "function": "soundex"}]},
            {"name": "yob", "parts": [{"field": "dob", "function": "year"}]},
        ],
    }


def parameters(
    parties: tuple[str, ...] = PARTIES, segment_threshold: float = 0.7
) -> dict[str, Any]:
    """The parameters object (examples/parameters.json format) of the known-answer linkage."""
    return {
        "version": 1,
        "parties": list(parties),
        "schema": schema(),
        "match_threshold": 0.8,
        "segment_threshold": segment_threshold,
        "one_to_one": False,
        "max_block_size": None,
        "target": "all",  # the known answers are target all's matched sets
    }
