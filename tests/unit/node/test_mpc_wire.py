"""party/node/mpc_wire.py: round chunking, the bounded in-order round inbox, and its error codes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from party.node import mpc_wire
from party.node.budget import BufferLimitExceeded
from party.node.errors import Malformed, OutOfOrder, RunAborted, status_for
from proto import common_pb2, party_pb2
from proto.transport import CHUNK_BYTES

REF = common_pb2.RunRef(run_id="ab" * 16, parameters_digest="cd" * 32)


def chunks_of(
    rounds: list[tuple[int, int, bytes]], start: int = 0
) -> list[party_pb2.ExchangeRoundsRequest]:
    out: list[party_pb2.ExchangeRoundsRequest] = []
    for k, (batch, number, payload) in enumerate(rounds):
        out.extend(mpc_wire.round_to_chunks(REF, 1, start + k, batch, number, payload))
    return out


class Feed(AsyncIterator[party_pb2.ExchangeRoundsRequest]):
    """An async chunk iterator the test feeds by hand (like a client stream)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[party_pb2.ExchangeRoundsRequest | None] = asyncio.Queue()
        self.taken = 0

    def __aiter__(self) -> Feed:
        return self

    async def __anext__(self) -> party_pb2.ExchangeRoundsRequest:
        item = await self.queue.get()
        if item is None:
            raise StopAsyncIteration
        self.taken += 1
        return item


def test_round_chunks_cover_the_payload_in_bounded_pieces() -> None:
    payload = bytes(range(256)) * (CHUNK_BYTES // 256 * 2 + 3)
    chunks = list(mpc_wire.round_to_chunks(REF, 2, 7, 3, 4, payload))
    assert len(chunks) == 3
    assert all(len(c.payload) <= CHUNK_BYTES for c in chunks)
    assert b"".join(c.payload for c in chunks) == payload
    assert [c.offset for c in chunks] == [0, CHUNK_BYTES, 2 * CHUNK_BYTES]
    assert {(c.sequence, c.batch, c.number, c.total_bytes) for c in chunks} == {
        (7, 3, 4, len(payload))
    }
    empty = list(mpc_wire.round_to_chunks(REF, 2, 0, 0, 0, b""))
    assert len(empty) == 1 and empty[0].total_bytes == 0 and empty[0].payload == b""


async def test_rounds_arrive_in_order_and_match_the_circuit() -> None:
    rounds = [(0, 0, b"a" * 10), (0, 1, b"b" * (CHUNK_BYTES + 5)), (1, 0, b""), (1, 1, b"c")]
    chunks = chunks_of(rounds)
    inbox = mpc_wire.RoundInbox(max_bytes=8 * CHUNK_BYTES)

    async def feed():  # type: ignore[no-untyped-def]
        for c in chunks[1:]:
            yield c

    receiver = asyncio.ensure_future(inbox.receive(chunks[0], feed()))
    got = [await inbox.take(b, n, len(p)) for b, n, p in rounds]
    assert got == [p for _, _, p in rounds]
    assert await receiver == 4


async def test_inbox_holds_at_most_window_rounds_then_stops_reading() -> None:
    window = 3
    rounds = [(0, k, bytes([k]) * 100) for k in range(10)]
    chunks = chunks_of(rounds)
    inbox = mpc_wire.RoundInbox(max_bytes=10**6, window=window)
    feed = Feed()
    for c in chunks[1:]:
        feed.queue.put_nowait(c)
    feed.queue.put_nowait(None)
    receiver = asyncio.ensure_future(inbox.receive(chunks[0], feed))
    for _ in range(50):
        await asyncio.sleep(0)
    # The receiver accepted `window` rounds and read one more chunk, which it holds unaccepted.
    assert inbox.rounds_received == window
    assert feed.taken == window
    for b, n, p in rounds:
        assert await inbox.take(b, n, len(p)) == p
    assert await receiver == 10


async def test_inbox_byte_bound_stops_reading_too() -> None:
    rounds = [(0, k, b"x" * 400) for k in range(4)]
    chunks = chunks_of(rounds)
    inbox = mpc_wire.RoundInbox(max_bytes=1000, window=10)
    feed = Feed()
    for c in chunks[1:]:
        feed.queue.put_nowait(c)
    feed.queue.put_nowait(None)
    receiver = asyncio.ensure_future(inbox.receive(chunks[0], feed))
    for _ in range(50):
        await asyncio.sleep(0)
    assert inbox.rounds_received == 2  # 800 bytes buffered; a third would exceed 1000
    for b, n, p in rounds:
        await inbox.take(b, n, len(p))
    assert await receiver == 4


@pytest.mark.parametrize(
    ("mutate", "error", "code"),
    [
        (lambda cs: [cs[1], cs[0]], OutOfOrder, grpc.StatusCode.OUT_OF_RANGE),  # sequence gap
        (lambda cs: [cs[0], cs[0]], OutOfOrder, grpc.StatusCode.OUT_OF_RANGE),  # replayed round
        (lambda cs: [_with(cs[0], offset=3)], Malformed, grpc.StatusCode.INVALID_ARGUMENT),
        (
            lambda cs: [_with(cs[0], total_bytes=10**9)],
            BufferLimitExceeded,
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
        (
            lambda cs: [_with(cs[0], payload=b"x" * 11)],
            Malformed,
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
    ],
)
async def test_malformed_streams_get_their_status_code(mutate, error, code) -> None:  # type: ignore[no-untyped-def]
    chunks = mutate(chunks_of([(0, 0, b"a" * 10), (0, 1, b"b" * 10)]))
    inbox = mpc_wire.RoundInbox(max_bytes=10**6)

    async def feed():  # type: ignore[no-untyped-def]
        for c in chunks[1:]:
            yield c

    with pytest.raises(error) as info:
        await inbox.receive(chunks[0], feed())
    assert status_for(info.value)[0] == code
    with pytest.raises(error):  # the circuit stops with the same error
        await inbox.take(0, 0, 10)


def _with(chunk, **changes):  # type: ignore[no-untyped-def]
    out = type(chunk)()
    out.CopyFrom(chunk)
    for k, v in changes.items():
        setattr(out, k, v)
    return out


@pytest.mark.parametrize(
    ("batch", "number", "size", "error"),
    [(0, 1, 10, OutOfOrder), (1, 0, 10, OutOfOrder), (0, 0, 12, Malformed)],
)
async def test_round_not_the_one_the_circuit_is_at_fails_the_stream(
    batch: int, number: int, size: int, error: type
) -> None:
    chunks = chunks_of([(0, 0, b"a" * 10)])
    inbox = mpc_wire.RoundInbox(max_bytes=10**6)
    feed = Feed()
    receiver = asyncio.ensure_future(inbox.receive(chunks[0], feed))
    with pytest.raises(error):
        await inbox.take(batch, number, size)
    # The open stream is ended with the same error, so the sender learns its status code.
    with pytest.raises(error):
        await receiver


async def test_a_stream_ending_early_or_an_abort_stops_the_circuit() -> None:
    chunks = chunks_of([(0, 0, b"a")])
    inbox = mpc_wire.RoundInbox(max_bytes=100)

    async def feed():  # type: ignore[no-untyped-def]
        return
        yield

    assert await inbox.receive(chunks[0], feed()) == 1
    assert await inbox.take(0, 0, 1) == b"a"
    with pytest.raises(RunAborted, match="ended its round stream early"):
        await inbox.take(0, 1, 1)

    inbox = mpc_wire.RoundInbox(max_bytes=100)
    waiting = asyncio.ensure_future(inbox.take(0, 0, 1))
    await asyncio.sleep(0)
    inbox.fail(RunAborted("run aborted"))
    with pytest.raises(RunAborted, match="run aborted"):
        await waiting
