"""Conversion between protocol-engine objects and pprl.v1 chunked stream messages.

Every bulk object travels as a client stream of chunks of whole rows, each chunk at most about
``CHUNK_BYTES`` (1 MiB) of payload, every chunk repeating the run reference and the array shapes.
Arrays are packed little-endian: uint64 as 8 bytes per element, float64 as 8 bytes per element,
int32 as 4 bytes per element, segment rows as ``words_for(segment_bits)`` uint64 words (party/encoding/bits.py layout). Decoders
check every chunk (byte lengths against the declared rows and widths, consistent headers across
chunks, total row count) and raise ``Malformed`` naming the field; they never echo payload bytes.

- Block digests (``PushBlocksRequest``): sorted distinct non-zero uint64 digests of the sender.
- Segment share (``PushShareRequest``): ``SegmentShare`` = pseudonyms (n,), block positions (n, B)
  int32 (positions in the run's common blocks, -1: none), segments (n, words).
- Ring message (``PassRingRequest``): ``RingMessage`` = candidates (m, P), c_masked (m,),
  x_masked (m,), hop. A message passed on as it comes (``bounded``, hop >= 1) declares the incoming
  message's total as an upper bound and ends with a closing chunk of no rows (``last``).
- Results (``DeliverResultsRequest``): ``PartyResults`` = linkage ids (k,) uint64, similarities (k,)
  float64, the target party's pseudonyms (k,) uint64; target any (``groups`` set in every chunk):
  ``GroupResults``, also group sizes (k,) uint64 and group party bit masks (k,) uint64.
An empty object is sent as one chunk with zero rows.
"""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Callable,
    Iterable,
    Iterator,
)
from typing import Any, TypeVar

import numpy as np

from party.encoding.bits import words_for
from party.node.budget import RunAccount
from party.node.errors import Malformed
from party.protocol.classify import PartyResults
from party.protocol.pair_engine import GroupResults
from party.protocol.ring import RingMessage
from party.protocol.segments import SegmentShare
from proto import common_pb2, party_pb2
from proto.transport import CHUNK_BYTES

_U64 = np.dtype("<u8")
_F64 = np.dtype("<f8")
_I32 = np.dtype("<i4")
MAX_ROWS = 2**31
MAX_SEGMENT_BITS = 2**20


def _rows_per_chunk(row_bytes: int) -> int:
    return max(1, CHUNK_BYTES // max(1, row_bytes))


def _pack(a: np.ndarray, dtype: np.dtype) -> bytes:
    return np.ascontiguousarray(a, dtype=dtype).tobytes()


def _view(data: bytes, dtype: np.dtype, count: int, field: str) -> np.ndarray:
    """A read-only array over a chunk field's bytes (no copy); Malformed unless it holds
    exactly ``count`` elements."""
    if len(data) != count * dtype.itemsize:
        raise Malformed(
            f"chunk field {field} has {len(data)} bytes, expected {count * dtype.itemsize}"
        )
    return np.frombuffer(data, dtype=dtype)


def _unpack(data: bytes, dtype: np.dtype, count: int, field: str) -> np.ndarray:
    """The field as a new native array (``_view``, copied)."""
    out = _view(data, dtype, count, field)
    return out.astype(np.uint64 if dtype.kind == "u" else np.float64, copy=True)


class _Assembler:
    """Collects rows of several arrays from chunks into arrays allocated once for the declared total.

    The first chunk's declared total is checked against ``max_rows`` (what the run can contain) and
    its bytes are reserved from ``account`` (the node's buffer budget) before anything is buffered,
    so a stream that announces more than the run or the budget allows is refused at once.
    """

    def __init__(self, what: str, account: RunAccount | None = None, max_rows: int | None = None):
        self.what = what
        self.account = account
        self.max_rows = MAX_ROWS if max_rows is None else min(MAX_ROWS, max_rows)
        self.header: tuple[Any, ...] | None = None
        self.total = 0
        self.arrays: dict[str, np.ndarray] = {}
        self.rows = 0
        self.reserved = 0

    def start(self, header: tuple[Any, ...], total: int, row_bytes: int = 0) -> None:
        if self.header is None:
            check_declared_rows(self.what, total, self.max_rows)
            if self.account is not None:
                self.account.reserve(total * row_bytes, f"{self.what} ({total} declared rows)")
                self.reserved = total * row_bytes
            self.header, self.total = header, total
        elif header != self.header or total != self.total:
            raise Malformed(f"{self.what}: chunk header differs from the first chunk")

    def add(
        self, name: str, rows: int, array: np.ndarray, shape_tail: tuple[int, ...] = ()
    ) -> None:
        out = self.arrays.get(name)
        if out is None:
            native = array.dtype.newbyteorder("=")  # chunk fields are little-endian views
            out = self.arrays[name] = np.empty((self.total, *shape_tail), dtype=native)
        out[self.rows - rows : self.rows] = array.reshape((rows, *shape_tail))

    def advance(self, rows: int) -> None:
        self.rows += rows
        if self.rows > self.total:
            raise Malformed(f"{self.what}: more rows than the declared {self.total}")

    def finish(self) -> None:
        if self.header is None:
            raise Malformed(f"{self.what}: empty stream")
        if self.rows != self.total:
            raise Malformed(f"{self.what}: got {self.rows} rows, declared {self.total}")

    def array(self, name: str, shape_tail: tuple[int, ...], dtype: Any = np.uint64) -> np.ndarray:
        out = self.arrays.get(name)
        if out is None:
            return np.zeros((0, *shape_tail), dtype=dtype)
        return out.reshape((-1, *shape_tail))

    def abandon(self) -> None:
        """Give the reservation back (the stream failed; nothing is kept)."""
        if self.account is not None and self.reserved:
            self.account.release(self.reserved)
        self.reserved = 0
        self.arrays.clear()


def check_declared_rows(what: str, total: int, max_rows: int) -> None:
    """Malformed unless a stream's declared row count fits what the run can contain."""
    if total > max_rows:
        raise Malformed(
            f"{what}: declared row count {total} exceeds what this run can contain ({max_rows})"
        )


# -- block digests -----------------------------------------------------------------------------


def blocks_to_chunks(
    run: common_pb2.RunRef, source: int, digests: np.ndarray, key_confirmation: bytes = b""
) -> Iterator[party_pb2.PushBlocksRequest]:
    """Chunks of sorted digests; the first carries the sender's key confirmation for the receiver."""
    d = np.asarray(digests, dtype=np.uint64).ravel()
    step = _rows_per_chunk(8)
    for start in range(0, max(1, d.size), step):
        yield party_pb2.PushBlocksRequest(
            run=run,
            source=source,
            total=d.size,
            digests=_pack(d[start : start + step], _U64),
            key_confirmation=key_confirmation if start == 0 else b"",
        )


async def assemble(
    asm: _Assembler, first: Any, rest: AsyncIterator[Any], take: Callable[[Any], None]
) -> None:
    """Feed ``first`` and every further chunk of ``rest`` to ``take`` (which adds it to ``asm``),
    then check the total; on any failure give the assembler's reservation back."""
    try:
        chunk = first
        while chunk is not None:
            take(chunk)
            chunk = await anext(rest, None)
        asm.finish()
    except BaseException:
        asm.abandon()
        raise


async def blocks_from_chunks(
    first: party_pb2.PushBlocksRequest,
    rest: AsyncIterator[party_pb2.PushBlocksRequest],
    *,
    account: RunAccount | None = None,
    max_rows: int | None = None,
) -> np.ndarray:
    """The sender's digests; the declared total is reserved from ``account`` at the first chunk."""
    asm = _Assembler("block digests", account, max_rows)

    def take(chunk: party_pb2.PushBlocksRequest) -> None:
        asm.start((chunk.run.run_id, chunk.run.parameters_digest, chunk.source), chunk.total, 8)
        data = chunk.digests  # once: each read of a bytes field copies it out of the message
        if len(data) % 8:
            raise Malformed("block digests: chunk field digests is not a multiple of 8 bytes")
        n = len(data) // 8
        asm.advance(n)
        asm.add("d", n, _view(data, _U64, n, "digests"))  # add() copies

    await assemble(asm, first, rest, take)
    return asm.array("d", ()).ravel()


# -- segment shares ----------------------------------------------------------------------------


def share_to_chunks(
    run: common_pb2.RunRef, share: SegmentShare
) -> Iterator[party_pb2.PushShareRequest]:
    n = int(share.pseudonyms.shape[0])
    b = int(share.block_positions.shape[1]) if share.block_positions.ndim == 2 else 0
    w = words_for(share.segment_bits)
    step = _rows_per_chunk(8 * (1 + w) + 4 * b)
    for start in range(0, max(1, n), step):
        sl = slice(start, start + step)
        rows = len(range(n)[sl])
        yield party_pb2.PushShareRequest(
            run=run,
            source=share.source,
            target=share.target,
            segment_bits=share.segment_bits,
            total_rows=n,
            block_columns=b,
            rows=rows,
            pseudonyms=_pack(share.pseudonyms[sl], _U64),
            block_positions=_pack(share.block_positions[sl], _I32),
            segments=_pack(share.segments[sl], _U64),
        )


async def share_from_chunks(
    first: party_pb2.PushShareRequest,
    rest: AsyncIterator[party_pb2.PushShareRequest],
    *,
    account: RunAccount | None = None,
    max_rows: int | None = None,
) -> SegmentShare:
    """The sender's share; the declared rows' bytes are reserved from ``account`` at the start."""
    asm = _Assembler("segment share", account, max_rows)

    def take(chunk: party_pb2.PushShareRequest) -> None:
        header = (
            chunk.run.run_id,
            chunk.run.parameters_digest,
            chunk.source,
            chunk.target,
            chunk.segment_bits,
            chunk.block_columns,
        )
        if chunk.segment_bits == 0:
            raise Malformed("segment share: segment_bits must be positive")
        if chunk.segment_bits > MAX_SEGMENT_BITS:
            raise Malformed(f"segment share: segment_bits must be at most {MAX_SEGMENT_BITS}")
        if chunk.block_columns > 64:
            raise Malformed("segment share: block_columns must be at most 64")
        rows, b, w = chunk.rows, chunk.block_columns, words_for(chunk.segment_bits)
        asm.start(header, chunk.total_rows, 8 * (1 + w) + 4 * b)
        asm.advance(rows)
        # views of the chunk's bytes: add() copies them into the share's arrays
        asm.add("p", rows, _view(chunk.pseudonyms, _U64, rows, "pseudonyms"))
        asm.add("b", rows, _view(chunk.block_positions, _I32, rows * b, "block_positions"), (b,))
        asm.add("s", rows, _view(chunk.segments, _U64, rows * w, "segments"), (w,))

    await assemble(asm, first, rest, take)
    assert asm.header is not None
    _, _, source, target, segment_bits, b = asm.header
    return SegmentShare(
        source=int(source),
        target=int(target),
        segment_bits=int(segment_bits),
        pseudonyms=asm.array("p", ()).ravel(),
        block_positions=asm.array("b", (b,), np.int32),
        segments=asm.array("s", (words_for(segment_bits),)),
    )


# -- ring messages -----------------------------------------------------------------------------


def check_first_chunk(what: str, first: Any) -> None:
    """Malformed unless the first chunk of a ring message ("ring message") or of results is
    well formed on its own (field sizes against its rows); checked before anything else."""
    rows = first.rows
    if what == "ring message":
        if not 2 <= first.parties <= 64:
            raise Malformed("ring message: parties must be between 2 and 64")
        _unpack(first.candidates, _U64, rows * first.parties, "candidates")
        _unpack(first.c_masked, _U64, rows, "c_masked")
        _unpack(first.x_masked, _U64, rows, "x_masked")
    else:
        _unpack(first.linkage_ids, _U64, rows, "linkage_ids")
        _unpack(first.similarities, _F64, rows, "similarities")
        _unpack(first.pseudonyms, _U64, rows, "pseudonyms")
    if rows > first.total_rows:
        raise Malformed(f"{what}: more rows than the declared {first.total_rows}")


def ring_to_chunks(
    run: common_pb2.RunRef, source: int, msg: RingMessage
) -> Iterator[party_pb2.PassRingRequest]:
    cand = np.asarray(msg.candidates)
    return ring_stream_to_chunks(run, source, msg.hop, cand.shape[0], cand.shape[1], [msg])


P = TypeVar("P")


def _pieces(
    parts: Iterable[P], rows_of: Callable[[P], Any], step: int
) -> Iterator[tuple[P, slice, int]]:
    """(part, slice, rows) for wire chunks of at most ``step`` rows cut from each part in turn."""
    for part in parts:
        m = int(np.asarray(rows_of(part)).shape[0])
        for start in range(0, m, step):
            yield part, slice(start, min(m, start + step)), min(m, start + step) - start


def ring_stream_to_chunks(
    run: common_pb2.RunRef,
    source: int,
    hop: int,
    total: int,
    parties: int,
    parts: Iterable[RingMessage],
) -> Iterator[party_pb2.PassRingRequest]:
    """Chunks of a ring message of ``total`` rows produced piece by piece (``parts``)."""
    for msg, sl, rows in _pieces(parts, lambda m: m.candidates, _rows_per_chunk(8 * (parties + 2))):
        yield _ring_chunk(run, source, hop, total, parties, msg, sl, rows)
    if total == 0:
        yield party_pb2.PassRingRequest(
            run=run, source=source, hop=hop, total_rows=total, parties=parties
        )


def _ring_chunk(
    run: common_pb2.RunRef,
    source: int,
    hop: int,
    total: int,
    parties: int,
    msg: RingMessage,
    sl: slice,
    rows: int,
    bounded: bool = False,
) -> party_pb2.PassRingRequest:
    """One PassRing chunk: rows ``sl`` of ``msg`` declared as part of ``total`` rows."""
    return party_pb2.PassRingRequest(
        run=run,
        source=source,
        hop=hop,
        total_rows=total,
        parties=parties,
        rows=rows,
        candidates=_pack(np.asarray(msg.candidates)[sl], _U64),
        c_masked=_pack(msg.c_masked[sl], _U64),
        x_masked=_pack(msg.x_masked[sl], _U64),
        bounded=bounded,
    )


async def ring_piped_chunks(
    run: common_pb2.RunRef,
    source: int,
    hop: int,
    bound: int,
    parties: int,
    parts: AsyncIterable[RingMessage],
) -> AsyncIterator[party_pb2.PassRingRequest]:
    """Chunks of a ring message passed on as it is made (``bounded``): every chunk declares
    ``bound`` (the incoming message's total) as its total; the closing chunk has no rows and sets
    ``last``."""
    step = _rows_per_chunk(8 * (parties + 2))
    async for msg in parts:
        for _, sl, rows in _pieces([msg], lambda m: m.candidates, step):
            yield _ring_chunk(run, source, hop, bound, parties, msg, sl, rows, bounded=True)
    yield party_pb2.PassRingRequest(
        run=run,
        source=source,
        hop=hop,
        total_rows=bound,
        parties=parties,
        bounded=True,
        last=True,
    )


async def ring_chunks(
    first: party_pb2.PassRingRequest,
    rest: AsyncIterator[party_pb2.PassRingRequest],
    *,
    account: RunAccount | None = None,
    max_rows: int | None = None,
) -> AsyncGenerator[RingMessage, None]:
    """Yield the ring message chunk by chunk (each a RingMessage of that chunk's rows).

    The declared total is checked against ``max_rows`` at the first chunk; each chunk's bytes are
    reserved from ``account`` while the consumer holds it (until it asks for the next one). A
    ``bounded`` message (passed on as it came) may have fewer rows than its total and must end
    with its closing chunk (no rows, ``last``), yielded as an empty RingMessage.
    """
    stream = _ChunkStream("ring message", account, max_rows)
    chunk = first
    bounded = first.bounded
    closed = False
    try:
        while True:
            header = (
                chunk.run.run_id,
                chunk.run.parameters_digest,
                chunk.source,
                chunk.hop,
                chunk.parties,
                chunk.bounded,
            )
            if not 2 <= chunk.parties <= 64:
                raise Malformed("ring message: parties must be between 2 and 64")
            if closed:
                raise Malformed("ring message: a chunk after the closing chunk")
            if chunk.last:
                if not chunk.bounded or chunk.rows:
                    raise Malformed("ring message: last set outside a bounded closing chunk")
                closed = True
            rows, p = chunk.rows, chunk.parties
            stream.start(header, chunk.total_rows, rows, 8 * (p + 2))
            yield RingMessage(
                hop=int(chunk.hop),
                candidates=_unpack(chunk.candidates, _U64, rows * p, "candidates").reshape(rows, p),
                c_masked=_unpack(chunk.c_masked, _U64, rows, "c_masked"),
                x_masked=_unpack(chunk.x_masked, _U64, rows, "x_masked"),
            )
            stream.done_with_chunk()
            nxt = await anext(rest, None)
            if nxt is None:
                break
            chunk = nxt
        if bounded and not closed:
            raise Malformed("ring message: the stream ended before its closing chunk")
        stream.finish(exact=not bounded)
    finally:
        stream.done_with_chunk()


async def ring_from_chunks(
    first: party_pb2.PassRingRequest,
    rest: AsyncIterator[party_pb2.PassRingRequest],
    *,
    account: RunAccount | None = None,
    max_rows: int | None = None,
) -> RingMessage:
    """The whole ring message in memory; its declared bytes are reserved at the first chunk."""
    p = first.parties
    asm = _Assembler("ring message", account, max_rows)
    asm.start((), first.total_rows, 8 * (p + 2) if 2 <= p <= 64 else 0)
    try:
        hop = int(first.hop)
        async for part in ring_chunks(first, rest, max_rows=max_rows):
            rows = len(part)
            asm.advance(rows)
            asm.add("k", rows, part.candidates, (p,))
            asm.add("c", rows, part.c_masked)
            asm.add("x", rows, part.x_masked)
    except BaseException:
        asm.abandon()
        raise
    n = asm.rows  # a bounded message may have fewer rows than declared
    return RingMessage(
        hop=hop,
        candidates=asm.array("k", (p,))[:n],
        c_masked=asm.array("c", ()).ravel()[:n],
        x_masked=asm.array("x", ()).ravel()[:n],
    )


class _ChunkStream:
    """Header, total and per-chunk budget checks of a stream consumed chunk by chunk."""

    def __init__(self, what: str, account: RunAccount | None, max_rows: int | None) -> None:
        self.asm = _Assembler(what, None, max_rows)
        self.account = account
        self.held = 0

    def start(self, header: tuple[Any, ...], total: int, rows: int, row_bytes: int) -> None:
        self.asm.start(header, total)
        self.asm.advance(rows)
        if self.account is not None:
            self.account.reserve(rows * row_bytes, self.asm.what)
            self.held = rows * row_bytes

    def done_with_chunk(self) -> None:
        if self.account is not None and self.held:
            self.account.release(self.held)
        self.held = 0

    def finish(self, exact: bool = True) -> None:
        """The stream ended: its rows must equal the declared total (``exact``; else at most it,
        which ``start`` checked chunk by chunk)."""
        if exact:
            self.asm.finish()
        elif self.asm.header is None:
            raise Malformed(f"{self.asm.what}: empty stream")


# -- results -----------------------------------------------------------------------------------


def results_to_chunks(
    run: common_pb2.RunRef,
    source: int,
    target: int,
    linkage_ids: np.ndarray,
    similarities: np.ndarray,
    pseudonyms: np.ndarray,
) -> Iterator[party_pb2.DeliverResultsRequest]:
    k = int(np.asarray(pseudonyms).shape[0])
    if np.asarray(linkage_ids).shape[0] != k or np.asarray(similarities).shape[0] != k:
        raise Malformed("results: linkage_ids, similarities and pseudonyms differ in length")
    return results_stream_to_chunks(
        run, source, target, k, [(linkage_ids, similarities, pseudonyms)]
    )


def results_stream_to_chunks(
    run: common_pb2.RunRef,
    source: int,
    target: int,
    total: int,
    parts: Iterable[tuple[np.ndarray, ...]],
    groups: bool = False,
) -> Iterator[party_pb2.DeliverResultsRequest]:
    """Chunks of ``total`` result rows produced piece by piece: (linkage ids, similarities,
    pseudonyms) per piece, and with ``groups`` (target any) also (group sizes, group parties)."""
    width = 40 if groups else 24
    for cols, sl, rows in _pieces(parts, lambda part: part[2], _rows_per_chunk(width)):
        if len(cols) != (5 if groups else 3):
            raise Malformed("results: a piece has the wrong number of columns")
        msg = party_pb2.DeliverResultsRequest(
            run=run,
            source=source,
            target=target,
            total_rows=total,
            rows=rows,
            linkage_ids=_pack(np.asarray(cols[0])[sl], _U64),
            similarities=_pack(np.asarray(cols[1])[sl], _F64),
            pseudonyms=_pack(np.asarray(cols[2])[sl], _U64),
        )
        if groups:
            msg.groups = True
            msg.group_sizes = _pack(np.asarray(cols[3])[sl], _U64)
            msg.group_parties = _pack(np.asarray(cols[4])[sl], _U64)
        yield msg
    if total == 0:
        yield party_pb2.DeliverResultsRequest(
            run=run, source=source, target=target, total_rows=total, groups=groups
        )


def result_columns(results: PartyResults) -> tuple[np.ndarray, ...]:
    """The wire columns of a results chunk (target any: with group sizes and parties)."""
    cols = (results.linkage_ids, results.similarities, results.pseudonyms)
    if isinstance(results, GroupResults):
        return (*cols, results.group_sizes, results.group_parties)
    return cols


def party_results(party: int, cols: tuple[np.ndarray, ...]) -> PartyResults:
    """A decoded results chunk as PartyResults, or GroupResults when it carries groups."""
    if len(cols) == 5:
        return GroupResults(party, *cols)
    return PartyResults(party, cols[0], cols[1], cols[2])


async def results_chunks(
    first: party_pb2.DeliverResultsRequest,
    rest: AsyncIterator[party_pb2.DeliverResultsRequest],
    *,
    account: RunAccount | None = None,
    max_rows: int | None = None,
) -> AsyncGenerator[tuple[np.ndarray, ...], None]:
    """Yield (linkage_ids uint64, similarities float64, pseudonyms uint64), and for groups
    (target any) also (group sizes uint64, group parties uint64), chunk by chunk (checks and
    budget as ring_chunks; every chunk must agree on ``groups``)."""
    stream = _ChunkStream("results", account, max_rows)
    chunk = first
    try:
        while True:
            groups = chunk.groups
            header = (
                chunk.run.run_id,
                chunk.run.parameters_digest,
                chunk.source,
                chunk.target,
                groups,
            )
            rows = chunk.rows
            stream.start(header, chunk.total_rows, rows, 40 if groups else 24)
            cols: tuple[np.ndarray, ...] = (
                _unpack(chunk.linkage_ids, _U64, rows, "linkage_ids"),
                _unpack(chunk.similarities, _F64, rows, "similarities"),
                _unpack(chunk.pseudonyms, _U64, rows, "pseudonyms"),
            )
            if groups:
                cols = (
                    *cols,
                    _unpack(chunk.group_sizes, _U64, rows, "group_sizes"),
                    _unpack(chunk.group_parties, _U64, rows, "group_parties"),
                )
            elif chunk.group_sizes or chunk.group_parties:
                raise Malformed("results: group columns in a chunk without groups")
            yield cols
            stream.done_with_chunk()
            nxt = await anext(rest, None)
            if nxt is None:
                break
            chunk = nxt
        stream.finish()
    finally:
        stream.done_with_chunk()


async def results_from_chunks(
    first: party_pb2.DeliverResultsRequest,
    rest: AsyncIterator[party_pb2.DeliverResultsRequest],
    *,
    account: RunAccount | None = None,
    max_rows: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(linkage_ids uint64, similarities float64, pseudonyms uint64) of the whole stream; its
    declared bytes are reserved at the first chunk."""
    asm = _Assembler("results", account, max_rows)
    asm.start((), first.total_rows, 24)
    try:
        async for cols in results_chunks(first, rest, max_rows=max_rows):
            lids, sims, ps = cols[:3]
            rows = lids.shape[0]
            asm.advance(rows)
            asm.add("l", rows, lids)
            asm.add("s", rows, sims)
            asm.add("p", rows, ps)
    except BaseException:
        asm.abandon()
        raise
    return (
        asm.array("l", ()).ravel(),
        asm.array("s", (), np.float64).ravel(),
        asm.array("p", ()).ravel(),
    )
