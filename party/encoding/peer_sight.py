"""First sight shared by lanes among themselves, through a job directory, without waiting.

Lanes that read their own ranges of a CSV (``parallel._PeerLanes``) meet mostly the same names,
dates of birth and towns. Before encoding a range a lane installs the memo entries the other
lanes have published for it so far (``take``); while encoding, its encoder records every memo
entry it computes (the ``fresh`` lists of its unsalted fields' codecs and of its blocking part
memos: the encoder's own results, so each is exactly what any copy of the encoder would store),
and after the range the lane publishes them (``publish``): one pickle per publication,
hard-linked once per other lane (``sight-<reader>-<writer>-<n>``) and removed by its reader once
installed, so the directory holds only what a lane has not read yet.

No lane ever waits for another: a value two lanes meet at the same moment is computed by both
(a cost, never a different output: entries are a pure function of the value, installing one a
lane already has changes nothing, and a lane that lacks one computes it while encoding).
"""

from __future__ import annotations

import contextlib
import os
import pickle
from dataclasses import dataclass, field

import numpy as np

from party.encoding.encoder import Encoder
from party.encoding.first_sight import SightEntries, install_entries, part_memos


@dataclass
class PeerSight:
    """One lane's side of the exchange for one job: lane ``lane`` of ``lanes``, publishing to
    and reading from ``folder`` (None: no exchange, the lane computes every value itself)."""

    encoder: Encoder
    lane: int
    lanes: int
    folder: str | None
    published: int = 0
    installed: int = 0  # values installed from other lanes (statistics)
    _memo_number: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.folder is None or self.lanes < 2:
            return
        for codec in self.encoder._codecs.values():
            if not codec.salted:
                codec.fresh = []
        for m, (keyer, i, _) in enumerate(part_memos(self.encoder)):
            memo = keyer._part_memo[i]
            memo.fresh = []
            self._memo_number[id(memo)] = m

    def take(self) -> None:
        """Install every publication other lanes made for this lane that is not read yet."""
        if self.folder is None:
            return
        mine = f"sight-{self.lane}-"
        with os.scandir(self.folder) as it:
            names = sorted(e.name for e in it if e.name.startswith(mine))
        for name in names:
            path = os.path.join(self.folder, name)
            try:
                with open(path, "rb") as fh:
                    entries = pickle.load(fh)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            install_entries(self.encoder, entries)
            self.installed += len(entries)

    def _collect(self) -> SightEntries:
        """The entries the encoder computed since the last call (its ``fresh`` lists emptied)."""
        out = SightEntries()
        for name, codec in self.encoder._codecs.items():
            if codec.fresh:
                vals = [v for block in codec.fresh for v in block[0]]
                codes = np.concatenate([block[1] for block in codec.fresh])
                rows = np.concatenate([block[2] for block in codec.fresh])
                out.filters[name] = (vals, codes, rows)
                codec.fresh.clear()
        for keyer, i, _ in part_memos(self.encoder):
            memo = keyer._part_memo[i]
            if memo.fresh:
                vals = [v for block in memo.fresh for v in block[0]]
                out.parts[self._memo_number[id(memo)]] = (
                    vals,
                    np.concatenate([block[1] for block in memo.fresh]),
                )
                memo.fresh.clear()
        return out

    def publish(self) -> None:
        """Publish what the encoder computed since the last publication: one file, linked once
        for every other lane (atomic: a reader sees a name only once its file is complete); a
        full tmpfs only skips the publication."""
        if self.folder is None or self.lanes < 2:
            return
        entries = self._collect()
        if not len(entries):
            return
        n = self.published
        self.published += 1
        draft = os.path.join(self.folder, f"draft-{self.lane}-{n}")
        try:
            with open(draft, "wb") as fh:
                pickle.dump(entries, fh, protocol=pickle.HIGHEST_PROTOCOL)
            for reader in range(self.lanes):
                if reader != self.lane:
                    name = f"sight-{reader}-{self.lane}-{n:06d}"
                    os.link(draft, os.path.join(self.folder, name))
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(draft)
