"""Result files: ``<results>/<run-id>/matches.csv`` written atomically, removed on abort.

Format: UTF-8 CSV with header ``linkage_id,similarity,record_id``; one row per matched candidate set
that includes one of this party's records; ``similarity`` is the multi-party Dice written with
Python's repr (round-trips exactly); ``record_id`` is the party's own id (never another party's).
Target any: header ``linkage_id,similarity,record_id,group_size,parties``, one row per group that
includes one of this party's records; ``similarity`` is the group similarity, ``group_size`` the
number of records (2..P) and ``parties`` the names of the group's parties in party order, joined by
``;``.
The file is first written as ``.matches.csv.tmp`` in the same folder, flushed and fsync'ed, then
renamed, so a reader sees either no file or the whole file. Results are private to the party: the
file is created with mode 0600 and the results folder and run folder are made (or set to) 0700,
whatever the process umask.
"""

from __future__ import annotations

import csv
import os
import pathlib
import re
import shutil
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

MATCH_HEADER = ("linkage_id", "similarity", "record_id")
#: target any: per group this party's record is in, also the group's size and parties (by name,
#: in party order, joined by ";").
GROUP_HEADER = (*MATCH_HEADER, "group_size", "parties")
RUN_ID_RE = re.compile(r"^[0-9a-f]{32}$")
PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


class MatchLike(Protocol):
    @property
    def linkage_id(self) -> str: ...
    @property
    def similarity(self) -> float: ...
    @property
    def record_id(self) -> str: ...


def run_dir(results_dir: pathlib.Path, run_id: str) -> pathlib.Path:
    if not RUN_ID_RE.match(run_id):
        raise ValueError("run id must be 32 lower-case hex characters")
    return results_dir / run_id


@runtime_checkable
class GroupLike(MatchLike, Protocol):
    @property
    def group_size(self) -> int: ...
    @property
    def parties(self) -> tuple[str, ...]: ...


def write_matches(
    results_dir: pathlib.Path, run_id: str, rows: Iterable[MatchLike], groups: bool = False
) -> tuple[pathlib.Path, int]:
    """Write the matches atomically (``groups``: target any's columns); return (path, rows)."""
    folder = run_dir(results_dir, run_id)
    results_dir.parent.mkdir(parents=True, exist_ok=True)
    for d in (results_dir, folder):
        d.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        os.chmod(d, PRIVATE_DIR)
    final = folder / "matches.csv"
    tmp = folder / ".matches.csv.tmp"
    count = 0
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)  # also when a stale temp file existed with other permissions
    with open(fd, "w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(list(GROUP_HEADER if groups else MATCH_HEADER))
        for row in rows:
            line = [row.linkage_id, repr(float(row.similarity)), row.record_id]
            if groups:
                assert isinstance(row, GroupLike)
                line += [str(row.group_size), ";".join(row.parties)]
            writer.writerow(line)
            count += 1
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    return final, count


def remove_run(results_dir: pathlib.Path, run_id: str) -> None:
    """Remove the run's result folder (partial or complete), if any."""
    try:
        folder = run_dir(results_dir, run_id)
    except ValueError:
        return
    shutil.rmtree(folder, ignore_errors=True)
