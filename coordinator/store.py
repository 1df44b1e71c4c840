"""Durable coordinator state in SQLite (stdlib): the party registry, runs and their progress.

Schema (one file, WAL journal):
- ``parties(name PRIMARY KEY, address, identity, registered_at)``
- ``runs(run_id PRIMARY KEY, digest, parameters BLOB (serialized LinkageParameters), stage INTEGER
  (pprl.v1.Stage), reason, timeout, created_at, updated_at)``
- ``progress(run_id, party, stage, done, total, PRIMARY KEY(run_id, party))``
- ``summaries(run_id, party, summary BLOB (serialized PartySummary), PRIMARY KEY(run_id, party))``
Nothing secret or data-derived is stored: the coordinator never receives encodings, segments, c_i,
x_i or sums. On open, runs left unfinished by a previous process are marked FAILED with a reason
naming the stage they were in (they cannot be resumed: parties dropped them with the connection).
"""

from __future__ import annotations

import pathlib
import sqlite3
import time
from dataclasses import dataclass

from proto import common_pb2, coordinator_pb2, linkage

S = common_pb2.Stage
TERMINAL = (S.STAGE_DONE, S.STAGE_FAILED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS parties (
  name TEXT PRIMARY KEY, address TEXT NOT NULL, identity TEXT NOT NULL, registered_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, digest TEXT NOT NULL, parameters BLOB NOT NULL, stage INTEGER NOT NULL,
  reason TEXT NOT NULL DEFAULT '', timeout REAL NOT NULL, created_at REAL NOT NULL,
  updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS progress (
  run_id TEXT NOT NULL, party TEXT NOT NULL, stage INTEGER NOT NULL, done INTEGER NOT NULL,
  total INTEGER NOT NULL, PRIMARY KEY (run_id, party));
CREATE TABLE IF NOT EXISTS summaries (
  run_id TEXT NOT NULL, party TEXT NOT NULL, summary BLOB NOT NULL, PRIMARY KEY (run_id, party));
"""


@dataclass(frozen=True)
class PartyRecord:
    name: str
    address: str
    identity: str
    registered_at: float


class Store:
    def __init__(self, path: pathlib.Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    def recover(self) -> list[tuple[str, list[str]]]:
        """Mark unfinished runs FAILED; return [(run_id, parties)] so callers can tell the parties."""
        rows = self.db.execute(
            "SELECT run_id, parameters, stage FROM runs WHERE stage NOT IN (?, ?)", TERMINAL
        ).fetchall()
        out = []
        for run_id, blob, stage in rows:
            name = S.Name(stage).removeprefix("STAGE_").lower()
            self.set_stage(
                run_id, S.STAGE_FAILED, f"the coordinator restarted while the run was {name}"
            )
            params = common_pb2.LinkageParameters.FromString(blob)
            out.append((run_id, list(linkage.participants(params))))
        return out

    # -- parties -------------------------------------------------------------------------------

    def register(self, name: str, address: str, identity: str) -> None:
        self.db.execute(
            "INSERT INTO parties VALUES (?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET "
            "address=excluded.address, identity=excluded.identity, registered_at=excluded.registered_at",
            (name, address, identity, time.time()),
        )

    def parties(self) -> dict[str, PartyRecord]:
        rows = self.db.execute(
            "SELECT name, address, identity, registered_at FROM parties ORDER BY name"
        )
        return {r[0]: PartyRecord(*r) for r in rows}

    # -- runs ----------------------------------------------------------------------------------

    def create_run(
        self, run_id: str, digest: str, params: common_pb2.LinkageParameters, timeout: float
    ) -> None:
        now = time.time()
        self.db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, '', ?, ?, ?)",
            (run_id, digest, params.SerializeToString(), S.STAGE_CREATED, timeout, now, now),
        )

    def set_stage(self, run_id: str, stage: int, reason: str = "") -> None:
        self.db.execute(
            "UPDATE runs SET stage=?, reason=?, updated_at=? WHERE run_id=?",
            (stage, reason, time.time(), run_id),
        )

    def set_progress(self, run_id: str, p: common_pb2.Progress) -> None:
        self.db.execute(
            "INSERT INTO progress VALUES (?, ?, ?, ?, ?) ON CONFLICT(run_id, party) DO UPDATE SET "
            "stage=excluded.stage, done=excluded.done, total=excluded.total",
            (run_id, p.party, p.stage, p.done, p.total),
        )

    def set_summary(self, run_id: str, summary: common_pb2.PartySummary) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO summaries VALUES (?, ?, ?)",
            (run_id, summary.party, summary.SerializeToString()),
        )

    def run_exists(self, run_id: str) -> bool:
        return (
            self.db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is not None
        )

    def stage(self, run_id: str) -> int | None:
        row = self.db.execute("SELECT stage FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None else int(row[0])

    def status(self, run_id: str) -> coordinator_pb2.RunStatus | None:
        row = self.db.execute(
            "SELECT digest, parameters, stage, reason, created_at, updated_at FROM runs WHERE run_id=?",
            (run_id,),
        ).fetchone()
        if row is None:
            return None
        digest, blob, stage, reason, created, updated = row
        params = common_pb2.LinkageParameters.FromString(blob)
        nodes = linkage.participants(params)  # the parties, then any helper compute node
        prog = {
            r[0]: common_pb2.Progress(party=r[0], stage=r[1], done=r[2], total=r[3])
            for r in self.db.execute(
                "SELECT party, stage, done, total FROM progress WHERE run_id=?", (run_id,)
            )
        }
        sums = {
            r[0]: common_pb2.PartySummary.FromString(r[1])
            for r in self.db.execute(
                "SELECT party, summary FROM summaries WHERE run_id=?", (run_id,)
            )
        }
        return coordinator_pb2.RunStatus(
            run_id=run_id,
            stage=stage,
            reason=reason,
            parties=[prog.get(p, common_pb2.Progress(party=p)) for p in nodes],
            summaries=[sums[p] for p in nodes if p in sums],
            parameters_digest=digest,
            created_at=created,
            updated_at=updated,
        )
