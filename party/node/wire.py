"""Conversion between protocol-engine objects and pprl.v1 chunked stream messages.

Every bulk object travels as a client stream of chunks of whole rows, each chunk at most about
``CHUNK_BYTES`` (1 MiB) of payload, every chunk repeating the run reference and the array shapes.
Arrays are packed little-endian: uint64 as 8 bytes per element, float64 as 8 bytes per element,
segment rows as ``words_for(segment_bits)`` uint64 words (party/encoding/bits.py layout). Decoders
check every chunk (byte lengths against the declared rows and widths, consistent headers across
chunks, total row count) and raise ``Malformed`` naming the field; they never echo payload bytes.

- Block digests (``PushBlocksRequest``): sorted distinct non-zero uint64 digests of the sender.
- Segment share (``PushShareRequest``): ``SegmentShare`` = pseudonyms (n,), block digests (n, B),
  segments (n, words).
- Ring message (``PassRingRequest``): ``RingMessage`` = candidates (m, P), c_masked (m,),
  x_masked (m,), hop.
- Results (``DeliverResultsRequest``): ``PartyResults`` = linkage ids (k,) uint64, similarities (k,)
  float64, the target party's pseudonyms (k,) uint64.
An empty object is sent as one chunk with zero rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np

from party.encoding.bits import words_for
from party.node.errors import Malformed
from party.protocol.ring import RingMessage
from party.protocol.segments import SegmentShare
from proto import common_pb2, party_pb2
from proto.transport import CHUNK_BYTES

_U64 = np.dtype("<u8")
_F64 = np.dtype("<f8")
MAX_ROWS = 2**31


def _rows_per_chunk(row_bytes: int) -> int:
    return max(1, CHUNK_BYTES // max(1, row_bytes))


def _pack(a: np.ndarray, dtype: np.dtype) -> bytes:
    return np.ascontiguousarray(a, dtype=dtype).tobytes()


def _unpack(data: bytes, dtype: np.dtype, count: int, field: str) -> np.ndarray:
    if len(data) != count * dtype.itemsize:
        raise Malformed(
            f"chunk field {field} has {len(data)} bytes, expected {count * dtype.itemsize}"
        )
    out = np.frombuffer(data, dtype=dtype)
    return out.astype(np.uint64 if dtype.kind == "u" else np.float64, copy=True)


class _Assembler:
    """Collects rows of several arrays from chunks, checking headers and totals."""

    def __init__(self, what: str):
        self.what = what
        self.header: tuple[Any, ...] | None = None
        self.total = 0
        self.parts: dict[str, list[np.ndarray]] = {}
        self.rows = 0

    def start(self, header: tuple[Any, ...], total: int) -> None:
        if self.header is None:
            if total > MAX_ROWS:
                raise Malformed(f"{self.what}: declared row count {total} exceeds {MAX_ROWS}")
            self.header, self.total = header, total
        elif header != self.header or total != self.total:
            raise Malformed(f"{self.what}: chunk header differs from the first chunk")

    def add(self, name: str, rows: int, array: np.ndarray) -> None:
        self.parts.setdefault(name, []).append(array)

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
        parts = self.parts.get(name, [])
        if not parts:
            return np.zeros((0, *shape_tail), dtype=dtype)
        return np.concatenate(parts).reshape((-1, *shape_tail))


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


async def blocks_from_chunks(
    first: party_pb2.PushBlocksRequest, rest: AsyncIterator[party_pb2.PushBlocksRequest]
) -> np.ndarray:
    asm = _Assembler("block digests")
    chunk = first
    while True:
        asm.start((chunk.run.run_id, chunk.run.parameters_digest, chunk.source), chunk.total)
        if len(chunk.digests) % 8:
            raise Malformed("block digests: chunk field digests is not a multiple of 8 bytes")
        n = len(chunk.digests) // 8
        asm.advance(n)
        asm.add("d", n, _unpack(chunk.digests, _U64, n, "digests"))
        nxt = await anext(rest, None)
        if nxt is None:
            break
        chunk = nxt
    asm.finish()
    return asm.array("d", ()).ravel()


# -- segment shares ----------------------------------------------------------------------------


def share_to_chunks(
    run: common_pb2.RunRef, share: SegmentShare
) -> Iterator[party_pb2.PushShareRequest]:
    n = int(share.pseudonyms.shape[0])
    b = int(share.block_digests.shape[1]) if share.block_digests.ndim == 2 else 0
    w = words_for(share.segment_bits)
    step = _rows_per_chunk(8 * (1 + b + w))
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
            block_digests=_pack(share.block_digests[sl], _U64),
            segments=_pack(share.segments[sl], _U64),
        )


async def share_from_chunks(
    first: party_pb2.PushShareRequest, rest: AsyncIterator[party_pb2.PushShareRequest]
) -> SegmentShare:
    asm = _Assembler("segment share")
    chunk = first
    while True:
        header = (
            chunk.run.run_id,
            chunk.run.parameters_digest,
            chunk.source,
            chunk.target,
            chunk.segment_bits,
            chunk.block_columns,
        )
        asm.start(header, chunk.total_rows)
        if chunk.segment_bits == 0:
            raise Malformed("segment share: segment_bits must be positive")
        if chunk.block_columns > 64:
            raise Malformed("segment share: block_columns must be at most 64")
        rows, b, w = chunk.rows, chunk.block_columns, words_for(chunk.segment_bits)
        asm.advance(rows)
        asm.add("p", rows, _unpack(chunk.pseudonyms, _U64, rows, "pseudonyms"))
        asm.add("b", rows, _unpack(chunk.block_digests, _U64, rows * b, "block_digests"))
        asm.add("s", rows, _unpack(chunk.segments, _U64, rows * w, "segments"))
        nxt = await anext(rest, None)
        if nxt is None:
            break
        chunk = nxt
    asm.finish()
    assert asm.header is not None
    _, _, source, target, segment_bits, b = asm.header
    return SegmentShare(
        source=int(source),
        target=int(target),
        segment_bits=int(segment_bits),
        pseudonyms=asm.array("p", ()).ravel(),
        block_digests=asm.array("b", (b,)),
        segments=asm.array("s", (words_for(segment_bits),)),
    )


# -- ring messages -----------------------------------------------------------------------------


def ring_to_chunks(
    run: common_pb2.RunRef, source: int, msg: RingMessage
) -> Iterator[party_pb2.PassRingRequest]:
    cand = np.asarray(msg.candidates)
    m, p = int(cand.shape[0]), int(cand.shape[1])
    step = _rows_per_chunk(8 * (p + 2))
    for start in range(0, max(1, m), step):
        sl = slice(start, start + step)
        rows = len(range(m)[sl])
        yield party_pb2.PassRingRequest(
            run=run,
            source=source,
            hop=msg.hop,
            total_rows=m,
            parties=p,
            rows=rows,
            candidates=_pack(cand[sl], _U64),
            c_masked=_pack(msg.c_masked[sl], _U64),
            x_masked=_pack(msg.x_masked[sl], _U64),
        )


async def ring_from_chunks(
    first: party_pb2.PassRingRequest, rest: AsyncIterator[party_pb2.PassRingRequest]
) -> RingMessage:
    asm = _Assembler("ring message")
    chunk = first
    while True:
        header = (
            chunk.run.run_id,
            chunk.run.parameters_digest,
            chunk.source,
            chunk.hop,
            chunk.parties,
        )
        asm.start(header, chunk.total_rows)
        if not 2 <= chunk.parties <= 64:
            raise Malformed("ring message: parties must be between 2 and 64")
        rows = chunk.rows
        asm.advance(rows)
        asm.add("k", rows, _unpack(chunk.candidates, _U64, rows * chunk.parties, "candidates"))
        asm.add("c", rows, _unpack(chunk.c_masked, _U64, rows, "c_masked"))
        asm.add("x", rows, _unpack(chunk.x_masked, _U64, rows, "x_masked"))
        nxt = await anext(rest, None)
        if nxt is None:
            break
        chunk = nxt
    asm.finish()
    assert asm.header is not None
    p = int(asm.header[4])
    return RingMessage(
        hop=int(asm.header[3]),
        candidates=asm.array("k", (p,)),
        c_masked=asm.array("c", ()).ravel(),
        x_masked=asm.array("x", ()).ravel(),
    )


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
    step = _rows_per_chunk(24)
    for start in range(0, max(1, k), step):
        sl = slice(start, start + step)
        yield party_pb2.DeliverResultsRequest(
            run=run,
            source=source,
            target=target,
            total_rows=k,
            rows=len(range(k)[sl]),
            linkage_ids=_pack(np.asarray(linkage_ids)[sl], _U64),
            similarities=_pack(np.asarray(similarities)[sl], _F64),
            pseudonyms=_pack(np.asarray(pseudonyms)[sl], _U64),
        )


async def results_from_chunks(
    first: party_pb2.DeliverResultsRequest, rest: AsyncIterator[party_pb2.DeliverResultsRequest]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(linkage_ids uint64, similarities float64, pseudonyms uint64)."""
    asm = _Assembler("results")
    chunk = first
    while True:
        header = (chunk.run.run_id, chunk.run.parameters_digest, chunk.source, chunk.target)
        asm.start(header, chunk.total_rows)
        rows = chunk.rows
        asm.advance(rows)
        asm.add("l", rows, _unpack(chunk.linkage_ids, _U64, rows, "linkage_ids"))
        asm.add("s", rows, _unpack(chunk.similarities, _F64, rows, "similarities"))
        asm.add("p", rows, _unpack(chunk.pseudonyms, _U64, rows, "pseudonyms"))
        nxt = await anext(rest, None)
        if nxt is None:
            break
        chunk = nxt
    asm.finish()
    sims = asm.array("s", (), np.float64).ravel().astype(np.float64)
    return asm.array("l", ()).ravel(), sims, asm.array("p", ()).ravel()
