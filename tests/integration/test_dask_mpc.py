"""The mpc3 circuit's batches on Dask workers (real worker processes, TLS): the same round
payloads and outcome as the node's threads, errors without data, nothing left behind."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import numpy as np
import pytest

from party.cluster import ClusterError
from party.cluster_mpc import ClusterCircuits, RoundFiles, circuits_on_cluster
from party.cluster_tasks import forget_mapped
from party.config import ClusterConfig
from party.mpc.compute import ComputeParty
from party.mpc.driver import drive, run_keys
from party.mpc.errors import MpcCancelled
from party.mpc.flight import BatchJob, BatchResult
from party.mpc.gates import Round
from party.mpc.pairs import PairComputeParty, pair_input_shares
from party.protocol.spill import LocalGauge
from party.round_channel import ROUNDS_THREAD, ChannelServer
from tests.integration.dask_support import INPUTS, inputs_case, workers_emptied
from tests.unit.mpc.helpers import recorded
from tests.unit.mpc.test_mpc3_any import any_params
from tests.unit.mpc.test_parallel_gates import _inputs
from tests.unit.protocol.test_any_target import subset_tables


def _any_inputs() -> tuple[Any, list[Any]]:
    """Target any (the default): three data parties' input shares of the pair circuit."""
    tables = subset_tables(5, 3, 60, 0.05)
    params = any_params(3, tables[0].filter_bits, 0.75)
    return params, pair_input_shares(tables, params)


def _run(params: Any, shares: list[Any], keys: list[Any], circuits: Any = None) -> Any:
    """The three compute parties (CP 0's batches on ``circuits``): outcomes and every payload."""
    kind = PairComputeParty if params.target == "any" else ComputeParty
    cps = [
        kind(i, params, keys[i], batch_sets=64, circuits=circuits if i == 0 else None)
        for i in range(3)
    ]
    for s in shares:
        cps[s.target].receive_input(s)
    sent: list[list[tuple[int, int, bytes]]] = [[], [], []]
    return drive([recorded(cp.run(), sent[i]) for i, cp in enumerate(cps)]), sent


def _same(want: Any, got: Any) -> None:
    (x, x_sent), (y, y_sent) = want, got
    assert x_sent == y_sent
    for a, b in zip(x, y, strict=True):
        if hasattr(a, "ends"):
            assert a.ends.shape[0] > 0 and np.array_equal(a.ends, b.ends)
            assert np.array_equal(a.similarities, b.similarities)
        else:
            assert a.classification.matches > 0
            assert np.array_equal(a.classification.candidates, b.classification.candidates)
            assert np.array_equal(a.classification.similarities, b.classification.similarities)
        assert (a.stats.rounds, a.stats.and_gates, a.stats.batches) == (
            b.stats.rounds,
            b.stats.and_gates,
            b.stats.batches,
        )


def _no_actors(client: Any) -> bool:
    """No worker holds an actor or serves a round channel (released asynchronously: waits up
    to a minute for it)."""
    deadline = time.monotonic() + 60
    while sum(client.run(_actors_and_channels).values()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _actors_and_channels(dask_worker: Any) -> int:
    serving = sum(t.name == ROUNDS_THREAD for t in threading.enumerate())
    return len(dask_worker.state.actors) + serving


@pytest.mark.parametrize("target", ["any", "all"])
@pytest.mark.parametrize("inputs", INPUTS)
def test_batches_on_workers_send_what_the_threads_send(  # type: ignore[no-untyped-def]
    client, target, inputs, tmp_path, monkeypatch
) -> None:
    """Compute party 0 on two workers (a window's four batches two per worker): the same
    payloads (all three parties') and outcome; shares and round payloads in files or through
    Dask; afterwards no actor, file, mapping or reservation is left."""
    params, shares = _any_inputs() if target == "any" else _inputs(3, 43)
    keys = run_keys()
    want = _run(params, shares, keys)
    assert want[0][0].stats.batches > 4
    folder, budget = inputs_case(inputs, tmp_path, monkeypatch)
    if inputs == "no room for files":
        monkeypatch.setattr(RoundFiles, "make", _no_room)
    with ClusterCircuits(client, folder=folder, memory=budget) as remote:
        got = _run(params, shares, keys, remote)
        assert remote.calls >= want[0][0].stats.rounds  # one call per batch and round
        assert remote.sent_bytes > 0
        assert (remote.mapped_bytes > 0) == (inputs == "mapped files")
        # most rounds both ways: not a batch's rounds larger than any before (not reserved)
        filed = remote.payloads_in_files
        assert (filed > remote.calls) if inputs == "mapped files" else (filed == 0)
        # a step whose payload is in its file goes over the actor's round channel
        assert (remote.channel_steps > remote.calls // 2) == (inputs == "mapped files")
        assert remote.channel_steps == 0 or inputs == "mapped files"
    _same(want, got)
    assert _no_actors(client) and workers_emptied(client)
    assert list(tmp_path.iterdir()) == [] and budget.held == 0
    if inputs == "mapped files":
        assert budget.peak >= remote.mapped_bytes
        assert all(n == 0 for n in client.run(forget_mapped, str(tmp_path)).values())


def _no_room(*_args: Any) -> None:
    raise OSError(28, "No space left on device")


class _Stingy(LocalGauge):
    """A budget that grants its first ``grants`` reservations and refuses every later one."""

    def __init__(self, grants: int) -> None:
        super().__init__(1 << 40)
        self.grants = grants

    def try_reserve(self, nbytes: int) -> bool:
        self.grants -= 1
        return self.grants >= 0 and super().try_reserve(nbytes)


def _fail_writes_after(writes: int) -> None:
    """Runs where round files are written: after ``writes`` more writes, every write finds
    tmpfs full (``_writes_again`` undoes it)."""
    import party.cluster_mpc as cluster_mpc

    left = [writes]
    write = cluster_mpc.RoundFiles.write
    cluster_mpc._unpatched_write = write  # type: ignore[attr-defined]

    def full_later(self: Any, file: int, payload: Any, at: int = 0) -> bool:
        left[0] -= 1
        return left[0] >= 0 and write(self, file, payload, at)

    cluster_mpc.RoundFiles.write = full_later  # type: ignore[method-assign]


def _writes_again() -> None:
    import party.cluster_mpc as cluster_mpc

    write = getattr(cluster_mpc, "_unpatched_write", None)
    if write is not None:
        cluster_mpc.RoundFiles.write = write  # type: ignore[method-assign]


@pytest.mark.parametrize("refused", ["by the budget", "on the node", "on the workers"])
def test_a_round_file_refused_midway_sends_its_batch_through_dask(  # type: ignore[no-untyped-def]
    client, refused, tmp_path
) -> None:
    """Round files that the budget refuses after some rounds, or that find tmpfs full on the
    node's side or a worker's: those batches go on through Dask, with the same payloads and
    outcome, and no file or reservation is left."""
    params, shares = _any_inputs()
    keys = run_keys()
    want = _run(params, shares, keys)
    with ClusterCircuits(client, folder=str(tmp_path)) as whole:
        _same(want, _run(params, shares, keys, whole))
    # three share files, then two round files on the budget (files pass from batch to batch)
    budget = _Stingy(3 + 2) if refused == "by the budget" else LocalGauge(1 << 40)
    try:
        if refused == "on the node":
            _fail_writes_after(6)
        elif refused == "on the workers":
            client.run(_fail_writes_after, 6)
        with ClusterCircuits(client, folder=str(tmp_path), memory=budget) as remote:
            got = _run(params, shares, keys, remote)
    finally:
        _writes_again()
        client.run(_writes_again)
    _same(want, got)
    assert 0 < remote.payloads_in_files < whole.payloads_in_files
    assert list(tmp_path.iterdir()) == [] and budget.held == 0
    assert _no_actors(client) and workers_emptied(client)


def test_batches_on_gated_workers_take_one_core_each(client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """One slot for two workers (the embedded cluster on a one-core machine): the same."""
    params, shares = _any_inputs()
    keys = run_keys()
    want = _run(params, shares, keys)
    with ClusterCircuits(client, folder=str(tmp_path), slots=1) as remote:
        assert remote.slots == 1
        got = _run(params, shares, keys, remote)
    _same(want, got)
    assert list(tmp_path.iterdir()) == []


def _started(client: Any, **options: Any) -> tuple[ClusterCircuits, list[Any]]:
    params, shares = _any_inputs()
    keys = run_keys()
    cp = PairComputeParty(0, params, keys[0], batch_sets=64)
    for s in shares:
        if s.target == 0:
            cp.receive_input(s)
    remote = ClusterCircuits(client, **options)
    inputs = cp._take_inputs()
    remote(cp, inputs)
    rows = np.zeros((70, 2), dtype=np.int64)
    return remote, remote.start([BatchJob(b, (0, 1), rows) for b in range(3)])


#: how a test's steps cross: through Dask, or in round files over the actors' round channels
CROSSINGS = ["through Dask", "over round channels"]


def _crossing(how: str, tmp_path: Any) -> dict[str, Any]:
    return {"folder": str(tmp_path)} if how == "over round channels" else {}


@pytest.mark.parametrize("how", CROSSINGS)
def test_a_workers_error_is_a_cluster_error_naming_the_worker_not_the_data(  # type: ignore[no-untyped-def]
    client, how, tmp_path
) -> None:
    remote, first = _started(client, **_crossing(how, tmp_path))
    assert [r.batch for r in first] == [0, 1, 2] and all(isinstance(r, Round) for r in first)
    secret = first[0].payload
    with pytest.raises(
        ClusterError, match=r"batch 0 of the circuit failed on worker tls://"
    ) as err:
        remote.step([(0, secret + b"!")])  # the worker's circuit refuses the size
    assert "MpcError" in str(err.value) and secret.hex()[:16] not in str(err.value)
    with pytest.raises(ClusterError, match="(MpcError)"):  # a failed batch is gone
        remote.step([(0, bytes(secret))])
    assert remote.channel_steps == (2 if how == "over round channels" else 0)
    remote.close()
    assert _no_actors(client) and workers_emptied(client)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", CROSSINGS)
def test_a_cancelled_circuit_stops_and_frees_the_workers(client, how, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cancel = threading.Event()
    remote, first = _started(client, cancel=cancel, **_crossing(how, tmp_path))
    cancel.set()
    with pytest.raises(MpcCancelled):
        remote.step([(r.batch, bytes(r.payload)) for r in first if isinstance(r, Round)])
    remote.close()
    assert _no_actors(client) and workers_emptied(client)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fails", ["to listen", "to be reached"])
def test_round_channels_that_do_not_open_leave_the_steps_to_dask(  # type: ignore[no-untyped-def]
    client, fails, tmp_path, monkeypatch
) -> None:
    """No socket for the channels, or actors that cannot reach it (the node then waits for
    them no longer than ``CHANNEL_TIMEOUT_S``): every step through Dask, the same payloads and
    outcome, round files still used."""
    import party.cluster_mpc as cluster_mpc

    params, shares = _any_inputs()
    keys = run_keys()
    want = _run(params, shares, keys)
    if fails == "to listen":

        def no_socket(*_args: Any) -> None:
            raise OSError(98, "Address already in use")

        monkeypatch.setattr(cluster_mpc, "ChannelServer", no_socket)
    else:  # the actors are given a path nobody listens at

        class Elsewhere(ChannelServer):
            def __init__(self, folder: str) -> None:
                super().__init__(folder)
                self.listening, self.path = self.path, str(tmp_path / "elsewhere.sock")

            def close(self) -> None:
                self.path = self.listening
                super().close()

        monkeypatch.setattr(cluster_mpc, "CHANNEL_TIMEOUT_S", 0.5)
        monkeypatch.setattr(cluster_mpc, "ChannelServer", Elsewhere)
    with ClusterCircuits(client, folder=str(tmp_path)) as remote:
        got = _run(params, shares, keys, remote)
    _same(want, got)
    assert remote.channel_steps == 0 and remote.payloads_in_files > remote.calls
    assert list(tmp_path.iterdir()) == []
    assert _no_actors(client) and workers_emptied(client)


def test_started_twice_is_refused(client) -> None:  # type: ignore[no-untyped-def]
    remote, _ = _started(client)
    with pytest.raises(ClusterError, match="started already"):
        remote(None, [])
    remote.close()


def test_a_whole_batch_ends_with_its_result(client) -> None:  # type: ignore[no-untyped-def]
    """Driving one batch by hand to its end: the result comes back and the batch is gone."""
    params, shares = _any_inputs()
    keys = run_keys()
    (outcomes, _) = _run(params, shares, keys)
    cps = [PairComputeParty(i, params, keys[i], batch_sets=64) for i in range(3)]
    for s in shares:
        cps[s.target].receive_input(s)
    remotes = [ClusterCircuits(client) for _ in range(3)]
    job = BatchJob(0, (0, 1), np.zeros((70, 2), dtype=np.int64))
    steps = [r(cp, cp._take_inputs()).start([job])[0] for r, cp in zip(remotes, cps, strict=True)]
    while isinstance(steps[0], Round):
        payloads = [bytes(s.payload) for s in steps if isinstance(s, Round)]
        steps = [r.step([(0, payloads[(i + 1) % 3])])[0] for i, r in enumerate(remotes)]
    ends = [s for s in steps if isinstance(s, BatchResult)]
    assert len(ends) == 3 and ends[0].hit.shape == (70,)
    assert ends[0].counts.rounds == outcomes[0].stats.rounds // outcomes[0].stats.batches
    for r in remotes:
        assert r._where == {}
        r.close()


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from party.synthetic.cluster import make_certs

    certs = tmp_path / "certs"
    make_certs(certs, ["node"])
    cfg = ClusterConfig(
        "tls://127.0.0.1:9", certs / "ca.pem", certs / "node.pem", certs / "node.key"
    )
    with (
        pytest.raises(ClusterError, match="cannot reach the scheduler"),
        circuits_on_cluster(cfg, None, None, None, connect_timeout=2),
    ):
        pass


@pytest.mark.slow
@pytest.mark.parametrize("how", CROSSINGS)
def test_a_lost_worker_is_a_clear_error_not_a_hang(how, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A worker killed between two rounds: its batches' state went with it (not rebuilt: their
    earlier rounds were sent), so the next step is a ClusterError naming it, not a hang."""
    import os

    from party.cluster import dask_client

    with dask_client(ClusterConfig("local"), 2) as own:
        remote, first = _started(own, **_crossing(how, tmp_path))
        lost = remote._where[0][0]
        with contextlib.suppress(Exception):  # the worker dies before it answers
            own.run(os._exit, 1, workers=[lost])
        t0 = time.monotonic()
        with pytest.raises(ClusterError, match=f"(failed on|lost with) worker {lost}"):
            remote.step([(r.batch, bytes(r.payload)) for r in first if isinstance(r, Round)])
        assert time.monotonic() - t0 < 60
        remote.close()


def test_actors_and_shares_go_to_no_more_workers_than_batches_in_flight(  # type: ignore[no-untyped-def]
    client, monkeypatch
) -> None:
    """With one batch in flight per window's worker budget (two workers), one actor on the first
    worker holds every batch, the shares go to it alone, and the run is the same."""
    import party.cluster_mpc as cluster_mpc

    monkeypatch.setattr(cluster_mpc, "BATCHES_IN_FLIGHT", 1)
    params, shares = _any_inputs()
    keys = run_keys()
    want = _run(params, shares, keys)
    seen: dict[str, Any] = {}

    class Watched(ClusterCircuits):
        def start(self, jobs):  # type: ignore[no-untyped-def]
            seen.setdefault("actors", [w for w, _ in self._actors])
            seen.setdefault("holders", set().union(*client.who_has(self._futures[:3]).values()))
            return super().start(jobs)

    with Watched(client) as remote:
        got = _run(params, shares, keys, remote)
    _same(want, got)
    first = sorted(client.scheduler_info()["workers"])[0]
    assert seen["actors"] == [first] and seen["holders"] == {first}
    assert remote.sent_bytes == sum(
        int(x.nbytes) for s in shares if s.target == 0 for x in (*s.filters, *s.counts)
    )
    assert _no_actors(client) and workers_emptied(client)
