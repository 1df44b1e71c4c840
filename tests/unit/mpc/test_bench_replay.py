"""scripts/bench_scaling.py: compute parties 1 and 2 recorded and replayed, and the shared core."""

from __future__ import annotations

import os

import numpy as np
import pytest

from party.mpc.driver import drive, run_keys
from tests.scripts import load_script
from tests.unit.mpc.test_flight import _parties
from tests.unit.mpc.test_parallel_gates import _inputs

bench = load_script("bench_scaling")


def _same(x, y) -> bool:  # type: ignore[no-untyped-def]
    return np.array_equal(
        x.classification.candidates, y.classification.candidates
    ) and np.array_equal(x.classification.similarities, y.classification.similarities)


def test_compute_party_0_alone_replays_the_recorded_run() -> None:
    """What CP 0 receives and sends is recorded in a run of the three; CP 0 alone, given the
    recorded payloads, sends the same and reaches the same outcome as the three together."""
    params, shares = _inputs(3, 43)
    keys = run_keys()
    together = drive([cp.run() for cp in _parties(params, shares, keys)])
    outcomes, received, sent = bench.record_peers(
        [cp.run() for cp in _parties(params, shares, keys)]
    )
    assert _same(outcomes[0], together[0])
    assert len(received) == len(sent) == together[0].stats.rounds
    alone = bench.replay_peers(_parties(params, shares, keys)[0].run(), received, sent)
    assert _same(alone, together[0])


def test_a_replay_that_sends_anything_else_is_refused() -> None:
    params, shares = _inputs(3, 43)
    keys = run_keys()
    _, received, sent = bench.record_peers([cp.run() for cp in _parties(params, shares, keys)])
    step = len(sent) // 2
    changed = list(sent)
    changed[step] = bytes([sent[step][0] ^ 1]) + sent[step][1:]
    with pytest.raises(ValueError, match=f"at step {step}$"):
        bench.replay_peers(_parties(params, shares, keys)[0].run(), received, changed)
    with pytest.raises(ValueError, match="more steps than recorded"):
        bench.replay_peers(_parties(params, shares, keys)[0].run(), received[:-1], sent[:-1])
    other = run_keys()  # other keys: CP 0's very first payload differs
    with pytest.raises(ValueError, match="at step 0$"):
        bench.replay_peers(_parties(params, shares, other)[0].run(), received, sent)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="threads are pinned on Linux")
@pytest.mark.parametrize("where", ["core", "others"])
def test_busy_neighbours_pin_the_thread_beside_them_and_restore_it(where: str) -> None:
    """ "core": one neighbour on the thread's core; "others": one on each other core."""
    before = os.sched_getaffinity(0)
    if where == "others" and len(before) < 2:
        pytest.skip("one core: no other core to keep busy")
    with bench.busy_neighbours(where) as pinned:
        assert pinned
        core = os.sched_getaffinity(0)
        assert core == {min(before)}
        children = [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == os.getpid()]
        neighbours = [p for p in children if "hashlib.sha256" in _cmdline(p)]
        at = sorted(min(os.sched_getaffinity(int(p))) for p in neighbours)
        assert at == (sorted(core) if where == "core" else sorted(before - core))
    assert os.sched_getaffinity(0) == before
    assert not any(
        os.path.exists(f"/proc/{p}/cmdline") and _parent(p) == os.getpid() for p in neighbours
    )


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
