"""Wire format of mode mpc3: input-share chunks and round-payload chunks, and the bounded round inbox.

Layouts (party.proto; arrays packed little-endian, row-major, as in party/node/wire.py):

- Input share (``PushInputShareRequest``), data party ``source`` -> compute party ``target``:
  header (run, source, target, filter_bits l, total_rows n, block_columns B) repeated in every
  chunk; per row: pseudonym (u64), B block digests (u64), ``ceil(l/64)`` words of filter share
  ``target`` and as many of share ``target+1 mod 3`` (bits.py layout, padding bits 0), and the two
  shares of the record's count term (u64 each, w-bit values; party/mpc/inputs.py).
  Chunks hold ``max(1, 1 MiB // row_bytes)`` whole rows; an empty share is one chunk of zero rows.
- Round payloads (``ExchangeRoundsRequest``), compute party i -> compute party (i+2) mod 3, one
  client stream per run carrying every round of the circuit in order. Round k of the stream has
  ``sequence`` k, the ComputeParty's ``batch`` and ``number``, ``total_bytes`` (its payload length)
  and is cut into chunks of at most 1 MiB at increasing ``offset`` (an empty payload is one chunk).

The receiver of rounds (``RoundInbox``) holds at most ``window`` complete rounds and at most
``max_bytes`` payload bytes beyond what its own circuit has consumed: while full it stops reading
the stream, so HTTP/2 flow control holds the sender (no peer can make it buffer more). Each
chunk is checked on arrival (sequence, offsets, headers, declared size against the bound); each
round is checked again when the circuit takes it (batch/number = the round the receiver's circuit
is at, payload length = its own payload's). A violation raises a NodeError whose status code the
stream's RPC returns to the sender (see docs/protocol.md, "mpc3").
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from party.encoding.bits import words_for
from party.node.budget import BufferLimitExceeded, RunAccount
from party.node.errors import Malformed, NodeError, OutOfOrder, RunAborted
from party.node.wire import _Assembler, _pack, _rows_per_chunk, _unpack, assemble
from proto import common_pb2, party_pb2
from proto.transport import CHUNK_BYTES

if TYPE_CHECKING:
    from party.mpc.inputs import InputShare

_U64 = np.dtype("<u8")
MAX_BLOCK_COLUMNS = 64
MAX_FILTER_BITS = 2**20
ROUND_WINDOW = 4  # complete rounds a compute party buffers ahead of its own circuit


# -- input shares ------------------------------------------------------------------------------


def input_share_to_chunks(
    run: common_pb2.RunRef, share: InputShare
) -> Iterator[party_pb2.PushInputShareRequest]:
    n = int(share.pseudonyms.shape[0])
    b = int(share.block_digests.shape[1]) if share.block_digests.ndim == 2 else 0
    w = words_for(share.filter_bits)
    step = _rows_per_chunk(8 * (1 + b + 2 * w + 2))
    f0, f1 = share.filters
    c0, c1 = share.counts
    for start in range(0, max(1, n), step):
        sl = slice(start, start + step)
        yield party_pb2.PushInputShareRequest(
            run=run,
            source=share.source,
            target=share.target,
            filter_bits=share.filter_bits,
            total_rows=n,
            block_columns=b,
            rows=len(range(n)[sl]),
            pseudonyms=_pack(share.pseudonyms[sl], _U64),
            block_digests=_pack(share.block_digests[sl], _U64),
            filters_first=_pack(f0[sl], _U64),
            filters_second=_pack(f1[sl], _U64),
            counts_first=_pack(c0[sl], _U64),
            counts_second=_pack(c1[sl], _U64),
        )


async def input_share_from_chunks(
    first: party_pb2.PushInputShareRequest,
    rest: AsyncIterator[party_pb2.PushInputShareRequest],
    *,
    account: RunAccount | None = None,
    max_rows: int | None = None,
) -> InputShare:
    """Assemble and shape-check one input share; its declared bytes are reserved from
    ``account`` (the node's buffer budget) at the first chunk, before anything is buffered."""
    from party.mpc.inputs import InputShare

    asm = _Assembler("input share", account, max_rows)

    def take(chunk: party_pb2.PushInputShareRequest) -> None:
        header = (
            chunk.run.run_id,
            chunk.run.parameters_digest,
            chunk.source,
            chunk.target,
            chunk.filter_bits,
            chunk.block_columns,
        )
        if not 0 < chunk.filter_bits <= MAX_FILTER_BITS:
            raise Malformed(f"input share: filter_bits must be in 1..{MAX_FILTER_BITS}")
        if chunk.block_columns > MAX_BLOCK_COLUMNS:
            raise Malformed(f"input share: block_columns must be at most {MAX_BLOCK_COLUMNS}")
        if chunk.target > 2:
            raise Malformed("input share: target must be a compute-party index 0, 1 or 2")
        rows, b, w = chunk.rows, chunk.block_columns, words_for(chunk.filter_bits)
        asm.start(header, chunk.total_rows, 8 * (1 + b + 2 * w + 2))
        asm.advance(rows)
        asm.add("p", rows, _unpack(chunk.pseudonyms, _U64, rows, "pseudonyms"))
        asm.add("b", rows, _unpack(chunk.block_digests, _U64, rows * b, "block_digests"), (b,))
        f0 = _unpack(chunk.filters_first, _U64, rows * w, "filters_first")
        f1 = _unpack(chunk.filters_second, _U64, rows * w, "filters_second")
        asm.add("f0", rows, f0, (w,))
        asm.add("f1", rows, f1, (w,))
        asm.add("c0", rows, _unpack(chunk.counts_first, _U64, rows, "counts_first"))
        asm.add("c1", rows, _unpack(chunk.counts_second, _U64, rows, "counts_second"))

    await assemble(asm, first, rest, take)
    assert asm.header is not None
    _, _, source, target, filter_bits, b = asm.header
    w = words_for(int(filter_bits))
    return InputShare(
        source=int(source),
        target=int(target),
        filter_bits=int(filter_bits),
        pseudonyms=asm.array("p", ()).ravel(),
        block_digests=asm.array("b", (int(b),)),
        filters=(asm.array("f0", (w,)), asm.array("f1", (w,))),
        counts=(asm.array("c0", ()).ravel(), asm.array("c1", ()).ravel()),
    )


def input_share_bytes(share: InputShare) -> int:
    """What an input share occupies (the bytes its decoder reserved)."""
    arrays = [share.pseudonyms, share.block_digests, *share.filters, *share.counts]
    return sum(int(a.nbytes) for a in arrays)


# -- rounds ------------------------------------------------------------------------------------


def round_to_chunks(
    run: common_pb2.RunRef, source: int, sequence: int, batch: int, number: int, payload: bytes
) -> Iterator[party_pb2.ExchangeRoundsRequest]:
    """The chunks of one round (payload slices of at most CHUNK_BYTES; empty -> one chunk)."""
    total = len(payload)
    view = memoryview(payload)
    for offset in range(0, max(1, total), CHUNK_BYTES):
        yield party_pb2.ExchangeRoundsRequest(
            run=run,
            source=source,
            sequence=sequence,
            batch=batch,
            number=number,
            total_bytes=total,
            offset=offset,
            payload=bytes(view[offset : offset + CHUNK_BYTES]),
        )


class RoundInbox:
    """Round payloads from the previous compute party, in order, bounded (module docstring)."""

    def __init__(
        self, max_bytes: int, window: int = ROUND_WINDOW, account: RunAccount | None = None
    ):
        self.max_bytes = max_bytes
        self.window = window
        self.account = account  # the node's buffer budget: each buffered round reserves there
        self._rounds: dict[int, tuple[int, int, bytes]] = {}  # sequence -> (batch, number, data)
        self._buffered = 0
        self._next_in = 0  # sequence of the next round expected on the stream
        self._next_out = 0  # sequence the circuit takes next
        self._partial: tuple[int, int, int, int, bytearray] | None = None  # seq, b, n, total, data
        self._changed = asyncio.Event()
        self.failure: NodeError | None = None
        self.stream_open = False
        self.stream_ended = False

    @property
    def rounds_received(self) -> int:
        return self._next_in

    def _wake(self) -> None:
        self._changed.set()

    async def _wait_change(self) -> None:
        self._changed.clear()
        await self._changed.wait()

    def fail(self, exc: NodeError) -> None:
        """End the exchange: the stream's RPC returns ``exc``'s code, take() raises it."""
        if self.failure is None:
            self.failure = exc
        self._rounds.clear()
        self._partial = None
        self._release(self._buffered)
        self._buffered = 0
        self._wake()

    def _release(self, nbytes: int) -> None:
        if self.account is not None and nbytes:
            self.account.release(nbytes)

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure

    async def receive(
        self,
        first: party_pb2.ExchangeRoundsRequest,
        rest: AsyncIterator[party_pb2.ExchangeRoundsRequest],
    ) -> int:
        """Consume one sender's stream (the RPC handler); returns the rounds received.

        Raises the NodeError of the first violation (also recorded with fail(), so the circuit
        stops too).
        """
        chunk: Any = first
        try:
            while chunk is not None:
                await self._accept(chunk)
                chunk = await self._next_chunk(rest)
            if self._partial is not None:
                raise Malformed("round stream ended inside a round")
        except NodeError as exc:
            self.fail(exc)
            raise
        finally:
            self.stream_ended = True
            self._wake()
        return self._next_in

    async def _next_chunk(self, rest: AsyncIterator[Any]) -> Any:
        task = asyncio.ensure_future(anext(rest, None))
        stop = asyncio.ensure_future(self._failed())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._raise_failure()
        return task.result()

    async def _failed(self) -> None:
        while self.failure is None:
            await self._wait_change()

    async def _accept(self, c: party_pb2.ExchangeRoundsRequest) -> None:
        self._raise_failure()
        if self._partial is None:
            if c.sequence != self._next_in:
                raise OutOfOrder(
                    f"round sequence {c.sequence} out of order: expected {self._next_in}"
                )
            if c.offset != 0:
                raise Malformed("round chunk: the first chunk of a round must have offset 0")
            if c.total_bytes > self.max_bytes:
                raise BufferLimitExceeded(
                    f"round of {c.total_bytes} bytes exceeds this node's bound of "
                    f"{self.max_bytes} bytes"
                )
            # Bounded buffering: wait (not reading the stream) until the round fits.
            while (
                c.sequence >= self._next_out + self.window
                or self._buffered + c.total_bytes > self.max_bytes
            ) and self._rounds:
                await self._wait_change()
                self._raise_failure()
            if self.account is not None:
                self.account.reserve(c.total_bytes, f"round {c.sequence} of the run")
            self._partial = (c.sequence, c.batch, c.number, c.total_bytes, bytearray())
            self._buffered += c.total_bytes
        seq, batch, number, total, data = self._partial
        if (c.sequence, c.batch, c.number, c.total_bytes) != (seq, batch, number, total):
            raise Malformed("round chunk: header differs from the first chunk of its round")
        if c.offset != len(data):
            raise Malformed(f"round chunk: offset {c.offset}, expected {len(data)}")
        if len(data) + len(c.payload) > total:
            raise Malformed("round chunk: more payload bytes than total_bytes")
        if len(c.payload) > CHUNK_BYTES:
            raise Malformed(f"round chunk: payload above {CHUNK_BYTES} bytes")
        if not c.payload and total:
            raise Malformed("round chunk: empty payload inside a round")
        data += c.payload
        if len(data) == total:
            self._rounds[seq] = (batch, number, bytes(data))
            self._partial = None
            self._next_in += 1
            self._wake()

    async def take(self, batch: int, number: int, size: int) -> bytes:
        """The next round's payload; it must be round (batch, number) with ``size`` bytes."""
        seq = self._next_out
        while seq not in self._rounds:
            self._raise_failure()
            if self.stream_ended:
                raise RunAborted("the previous compute party ended its round stream early")
            await self._wait_change()
        got_batch, got_number, data = self._rounds.pop(seq)
        self._buffered -= len(data)
        self._release(len(data))
        self._next_out += 1
        self._wake()
        if (got_batch, got_number) != (batch, number):
            exc: NodeError = OutOfOrder(
                f"round {seq} is (batch {got_batch}, round {got_number}); this compute party's "
                f"circuit is at (batch {batch}, round {number})"
            )
            self.fail(exc)
            raise exc
        if len(data) != size:
            exc = Malformed(
                f"round (batch {batch}, round {number}) has {len(data)} payload bytes; "
                f"expected {size} (the width of this compute party's own payload)"
            )
            self.fail(exc)
            raise exc
        return data
