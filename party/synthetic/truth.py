"""Ground truth of a multi-party dataset: which record at which party belongs to which entity.

File format (`truth.csv`): UTF-8 CSV with header `entity_id,party,rec_id`, one row per record that
belongs to a known entity. `party` is the 0-based party index (the i of `party-<i>.csv`); `rec_id` is
the record's id in that party's file; `entity_id` is any string (the generator writes `e<number>`).
Records absent from the truth file are treated as entities of their own (they match nothing).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from party.errors import PprlError

TRUTH_HEADER = ("entity_id", "party", "rec_id")


class TruthError(PprlError):
    """A ground-truth file or object that is malformed or inconsistent with the data."""


@dataclass(frozen=True)
class GroundTruth:
    """Per party, the record ids (in file order) and the entity code of each record.

    `entity_ids[p][i]` is an int64 code for the entity of `record_ids[p][i]`; codes are shared across
    parties; `labels[code]` is the entity's label as written to truth.csv. Records with no known
    entity carry code -1 (they are singletons).
    """

    record_ids: tuple[tuple[str, ...], ...]
    entity_ids: tuple[np.ndarray, ...]
    labels: tuple[str, ...]
    _lookups: dict[int, dict[str, int]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.record_ids) != len(self.entity_ids):
            raise TruthError("ground truth: record ids and entity ids cover different party counts")
        for p, (ids, ents) in enumerate(zip(self.record_ids, self.entity_ids, strict=True)):
            if len(ids) != len(ents):
                raise TruthError(
                    f"ground truth: party {p} has {len(ids)} ids but {len(ents)} codes"
                )

    @property
    def parties(self) -> int:
        return len(self.record_ids)

    def lookup(self, party: int) -> dict[str, int]:
        """rec_id -> entity code for one party (built once, then cached)."""
        if not 0 <= party < self.parties:
            raise TruthError(f"ground truth: no party {party} (have {self.parties})")
        got = self._lookups.get(party)
        if got is None:
            got = dict(zip(self.record_ids[party], self.entity_ids[party].tolist(), strict=True))
            self._lookups[party] = got
        return got

    def complete_entities(self) -> np.ndarray:
        """Sorted codes of the entities with at least one record at every party."""
        common: np.ndarray | None = None
        for ents in self.entity_ids:
            present = np.unique(ents[ents >= 0])
            common = present if common is None else np.intersect1d(common, present)
        return common if common is not None else np.zeros(0, dtype=np.int64)

    def write(self, path: str | Path) -> None:
        """Write truth.csv (rows for records with a known entity, party by party, in file order)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(TRUTH_HEADER)
            for p, (ids, ents) in enumerate(zip(self.record_ids, self.entity_ids, strict=True)):
                labels = self.labels
                w.writerows(
                    (labels[e], p, rid) for rid, e in zip(ids, ents.tolist(), strict=True) if e >= 0
                )
        tmp.replace(path)


def truth_from_labels(
    record_ids: Sequence[Sequence[str]], entity_labels: Sequence[Sequence[str | None]]
) -> GroundTruth:
    """Build a GroundTruth from per-party record ids and entity labels (None = unknown entity)."""
    codes: dict[str, int] = {}
    ents = []
    for labels in entity_labels:
        arr = np.empty(len(labels), dtype=np.int64)
        for i, lab in enumerate(labels):
            arr[i] = -1 if lab is None else codes.setdefault(lab, len(codes))
        ents.append(arr)
    return GroundTruth(
        record_ids=tuple(tuple(ids) for ids in record_ids),
        entity_ids=tuple(ents),
        labels=tuple(codes),
    )
