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

import contextlib
import csv
import io
import os
import pathlib
import re
import shutil
from collections.abc import Iterable, Iterator
from typing import Protocol, TextIO, runtime_checkable

import numpy as np

from party.node._numba_csv import label_widths, put_fields, put_labels
from party.protocol.classify import ResolvedMatches

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


@contextlib.contextmanager
def _private_atomic_file(results_dir: pathlib.Path, run_id: str) -> Iterator[TextIO]:
    """A text file that becomes ``<results>/<run-id>/matches.csv`` (mode 0600, folders 0700) only
    when the block completes: written as a temporary file, flushed, fsync'ed, then renamed."""
    folder = run_dir(results_dir, run_id)
    results_dir.parent.mkdir(parents=True, exist_ok=True)
    for d in (results_dir, folder):
        d.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        os.chmod(d, PRIVATE_DIR)
    final = folder / "matches.csv"
    tmp = folder / ".matches.csv.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    os.fchmod(fd, PRIVATE_FILE)  # also when a stale temp file existed with other permissions
    with open(fd, "w", encoding="utf-8", newline="") as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)


def _line(row: MatchLike, groups: bool) -> list[str]:
    line = [row.linkage_id, repr(float(row.similarity)), row.record_id]
    if groups:
        assert isinstance(row, GroupLike)
        line += [str(row.group_size), ";".join(row.parties)]
    return line


def write_matches(
    results_dir: pathlib.Path, run_id: str, rows: Iterable[MatchLike], groups: bool = False
) -> tuple[pathlib.Path, int]:
    """Write the matches atomically (``groups``: target any's columns); return (path, rows)."""
    count = 0
    with _private_atomic_file(results_dir, run_id) as fh:
        writer = csv.writer(fh)
        writer.writerow(list(GROUP_HEADER if groups else MATCH_HEADER))
        for row in rows:
            writer.writerow(_line(row, groups))
            count += 1
    return run_dir(results_dir, run_id) / "matches.csv", count


#: Characters that make the csv module quote a field (QUOTE_MINIMAL with the default dialect).
_NEEDS_QUOTES = (",", '"', "\r", "\n")


def _similarity_texts(similarities: np.ndarray) -> list[str]:
    """``repr`` of each similarity, computed once per distinct value (Dice values repeat a lot)."""
    distinct, inverse = np.unique(similarities, return_inverse=True)
    texts = [repr(v) for v in distinct.tolist()]
    return [texts[i] for i in inverse.ravel().tolist()]


def _text_column(texts: list[str], index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A column of ASCII texts chosen per row from ``texts`` by ``index``: (bytes of the texts,
    each row's start in them, each row's length)."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    blob = np.frombuffer("".join(texts).encode("ascii"), dtype=np.uint8)
    return blob, (np.cumsum(lengths) - lengths)[index], lengths[index]


def _joined_lines(
    linkage_ids: np.ndarray, columns: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> str:
    """CSV lines of the linkage labels and text columns given as ``_text_column`` gives them:
    fields joined by ",", each line ended by CRLF (byte copies compiled: ``_numba_csv``)."""
    ids = np.ascontiguousarray(linkage_ids, dtype=np.uint64)
    if ids.shape[0] == 0:
        return ""
    widths = label_widths(ids)
    line = widths + sum(lengths for _, _, lengths in columns) + len(columns) + 2
    ends = np.cumsum(line)
    out = np.full(int(ends[-1]), ord(","), dtype=np.uint8)
    out[ends - 2] = ord("\r")
    out[ends - 1] = ord("\n")
    at = ends - line
    put_labels(out, at, ids, widths)
    at = at + widths + 1  # where each row's next field starts
    for blob, starts, lengths in columns:
        put_fields(out, at, blob, starts, lengths)
        at = at + lengths + 1
    return out.tobytes().decode("ascii")


def _party_texts(group_parties: list[tuple[str, ...]]) -> tuple[list[str], np.ndarray]:
    """(the distinct party lists joined by ";"; each row's index in them). Rows share a few
    tuple objects: rows are grouped by object identity in numpy (no tuple hash per row), the
    distinct objects by value."""
    k = len(group_parties)
    oids = np.fromiter(map(id, group_parties), dtype=np.uint64, count=k)
    _, first, index = np.unique(oids, return_index=True, return_inverse=True)
    texts: dict[tuple[str, ...], int] = {}
    slot = np.array(
        [texts.setdefault(group_parties[i], len(texts)) for i in first.tolist()], dtype=np.int64
    )
    index = slot[index.ravel()] if k else np.zeros(0, dtype=np.int64)
    return [";".join(t) for t in texts], index


def _csv_lines(chunk: ResolvedMatches, groups: bool) -> str:
    """The CSV lines of a chunk, byte for byte what ``write_matches`` writes for the same rows:
    ASCII fields that need no quotes are assembled with numpy and compiled copies, others by
    the csv module (fields with quotes) or joined in Python (non-ASCII record ids)."""
    if groups and (chunk.group_sizes is None or chunk.group_parties is None):
        raise ValueError("target any's results need group sizes and parties")
    parties: list[str] = []
    party_index = np.zeros(0, dtype=np.int64)
    if groups:
        assert chunk.group_parties is not None
        parties, party_index = _party_texts(chunk.group_parties)
    ids = "".join(chunk.record_ids)
    text = ids + "".join(parties)
    quoted = any(ch in text for ch in _NEEDS_QUOTES)
    if quoted or not text.isascii():
        cols = [chunk.labels(), _similarity_texts(chunk.similarities), chunk.record_ids]
        if groups:
            assert chunk.group_sizes is not None
            cols += [
                [str(n) for n in chunk.group_sizes.tolist()],
                [parties[i] for i in party_index.tolist()],
            ]
        if quoted:  # fields with commas, quotes or line breaks: quoted by the csv module
            out = io.StringIO(newline="")
            csv.writer(out).writerows(zip(*cols, strict=True))
            return out.getvalue()
        return "".join(f"{line}\r\n" for line in map(",".join, zip(*cols, strict=True)))
    k = len(chunk.record_ids)
    sims, sim_index = np.unique(chunk.similarities, return_inverse=True)
    id_lengths = np.fromiter(map(len, chunk.record_ids), dtype=np.int64, count=k)
    columns = [
        _text_column([repr(v) for v in sims.tolist()], sim_index.ravel()),
        (
            np.frombuffer(ids.encode("ascii"), dtype=np.uint8),
            np.cumsum(id_lengths) - id_lengths,
            id_lengths,
        ),
    ]
    if groups:
        assert chunk.group_sizes is not None
        sizes, size_index = np.unique(chunk.group_sizes, return_inverse=True)
        columns.append(_text_column([str(n) for n in sizes.tolist()], size_index.ravel()))
        columns.append(_text_column(parties, party_index))
    return _joined_lines(chunk.linkage_ids, columns)


def write_match_chunks(
    results_dir: pathlib.Path, run_id: str, chunks: Iterable[ResolvedMatches], groups: bool = False
) -> tuple[pathlib.Path, int]:
    """``write_matches`` of resolved chunks (columns), formatted a chunk at a time; the same file."""
    count = 0
    with _private_atomic_file(results_dir, run_id) as fh:
        csv.writer(fh).writerow(list(GROUP_HEADER if groups else MATCH_HEADER))
        for chunk in chunks:
            if len(chunk):
                fh.write(_csv_lines(chunk, groups))
                count += len(chunk)
    return run_dir(results_dir, run_id) / "matches.csv", count


def remove_run(results_dir: pathlib.Path, run_id: str) -> None:
    """Remove the run's result folder (partial or complete), if any."""
    try:
        folder = run_dir(results_dir, run_id)
    except ValueError:
        return
    shutil.rmtree(folder, ignore_errors=True)
