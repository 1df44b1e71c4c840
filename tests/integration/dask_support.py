"""What the tests of the comparison on Dask workers share (``test_dask_pairs``, ``test_dask_blocks``)."""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from party.cluster import ClusterError, dask_client
from party.cluster_tasks import ClusterTasks, Mapped, forget_mapped
from party.config import ClusterConfig
from party.encoding.records import EncodedRecords
from party.protocol.driver import exchange_in_process
from party.protocol.engine import PartyEngine
from party.protocol.params import ProtocolParameters
from party.protocol.spill import LocalGauge

#: how a test's inputs reach the workers
INPUTS = ["through Dask", "mapped files", "no room for files", "budget refuses files"]


def exchanged(
    kind: Callable[..., PartyEngine], tables: list[EncodedRecords], prm: ProtocolParameters
) -> list[Any]:
    """``kind`` engines after the segment exchange (the same pseudonyms every time), on one
    kernel thread."""
    rng = random.Random(11)
    engines = [kind(i, prm, t, random_bytes=rng.randbytes, workers=1) for i, t in enumerate(tables)]
    exchange_in_process(engines)
    return engines


def compared(engines: list[Any], remote: Callable[[Any], ClusterTasks] | None = None) -> list[Any]:
    """The engines compared, on their kernel thread or each on ``remote(engine)``."""
    for e in engines:
        if remote is None:
            e.compare()
        else:
            with remote(e) as tasks:
                e.compare(remote=tasks)
    return engines


def compared_on_own_scheduler(
    cluster: ClusterConfig, engines: list[Any], kind: Callable[[Any], ClusterTasks]
) -> list[Any]:
    """The engines compared on the party's own ``tls://`` scheduler (``own_scheduler``: its
    two workers started as processes), each on ``kind(client)``."""
    with dask_client(cluster, connect_timeout=120) as own:
        own.wait_for_workers(2, timeout=120)
        return compared(engines, lambda _e: kind(own))


def survivor_rows(engine: PartyEngine) -> np.ndarray:
    assert engine._survivors is not None
    parts = list(engine._survivors.chunks(1 << 16))
    return np.concatenate(parts) if parts else np.zeros((0, engine.parties + 1), np.uint64)


def equal_engines(want: list[Any], got: list[Any], fields: tuple[str, ...]) -> None:
    """Each pair of engines has the same survivor rows (some) in the same order and the same
    ``fields`` of their comparison stats; both closed after."""
    for x, y in zip(want, got, strict=True):
        rows = survivor_rows(x)
        assert rows.shape[0] > 0
        assert np.array_equal(rows, survivor_rows(y))
        for field in fields:
            assert getattr(x.comparison_stats, field) == getattr(y.comparison_stats, field), field
        x.close()
        y.close()


def workers_emptied(client: Any) -> bool:
    """The workers hold no data of this client's (cancelled futures are released
    asynchronously: waits up to a minute for it)."""
    deadline = time.monotonic() + 60
    while any(client.has_what().values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def inputs_case(
    inputs: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[str | None, LocalGauge]:
    """(tmpfs folder or None, memory budget) for one of ``INPUTS``: through Dask (no folder),
    mapped files, files that find no room (ENOSPC) or a budget that refuses them."""
    if inputs == "no room for files":

        def full(*_args: Any) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(Mapped, "write", full)
    folder = None if inputs == "through Dask" else str(tmp_path)
    return folder, LocalGauge(0 if inputs == "budget refuses files" else 1 << 40)


def check_inputs_after(
    inputs: str, made: list[ClusterTasks], client: Any, tmp_path: Any, budget: LocalGauge
) -> None:
    """After the comparisons of ``inputs_case(inputs, ...)``: several tasks each, bytes both
    ways, nothing left on the workers; files only when mapped, their bytes reserved, then
    unmapped, removed and released."""
    for tasks in made:
        assert tasks.tasks > len(tasks.workers), tasks.tasks
        assert tasks.sent_bytes > 0 and tasks.received_bytes > 0
    assert workers_emptied(client)
    if inputs == "mapped files":
        assert all(tasks.mapped_bytes > 0 for tasks in made)
        assert budget.peak >= max(tasks.mapped_bytes for tasks in made)
        assert all(n == 0 for n in client.run(forget_mapped, str(tmp_path)).values())
    else:
        assert all(tasks.mapped_bytes == 0 for tasks in made)
    assert list(tmp_path.iterdir()) == []  # removed at the end
    assert budget.held == 0


class LosesAWorker:
    """Mixed into ClusterPairs or ClusterBlocks: its first worker dies once every task is
    submitted, before the first result is taken."""

    lost = False
    client: Any
    workers: list[str]

    def _result(self, *args: Any) -> Any:
        if not self.lost:
            self.lost = True
            with contextlib.suppress(Exception):  # the worker dies before it answers
                self.client.run(os._exit, 1, workers=[self.workers[0]])
        return super()._result(*args)  # type: ignore[misc]


def compare_losing_a_worker(
    kind: type[ClusterTasks], engine: Any, want: np.ndarray, folder: str | None, recovers: bool
) -> None:
    """``engine`` compared on a fresh 2-worker embedded cluster whose first worker dies after
    the tasks were sent: when it ``recovers`` (its tasks run again on the other worker) the
    rows are ``want``, else (inputs Dask held only there are lost) a ClusterError, not a hang.
    The engine is closed after."""
    losing = type("Losing", (LosesAWorker, kind), {})
    with dask_client(ClusterConfig("local"), 2) as own, losing(own, folder=folder) as tasks:
        if recovers:
            engine.compare(remote=tasks)
            assert np.array_equal(survivor_rows(engine), want) and want.shape[0] > 0
        else:
            with pytest.raises(ClusterError, match="failed on worker"):
                engine.compare(remote=tasks)
        assert tasks.lost
    engine.close()
