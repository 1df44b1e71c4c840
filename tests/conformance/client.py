"""A black-box pprl.v1 client written from docs/protocol.md: channels, digests, chunks, a probe party.

Nothing here imports the implementation (party/, coordinator/, proto/linkage.py, proto/transport.py):
only the generated stubs, grpc and the standard primitives the specification names. The canonical
parameters digest and the key confirmation are recomputed independently from their definitions, so
the live suite checks a deployment against the specification, not against itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.x509.oid import NameOID

from proto import common_pb2, party_pb2, party_pb2_grpc

U64 = np.dtype("<u8")
F64 = np.dtype("<f8")
MAX_MESSAGE = 8 * 2**20
CALL_TIMEOUT = 20.0


@dataclass(frozen=True)
class Identity:
    """A TLS client identity: PEM certificate chain and key; ``name`` is the certificate's CN."""

    cert: bytes
    key: bytes
    name: str = ""

    @classmethod
    def load(cls, cert: bytes, key: bytes) -> Identity:
        return cls(cert=cert, key=key, name=common_name(cert))


def common_name(cert_pem: bytes) -> str:
    cert = x509.load_pem_x509_certificate(cert_pem)
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    value = names[0].value if names else ""
    return value.decode() if isinstance(value, bytes) else str(value)


def channel(address: str, peer_name: str, ca: bytes, ident: Identity | None) -> grpc.aio.Channel:
    """A mutual-TLS channel whose server must present a certificate for ``peer_name``."""
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=ident.key if ident else None,
        certificate_chain=ident.cert if ident else None,
    )
    options: list[tuple[str, Any]] = [
        ("grpc.ssl_target_name_override", peer_name),
        ("grpc.max_receive_message_length", 2 * MAX_MESSAGE),
        ("grpc.enable_retries", 0),
    ]
    return grpc.aio.secure_channel(address, creds, options=options)


# -- digests (docs/protocol.md, "Parameters and their digest", "Key confirmation") ---------------


def canonical_json(obj: Any) -> bytes:
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def parameters_message(obj: Mapping[str, Any]) -> common_pb2.LinkageParameters:
    """A LinkageParameters message from a parameters object (schema inline)."""
    return common_pb2.LinkageParameters(
        version=int(obj.get("version", 1)),
        parties=list(obj["parties"]),
        schema_json=canonical_json(obj["schema"]).decode("utf-8"),
        match_threshold=float(obj["match_threshold"]),
        segment_threshold=float(obj["segment_threshold"]),
        one_to_one=bool(obj.get("one_to_one", True)),  # the parameters file default
        max_block_size=int(obj.get("max_block_size") or 0),
        mode="" if obj.get("mode", "segments") == "segments" else str(obj["mode"]),
        compute_parties=list(obj.get("compute_parties") or []),
        # the parameters file default target is "any"; the message's empty target means "all"
        target="" if obj.get("target", "any") == "all" else str(obj.get("target", "any")),
        min_parties=int(obj.get("min_parties") or 0),
        solver=str(obj.get("solver") or ""),
    )


def parameters_digest(msg: common_pb2.LinkageParameters) -> str:
    """SHA-256 hex of the canonical JSON of the message (schema parsed, 0 cap as null; in mode
    mpc3 also "mode" and the resolved "compute_parties", default the first three parties; for
    target any also "target", "min_parties" (default 2) and "solver" (default "guarded"))."""
    obj: dict[str, Any] = {
        "version": msg.version,
        "parties": list(msg.parties),
        "schema": json.loads(msg.schema_json),
        "match_threshold": msg.match_threshold,
        "segment_threshold": msg.segment_threshold,
        "one_to_one": msg.one_to_one,
        "max_block_size": msg.max_block_size or None,
    }
    if msg.mode == "mpc3":
        obj["mode"] = "mpc3"
        obj["compute_parties"] = list(msg.compute_parties or msg.parties[:3])
    if msg.target or msg.min_parties or msg.solver:  # target any: resolved m and solver
        obj["target"] = msg.target or "all"
        obj["min_parties"] = msg.min_parties or 2
        obj["solver"] = msg.solver or "guarded"
    return hashlib.sha256(canonical_json(obj)).hexdigest()


def key_confirmation(secret: bytes, run_id: str, digest: str) -> bytes:
    info = b"pprl.v1 key confirmation"
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"pprl.v1", info=info).derive(secret)
    return hmac.new(key, info + b"|" + run_id.encode() + b"|" + digest.encode(), "sha256").digest()


def peer_confirmation(secret: bytes, run_id: str, digest: str, sender: str, receiver: str) -> bytes:
    """The directional confirmation ``sender`` puts on its first PushBlocks chunk to ``receiver``."""
    info = b"pprl.v1 key confirmation"
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"pprl.v1", info=info).derive(secret)
    body = "|".join((run_id, digest, sender, receiver)).encode()
    return hmac.new(key, info + b"|peer|" + body, "sha256").digest()


def new_run_id() -> str:
    return os.urandom(16).hex()


# -- payloads ----------------------------------------------------------------------------------


def u64(values: Iterable[int] | np.ndarray) -> bytes:
    return np.asarray(values, dtype=np.uint64).astype(U64).tobytes()


def from_u64(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=U64).astype(np.uint64)


def i32(values: Iterable[int] | np.ndarray) -> bytes:
    return np.asarray(values, dtype=np.int64).astype("<i4").tobytes()


def from_i32(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i4").astype(np.int64)


def words_for(bits: int) -> int:
    return (bits + 63) // 64


def popcount(words: np.ndarray) -> np.ndarray:
    """Per-row popcount of an (n, w) uint64 array."""
    return np.bitwise_count(words).sum(axis=-1).astype(np.int64)


def ones_row(bits: int) -> np.ndarray:
    """One packed row with bits 0..bits-1 set and the padding bits clear."""
    row = np.full(words_for(bits), np.uint64(2**64 - 1), dtype=np.uint64)
    rem = bits % 64
    if rem:
        row[-1] = np.uint64((1 << rem) - 1)
    return row


async def stream_of(messages: Sequence[Any]) -> AsyncIterator[Any]:
    for m in messages:
        yield m


async def status_of(coro: Any) -> grpc.StatusCode:
    """The status code a call ends with (OK when it succeeds)."""
    try:
        await coro
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


# -- the probe party: a minimal second implementation of the Party service ----------------------


@dataclass
class Received:
    """What a real party sent to the probe, per RPC, in arrival order."""

    blocks: asyncio.Queue[np.ndarray] = field(default_factory=asyncio.Queue)
    shares: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)
    rings: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)


class ProbeServicer(party_pb2_grpc.PartyServicer):
    """Accepts peer streams from real parties and hands the decoded arrays to the test."""

    def __init__(self) -> None:
        self.received = Received()

    async def _all(self, it: AsyncIterator[Any]) -> list[Any]:
        return [m async for m in it]

    async def PushBlocks(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802
        chunks = await self._all(request_iterator)
        digests = np.concatenate([from_u64(c.digests) for c in chunks])
        await self.received.blocks.put(digests)
        return party_pb2.PushBlocksResponse(received=digests.size)

    async def PushShare(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802
        chunks = await self._all(request_iterator)
        first = chunks[0]
        w, b = words_for(first.segment_bits), first.block_columns
        share = {
            "source": first.source,
            "target": first.target,
            "segment_bits": first.segment_bits,
            "pseudonyms": np.concatenate([from_u64(c.pseudonyms) for c in chunks]),
            "block_positions": np.concatenate(
                [from_i32(c.block_positions) for c in chunks]
            ).reshape(-1, b),
            "segments": np.concatenate([from_u64(c.segments) for c in chunks]).reshape(-1, w),
        }
        await self.received.shares.put(share)
        return party_pb2.PushShareResponse(received=share["pseudonyms"].size)

    async def PassRing(self, request_iterator: Any, context: Any) -> Any:  # noqa: N802
        chunks = await self._all(request_iterator)
        p = chunks[0].parties
        ring = {
            "source": chunks[0].source,
            "hop": chunks[0].hop,
            "candidates": np.concatenate([from_u64(c.candidates) for c in chunks]).reshape(-1, p),
            "c_masked": np.concatenate([from_u64(c.c_masked) for c in chunks]),
            "x_masked": np.concatenate([from_u64(c.x_masked) for c in chunks]),
        }
        await self.received.rings.put(ring)
        return party_pb2.PassRingResponse(received=ring["candidates"].shape[0])


class ProbeServer:
    """A TLS server for the probe identity on ``host`` (port chosen by the OS)."""

    def __init__(self, ca: bytes, ident: Identity, host: str, advertise: str | None = None):
        self.servicer = ProbeServicer()
        self.server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE)])
        party_pb2_grpc.add_PartyServicer_to_server(self.servicer, self.server)
        creds = grpc.ssl_server_credentials(
            [(ident.key, ident.cert)], root_certificates=ca, require_client_auth=True
        )
        port = self.server.add_secure_port(f"{host}:0", creds)
        self.address = f"{advertise or host}:{port}"

    async def __aenter__(self) -> ProbeServer:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(0)
