"""Outgoing calls of a party node: to other parties (bulk streams) and to the coordinator.

Every call has a deadline; retries happen only on UNAVAILABLE through the channel's service
config (proto/transport.py). Channels are created inside the running loop and cached per address.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any, TypeVar

import grpc

from party.node.hooks import Hooks
from proto import coordinator_pb2, coordinator_pb2_grpc, party_pb2_grpc
from proto.transport import Security

log = logging.getLogger(__name__)
T = TypeVar("T")

PARTY_SERVICE = "pprl.v1.Party"
COORDINATOR_SERVICE = "pprl.v1.Coordinator"


class PeerClients:
    def __init__(self, security: Security, hooks: Hooks):
        self.security = security
        self.hooks = hooks
        self._channels: dict[tuple[str, str], grpc.aio.Channel] = {}

    def _channel(self, name: str, address: str, service: str) -> grpc.aio.Channel:
        key = (name, address)
        ch = self._channels.get(key)
        if ch is None:
            ch = self.security.channel(address, name, [service])
            self._channels[key] = ch
        return ch

    def party(self, name: str, address: str) -> party_pb2_grpc.PartyStub:
        return party_pb2_grpc.PartyStub(self._channel(name, address, PARTY_SERVICE))

    def coordinator(self, name: str, address: str) -> coordinator_pb2_grpc.CoordinatorStub:
        return coordinator_pb2_grpc.CoordinatorStub(
            self._channel(name, address, COORDINATOR_SERVICE)
        )

    async def _counted(self, chunks: Iterable[T] | AsyncIterable[T]) -> AsyncIterator[T]:
        if isinstance(chunks, AsyncIterable):  # e.g. mpc3 rounds, produced as the circuit runs
            async for chunk in chunks:
                self.hooks.sent(chunk)  # type: ignore[arg-type]
                yield chunk
            return
        # Chunks may be produced by disk reads and engine work (streamed ring and results):
        # produce each one in a worker thread so the event loop stays responsive.
        it: Iterator[Any] = iter(chunks)
        done = object()
        while True:
            item: Any = await asyncio.to_thread(next, it, done)
            if item is done:
                return
            self.hooks.sent(item)
            yield item

    async def stream(self, method, chunks: Iterable[T] | AsyncIterable[T], timeout: float):  # type: ignore[no-untyped-def]
        """Call a client-streaming ``method`` with ``chunks``; returns the response."""
        return await method(
            self._counted(chunks), timeout=timeout, metadata=self.security.metadata()
        )

    async def unary(self, method, request: Any, timeout: float):  # type: ignore[no-untyped-def]
        """Call a unary ``method`` with ``request`` (counted as sent); returns the response."""
        self.hooks.sent(request)
        return await method(request, timeout=timeout, metadata=self.security.metadata())

    async def register(
        self, coordinator_name: str, address: str, name: str, advertise: str, timeout: float
    ) -> None:
        req = coordinator_pb2.RegisterPartyRequest(name=name, address=advertise)
        self.hooks.sent(req)
        await self.coordinator(coordinator_name, address).RegisterParty(
            req, timeout=timeout, metadata=self.security.metadata(), wait_for_ready=True
        )

    async def close(self) -> None:
        for ch in self._channels.values():
            await ch.close()
        self._channels.clear()
