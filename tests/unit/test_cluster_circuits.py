"""The mpc3 circuit on the party's Dask workers without a cluster: where a window's batches go
(``place_batches``: distinct actors, the actors' candidate sets even across windows) and how a
step crosses (``to_wire``: a round's payload as a buffer Dask sends as it is; ``RoundFiles``:
in a file of the embedded cluster's folder)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from party.cluster import ClusterError
from party.cluster_mpc import RoundFiles, from_wire, place_batches, to_wire
from party.mpc.flight import BatchResult, GateCounts
from party.mpc.gates import Round


def test_a_first_window_of_equal_batches_goes_to_the_actors_in_order() -> None:
    given = [0, 0, 0, 0]
    assert place_batches([10, 10, 10, 10], given) == [0, 1, 2, 3]
    assert given == [10, 10, 10, 10]


def test_the_largest_batch_goes_to_the_actor_given_the_fewest_sets() -> None:
    given = [30, 12, 30, 20]
    assert place_batches([5, 40, 7, 6], given) == [2, 1, 3, 0]  # ties: the first actor
    assert given == [36, 52, 35, 27]


def test_a_pairs_smaller_last_batch_does_not_keep_landing_on_one_actor() -> None:
    """Three pairs of parties of eight batches each, the last of each smaller (3 x 400k: 24
    batches of up to 72,256 sets): every actor gets at most one small batch, where window w
    starting at actor w gave actor 0 two of them."""
    big, small = 72_256, 42_648
    windows = [[big] * 4, [big] * 3 + [small]] * 3
    given = [0, 0, 0, 0]
    placed = [place_batches(sizes, given) for sizes in windows]
    assert all(sorted(p) == [0, 1, 2, 3] for p in placed)  # one batch per actor in a window
    smalls = [p[3] for p, sizes in zip(placed, windows, strict=True) if sizes[3] == small]
    assert sorted(smalls) == sorted(set(smalls))
    assert max(given) - min(given) == big - small
    rotated = [0, 0, 0, 0]
    for w, sizes in enumerate(windows):
        for k, size in enumerate(sizes):
            rotated[(w + k) % 4] += size
    assert max(rotated) - min(rotated) == 2 * (big - small)


@pytest.mark.parametrize("actors", [1, 2, 3])
def test_more_batches_than_actors_share_them_evenly(actors: int) -> None:
    given = [0] * actors
    placed = place_batches([8, 8, 8, 8], given)
    per_actor = [placed.count(a) for a in range(actors)]
    assert max(per_actor) - min(per_actor) <= 1 and sum(per_actor) == 4
    assert sum(given) == 32


def test_a_short_last_window_goes_to_the_actors_given_the_fewest_sets() -> None:
    given = [0, 0, 0, 0]
    assert place_batches([9, 9, 9, 9], given) == [0, 1, 2, 3]
    assert place_batches([9, 9, 9, 3], given) == [0, 1, 2, 3]
    assert place_batches([5, 5], given) == [3, 0]  # 12 sets, then the first of the 18s
    assert given == [23, 18, 18, 17]


def test_a_round_crosses_as_a_buffer_of_its_own_and_comes_back_the_same() -> None:
    from distributed.protocol import serialize

    payload = np.random.default_rng(1).bytes(1 << 16)
    step = Round(3, 7, payload)
    wired = to_wire(step)
    back = from_wire(wired)
    assert back == step and isinstance(back, Round) and isinstance(back.payload, bytes)
    _, frames = serialize(wired)  # the payload is a frame, not copied into a pickle
    assert any(memoryview(f).nbytes == len(payload) for f in frames)
    _, pickled = serialize(step)
    assert not any(memoryview(f).nbytes == len(payload) for f in pickled)


def test_a_round_in_a_file_comes_back_from_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    files = RoundFiles(str(tmp_path))
    files.make(3)
    assert files.write(3, b"payload")
    assert from_wire((9, 7, 7), files, 3) == Round(9, 7, b"payload")
    for missing in ((), (files,)):  # no files, or no file for the batch
        with pytest.raises(ClusterError, match="batch 9's round came in a file not made"):
            from_wire((9, 7, 7), *missing)
    files.remove(3)


def test_a_batch_result_crosses_as_it_is() -> None:
    result = BatchResult(
        np.zeros(3, dtype=bool),
        np.zeros(0, dtype=np.uint64),
        np.zeros(0, dtype=np.uint64),
        GateCounts(),
    )
    assert to_wire(result) is result and from_wire(result) is result


def test_round_files_carry_payloads_both_ways_and_refuse_what_does_not_fit(  # type: ignore[no-untyped-def]
    tmp_path, monkeypatch
) -> None:
    """The node's and a worker's side of one batch's round file: payloads each way, a larger
    one after a smaller, copies read out, rounds at offsets and a reply viewed where it is; a payload beyond the file's length, or one that finds
    tmpfs full, is refused (False); the file takes only the bytes written, and is gone once
    removed."""
    import party.cluster_mpc as cluster_mpc

    monkeypatch.setattr(cluster_mpc, "ROUND_FILE_BYTES", 1 << 20)
    node, worker = RoundFiles(str(tmp_path)), RoundFiles(str(tmp_path))
    node.make(5)
    path = tmp_path / "round-5"
    assert path.stat().st_mode & 0o777 == 0o600 and path.stat().st_blocks == 0
    assert node.write(5, b"abc") and worker.read(5, 3) == b"abc"
    big = bytes(range(256)) * 4096  # 1 MiB: the whole file
    assert worker.write(5, big) and node.read(5, len(big)) == big
    assert 0 < path.stat().st_blocks * 512 <= 2 * len(big)
    got = worker.read(5, 3)
    assert node.write(5, b"xyz") and got == big[:3] and worker.read(5, 3) == b"xyz"
    assert not node.write(5, big + b"!")  # beyond the file
    with pytest.raises(ClusterError, match="a round of"):
        node.read(5, len(big) + 1)

    def full(*_args: Any) -> None:
        raise OSError(28, "No space left on device")

    # replies below one another at the file's end, each read where it is (no copy)
    fresh = RoundFiles(str(tmp_path))
    fresh.make(7)
    tail = tmp_path / "round-7"
    end = 1 << 20
    assert fresh.write(7, b"r" * 5000) and node.read(7, 5000) == b"r" * 5000  # the head
    assert node.write(7, b"first", end - 5) and node.write(7, b"second", end - 11)
    seen = fresh.view(7, end - 5, 5)
    assert seen == b"first" and seen.readonly and fresh.view(7, end - 11, 6) == b"second"
    assert node.write(7, b"again", end - 5) and seen == b"again"  # the file's bytes, not a copy
    assert tail.stat().st_blocks * 512 <= 4 * 4096  # two head pages, one tail page (and slack)
    fresh.make(8)  # a write in the first half grows the head, never a tail down to it
    assert (
        fresh.write(8, b"mid", 8192) and (tmp_path / "round-8").stat().st_blocks * 512 <= 3 * 4096
    )
    assert not worker.write(5, b"!", len(big))  # beyond the file
    with pytest.raises(ClusterError, match="a round of 2 bytes at"):
        worker.view(5, len(big) - 1, 2)
    node.make(6)
    monkeypatch.setattr(cluster_mpc.os, "posix_fallocate", full)
    assert not node.write(6, b"abc")
    assert node.write(5, b"fits")  # bytes allocated already need no room
    worker.close(5)
    fresh.close(7)
    fresh.remove(8)
    for made in (5, 6, 7):
        node.remove(made)
    assert list(tmp_path.iterdir()) == []
