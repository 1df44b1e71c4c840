"""The node's buffer budget: one bound on every byte peers can make this node hold, per run.

Every receiver (PushBlocks, PushShare, PassRing, DeliverResults, and any later stream such as the
mpc3 share and round buffers) counts what it buffers against one ``BufferBudget`` per node, through
the run's ``RunAccount``:

    account = node.budget.account(run_id)
    account.reserve(nbytes, "segment share of party-b")   # BufferLimitExceeded when over the bound
    ...
    account.release(nbytes)                              # when the buffer is consumed or dropped

``try_reserve(nbytes)`` is the non-raising variant for holders that can spill to disk instead of
failing (the engine's survivor and ring stores). ``BufferBudget.close_run(run_id)`` runs when a run
ends (done, failed, aborted, declined, forgotten): it releases whatever the run still holds and
refuses later reservations for it (``RunClosed``), so a finished run holds no buffered bytes and a
late stream of a dead run cannot buffer any. ``held(run_id)`` and ``held_total()`` are what tests
and logs read. Thread-safe: engine stores reserve from worker threads.

Receivers also check a stream's *declared* size before buffering anything (``reserve`` of the whole
declared size at the first chunk), so a peer announcing 2^31 rows is refused at once with
RESOURCE_EXHAUSTED instead of after gigabytes have arrived.
"""

from __future__ import annotations

import threading

import grpc

from party.node.errors import NodeError


class BufferLimitExceeded(NodeError):
    """A reservation would take the node's buffered bytes over its budget."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class RunClosed(NodeError):
    """A reservation for a run that has already ended."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class BufferBudget:
    """Bytes held for peers' data by all runs of one node, against ``limit_bytes``."""

    def __init__(self, limit_bytes: int) -> None:
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes < 1:
            raise ValueError("buffer budget must be a positive number of bytes")
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._closed: set[str] = set()
        self._total = 0

    def account(self, run_id: str) -> RunAccount:
        """The per-run view every receiver of ``run_id`` calls."""
        return RunAccount(self, run_id)

    def try_reserve(self, run_id: str, nbytes: int) -> bool:
        """Reserve ``nbytes`` for ``run_id`` if they fit; False (nothing reserved) otherwise."""
        if nbytes < 0:
            raise ValueError("cannot reserve a negative number of bytes")
        with self._lock:
            if run_id in self._closed:
                raise RunClosed(f"run {run_id} has ended: it accepts no more data")
            if self._total + nbytes > self.limit_bytes:
                return False
            self._held[run_id] = self._held.get(run_id, 0) + nbytes
            self._total += nbytes
            return True

    def reserve(self, run_id: str, nbytes: int, what: str) -> None:
        """Reserve or raise BufferLimitExceeded naming ``what`` (never its contents)."""
        if not self.try_reserve(run_id, nbytes):
            raise BufferLimitExceeded(
                f"run {run_id}: {what} needs {nbytes:,} bytes, more than this node's buffer "
                f"budget has left ({self.limit_bytes:,} bytes in all, [limits] memory_budget_mib)"
            )

    def release(self, run_id: str, nbytes: int) -> None:
        """Give back ``nbytes`` of ``run_id`` (no-op for a closed run: close released them)."""
        with self._lock:
            have = self._held.get(run_id)
            if have is None:
                return
            nbytes = min(nbytes, have)
            self._held[run_id] = have - nbytes
            self._total -= nbytes

    def close_run(self, run_id: str) -> int:
        """The run ended: release all it holds, refuse later reservations; return bytes freed."""
        with self._lock:
            freed = self._held.pop(run_id, 0)
            self._total -= freed
            self._closed.add(run_id)
            return freed

    def forget(self, run_id: str) -> None:
        """Drop every trace of a closed run (when the node forgets the run itself)."""
        with self._lock:
            freed = self._held.pop(run_id, 0)
            self._total -= freed
            self._closed.discard(run_id)

    def held(self, run_id: str) -> int:
        with self._lock:
            return self._held.get(run_id, 0)

    def held_total(self) -> int:
        with self._lock:
            return self._total


class RunAccount:
    """``BufferBudget`` calls bound to one run (see the module docstring)."""

    def __init__(self, budget: BufferBudget, run_id: str) -> None:
        self.budget = budget
        self.run_id = run_id

    def reserve(self, nbytes: int, what: str) -> None:
        self.budget.reserve(self.run_id, nbytes, what)

    def try_reserve(self, nbytes: int) -> bool:
        return self.budget.try_reserve(self.run_id, nbytes)

    def release(self, nbytes: int) -> None:
        self.budget.release(self.run_id, nbytes)

    @property
    def held(self) -> int:
        return self.budget.held(self.run_id)
