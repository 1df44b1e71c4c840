"""A party passing the ring on waits for its pipe to drain when its buffer budget is short,
instead of failing the run; it is refused only when nothing queued could free room."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from party.node.budget import BufferBudget, BufferLimitExceeded
from party.node.errors import RunAborted
from party.node.node import reserve_piped

MIB = 2**20


def _run(aborted: bool = False) -> Any:
    return cast(Any, SimpleNamespace(aborted=aborted, reason="stopped", run_id="r1"))


async def test_waits_until_the_successor_takes_a_queued_chunk() -> None:
    budget = BufferBudget(4 * MIB)
    account = budget.account("r1")
    pipe: asyncio.Queue[Any] = asyncio.Queue(4)
    for _ in range(4):  # an incoming chunk and three queued outgoing ones fill the budget
        account.reserve(MIB, "chunk")
    for _ in range(3):
        pipe.put_nowait("chunk")

    async def successor() -> None:  # takes one chunk later and gives its bytes back
        await asyncio.sleep(0.05)
        await pipe.get()
        account.release(MIB)

    taker = asyncio.ensure_future(successor())
    await asyncio.wait_for(reserve_piped(_run(), account, pipe, MIB), 5)
    await taker
    assert account.held == 4 * MIB and pipe.qsize() == 2


async def test_refused_when_nothing_queued_could_free_room() -> None:
    budget = BufferBudget(4 * MIB)
    account = budget.account("r1")
    account.reserve(4 * MIB, "incoming")
    with pytest.raises(BufferLimitExceeded, match="ring message passed on"):
        await reserve_piped(_run(), account, asyncio.Queue(4), MIB)
    assert account.held == 4 * MIB


async def test_an_aborted_run_stops_waiting() -> None:
    budget = BufferBudget(MIB)
    account = budget.account("r1")
    account.reserve(MIB, "queued")
    pipe: asyncio.Queue[Any] = asyncio.Queue(4)
    pipe.put_nowait("chunk")
    with pytest.raises(RunAborted, match="stopped"):
        await asyncio.wait_for(reserve_piped(_run(aborted=True), account, pipe, MIB), 5)


async def test_reserves_at_once_when_there_is_room() -> None:
    account = BufferBudget(4 * MIB).account("r1")
    await reserve_piped(_run(), account, asyncio.Queue(4), MIB)
    assert account.held == MIB
