"""Loader for users' own multi-party CSV datasets with a ground-truth file, for benchmarks.

Input: one CSV per party (UTF-8, header row; an id column, default `rec_id`, with ids unique within the
file) and one ground-truth CSV with columns `entity_id`, `party` and `rec_id` (names configurable).
`party` is either the 0-based index of the party's file in the list given, or the file's name without
`.csv` (e.g. `party-0` or `hospital_a`). Records absent from the truth file are singletons. Only the id
column of each data file is held in memory; record values are never read into errors or logs.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from party.errors import PprlError
from party.synthetic.truth import GroundTruth, truth_from_labels


class DatasetError(PprlError):
    """An external dataset that cannot be used: missing file or column, duplicate or unknown id."""


@dataclass(frozen=True)
class ExternalDataset:
    """Paths of the party files (in party order), their header columns, and the ground truth."""

    data_files: tuple[Path, ...]
    columns: tuple[tuple[str, ...], ...]
    id_column: str
    truth: GroundTruth

    @property
    def parties(self) -> int:
        return len(self.data_files)


def _open(path: Path, what: str) -> TextIO:
    try:
        return path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc


def _read_ids(
    path: Path, id_column: str, required: Sequence[str]
) -> tuple[tuple[str, ...], list[str]]:
    with _open(path, "data file") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise DatasetError(f"{path}: empty file (no header row)") from None
        except (UnicodeDecodeError, csv.Error) as exc:
            raise DatasetError(f"{path} row 1: unreadable header ({type(exc).__name__})") from None
        header = [h.strip() for h in header]
        missing = [c for c in (id_column, *required) if c not in header]
        if missing:
            raise DatasetError(f"{path}: missing column(s) {', '.join(dict.fromkeys(missing))}")
        col = header.index(id_column)
        ids: list[str] = []
        seen: dict[str, int] = {}
        try:
            for row_no, row in enumerate(reader, start=2):
                if not row:
                    continue
                if len(row) != len(header):
                    raise DatasetError(
                        f"{path} row {row_no}: {len(row)} fields, the header has {len(header)}"
                    )
                rid = row[col].strip()
                if not rid:
                    raise DatasetError(f"{path} row {row_no}: empty {id_column}")
                if rid in seen:
                    raise DatasetError(
                        f"{path} row {row_no}: duplicate {id_column} (first at row {seen[rid]})"
                    )
                seen[rid] = row_no
                ids.append(rid)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise DatasetError(
                f"{path} row {reader.line_num}: unreadable ({type(exc).__name__})"
            ) from None
    return tuple(header), ids


def load(
    data_files: Sequence[str | Path],
    truth_file: str | Path,
    *,
    id_column: str = "rec_id",
    required_columns: Sequence[str] = (),
    truth_columns: tuple[str, str, str] = ("entity_id", "party", "rec_id"),
) -> ExternalDataset:
    """Check and load an external dataset (see module docstring); raises DatasetError.

    `required_columns` (e.g. the schema's field names) must be present in every data file.
    """
    paths = tuple(Path(p) for p in data_files)
    if len(paths) < 2:
        raise DatasetError(f"need at least 2 party data files, got {len(paths)}")
    headers = []
    all_ids = []
    for path in paths:
        header, ids = _read_ids(path, id_column, required_columns)
        headers.append(header)
        all_ids.append(ids)
    index_of = [{rid: i for i, rid in enumerate(ids)} for ids in all_ids]
    names = {p.stem: i for i, p in enumerate(paths)}
    labels: list[list[str | None]] = [[None] * len(ids) for ids in all_ids]

    ent_col, party_col, rid_col = truth_columns
    tpath = Path(truth_file)
    with _open(tpath, "truth file") as fh:
        reader = csv.DictReader(fh)
        try:
            fieldnames = [f.strip() for f in (reader.fieldnames or [])]
        except (UnicodeDecodeError, csv.Error):
            raise DatasetError(f"{tpath} row 1: unreadable header") from None
        missing = [c for c in truth_columns if c not in fieldnames]
        if missing:
            raise DatasetError(f"{tpath}: missing column(s) {', '.join(missing)}")
        reader.fieldnames = fieldnames
        try:
            for row_no, row in enumerate(reader, start=2):
                party_val = (row.get(party_col) or "").strip()
                if party_val in names:
                    party = names[party_val]
                elif party_val.isdigit() and int(party_val) < len(paths):
                    party = int(party_val)
                else:
                    raise DatasetError(
                        f"{tpath} row {row_no}: {party_col} is neither a party index "
                        f"0..{len(paths) - 1} nor a data file name"
                    )
                rid = (row.get(rid_col) or "").strip()
                idx = index_of[party].get(rid)
                if idx is None:
                    raise DatasetError(
                        f"{tpath} row {row_no}: {rid_col} is not in {paths[party].name}"
                    )
                if labels[party][idx] is not None:
                    raise DatasetError(
                        f"{tpath} row {row_no}: record listed twice for party {party}"
                    )
                ent = (row.get(ent_col) or "").strip()
                if not ent:
                    raise DatasetError(f"{tpath} row {row_no}: empty {ent_col}")
                labels[party][idx] = ent
        except (UnicodeDecodeError, csv.Error) as exc:
            raise DatasetError(
                f"{tpath} row {reader.line_num}: unreadable ({type(exc).__name__})"
            ) from None
    truth = truth_from_labels(all_ids, labels)
    return ExternalDataset(paths, tuple(headers), id_column, truth)


def party_files_in(
    folder: str | Path,
    party_files: Sequence[str | Path] | None = None,
    truth_file: str | Path = "truth.csv",
) -> list[Path]:
    """The party data files of a dataset folder, in party order.

    ``party_files`` (names relative to the folder, or paths) are taken as given. Otherwise the
    folder's ``party-0.csv``, ``party-1.csv``, ... when ``party-0.csv`` exists (as write_dataset
    makes), else every ``*.csv`` in it except the truth file, sorted by name.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"dataset folder {folder} does not exist")
    if party_files:
        files = [folder / p for p in party_files]
        for f in files:
            if not f.is_file():
                raise DatasetError(f"party file {f} does not exist")
        if len(set(files)) != len(files):
            raise DatasetError("a party file is listed more than once")
        return files
    if (folder / "party-0.csv").exists():
        files = []
        i = 0
        while (folder / f"party-{i}.csv").exists():
            files.append(folder / f"party-{i}.csv")
            i += 1
        return files
    truth = (folder / truth_file).resolve()
    files = sorted(p for p in folder.glob("*.csv") if p.resolve() != truth)
    if len(files) < 2:
        raise DatasetError(
            f"{folder}: found {len(files)} party CSV file(s) besides the truth file; "
            "name them with --party-files"
        )
    return files


def load_folder(
    folder: str | Path,
    *,
    party_files: Sequence[str | Path] | None = None,
    truth_file: str | Path = "truth.csv",
    **kwargs: object,
) -> ExternalDataset:
    """Load a dataset folder: the party files (``party_files_in``) and the truth file (a name in
    the folder, or a path); other keywords go to ``load`` (id column, truth column names)."""
    files = party_files_in(folder, party_files, truth_file)
    truth = Path(folder) / truth_file
    if not truth.is_file():
        raise DatasetError(f"truth file {truth} does not exist")
    return load(files, truth, **kwargs)  # type: ignore[arg-type]
