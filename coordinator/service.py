"""The Coordinator servicer and run orchestration (agreement, prepare/audit, execute, abort).

Run state machine (persisted in SQLite, coordinator/store.py):
CREATED -> AGREED -> AUDITED -> EXCHANGING -> COMPARING -> SUMMING -> DONE, and FAILED (with a
reason naming the party and stage) from any state. EXCHANGING/COMPARING/SUMMING follow the slowest
party: the run's stage is the earliest stage any party still reports.

The coordinator relays only control messages: it never receives encodings, segments, c_i/x_i or
sums; it sees parameters, digests, key-confirmation values (which it only compares for equality),
progress counters, and each party's final summary (number of matches, bytes sent, timings).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from coordinator.config import CoordinatorConfig
from coordinator.errors import (
    AlreadyExists,
    FailedPrecondition,
    Forbidden,
    InvalidArgument,
    NotFound,
    Unauthenticated,
    Unavailable,
    abort_with,
)
from coordinator.stall import LoopStallMonitor
from coordinator.store import TERMINAL, Store
from proto import (
    common_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    linkage,
    party_pb2,
    party_pb2_grpc,
)
from proto.transport import Security, address_problem, caller_identity, check_health

log = logging.getLogger(__name__)
S = common_pb2.Stage
PARTY_SERVICE = "pprl.v1.Party"
ABORT_GRACE = 1.0
PROBE_TIMEOUT = 2.0  # health check of a registered address before it is replaced
EXEC_ORDER: dict[int, int] = {
    S.STAGE_AUDITED: 0,
    S.STAGE_EXCHANGING: 1,
    S.STAGE_COMPARING: 2,
    S.STAGE_SUMMING: 3,
    S.STAGE_DONE: 4,
}


NODE_NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
RUN_ID_RE = re.compile(r"[0-9a-f]{32}")
MAX_RUN_TIMEOUT = 7 * 24 * 3600.0  # a week; also refuses inf and NaN


def check_run_id(run_id: str) -> None:
    """InvalidArgument (without echoing it) unless ``run_id`` is 32 lower-case hex characters."""
    if not RUN_ID_RE.fullmatch(run_id):
        raise InvalidArgument("run_id must be 32 lower-case hex characters")


def stage_name(stage: int) -> str:
    return S.Name(stage).removeprefix("STAGE_").lower()


class RunFailure(Exception):
    """Ends a run; the message is the public reason (names the party and stage)."""


class _ActiveRun:
    def __init__(
        self,
        run_id: str,
        digest: str,
        params: common_pb2.LinkageParameters,
        directory: dict[str, str],
        timeout: float,
    ):
        self.run_id = run_id
        self.digest = digest
        self.params = params
        self.directory = directory
        self.timeout = timeout
        self.stage: common_pb2.Stage = S.STAGE_CREATED
        # Every node of the run: the parties and, in mpc3 with P = 2, the helper compute node.
        self.nodes: tuple[str, ...] = linkage.participants(params)
        self.party_stage: dict[str, common_pb2.Stage] = {p: S.STAGE_AUDITED for p in self.nodes}
        self.failed: str | None = None
        self.task: asyncio.Task[Any] | None = None
        self.answered: set[str] = set()  # parties that answered the proposal

    @property
    def ref(self) -> common_pb2.RunRef:
        return common_pb2.RunRef(run_id=self.run_id, parameters_digest=self.digest)


class CoordinatorService(coordinator_pb2_grpc.CoordinatorServicer):
    def __init__(self, config: CoordinatorConfig, security: Security, store: Store):
        self.config = config
        self.security = security
        self.store = store
        self.active: dict[str, _ActiveRun] = {}
        self._watchers: dict[str, set[asyncio.Queue[None]]] = collections.defaultdict(set)
        self._channels: dict[tuple[str, str], grpc.aio.Channel] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.stalls = LoopStallMonitor()  # started by the server (coordinator/server.py)

    # -- plumbing ------------------------------------------------------------------------------

    def identity(self, context: grpc.aio.ServicerContext) -> str:
        who = caller_identity(context, self.security.insecure)
        if not who:
            raise Unauthenticated("no caller identity (client certificate required)")
        return who

    def require_operator(self, context: grpc.aio.ServicerContext) -> str:
        who = self.identity(context)
        if who not in self.config.operators:
            raise Forbidden(f"caller {who!r} is not an operator of this coordinator")
        return who

    def party_stub(self, name: str, address: str) -> party_pb2_grpc.PartyStub:
        key = (name, address)
        ch = self._channels.get(key)
        if ch is None:
            ch = self._channels[key] = self.security.channel(address, name, [PARTY_SERVICE])
        return party_pb2_grpc.PartyStub(ch)

    def notify(self, run_id: str) -> None:
        for q in list(self._watchers.get(run_id, ())):
            q.put_nowait(None)

    def set_stage(self, run: _ActiveRun, stage: common_pb2.Stage, reason: str = "") -> None:
        if run.stage in TERMINAL:
            return
        run.stage = stage
        self.store.set_stage(run.run_id, stage, reason)
        log.info("run %s: %s%s", run.run_id, stage_name(stage), f" ({reason})" if reason else "")
        self.notify(run.run_id)

    async def close(self) -> None:
        await self.stalls.stop()
        for run in list(self.active.values()):
            if run.task is not None:
                run.task.cancel()
        await asyncio.gather(
            *(r.task for r in self.active.values() if r.task), return_exceptions=True
        )
        await asyncio.gather(*self._background, return_exceptions=True)
        for ch in self._channels.values():
            await ch.close()

    async def abort_parties(self, parties: list[str], run_id: str, reason: str) -> None:
        """Best effort: tell parties to abort ``run_id`` (short deadline, errors only logged)."""
        registry = self.store.parties()

        async def one(name: str) -> None:
            rec = registry.get(name)
            if rec is None:
                return
            try:
                await self.party_stub(name, rec.address).Abort(
                    party_pb2.AbortRequest(run_id=run_id, reason=reason),
                    timeout=min(5.0, self.config.timeouts.rpc),
                    metadata=self.security.metadata(),
                )
            except grpc.aio.AioRpcError as exc:
                log.info("abort of run %s at %s: %s", run_id, name, exc.code().name)

        await asyncio.gather(*(one(p) for p in parties))

    # -- RPCs ----------------------------------------------------------------------------------

    async def RegisterParty(
        self, request: coordinator_pb2.RegisterPartyRequest, context: grpc.aio.ServicerContext
    ) -> coordinator_pb2.RegisterPartyResponse:  # noqa: N802
        try:
            who = self.identity(context)
            if not NODE_NAME_RE.fullmatch(request.name):
                raise InvalidArgument("name must be a node name (a-z, 0-9 and '-', at most 63)")
            if request.name != who:
                raise Forbidden(f"caller {who!r} may not register as {request.name}")
            allowed = self.config.allowed_parties
            if allowed is not None and who not in allowed:
                raise Forbidden(f"{who!r} is not an allowed party of this coordinator")
            problem = address_problem(request.address)
            if problem is not None:
                raise InvalidArgument(f"address: {problem}")
            await self._refuse_replacing_a_live_node(who, request.address)
            self.store.register(request.name, request.address, who)
            log.info("party %s registered at %s", request.name, request.address)
            return coordinator_pb2.RegisterPartyResponse()
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def _refuse_replacing_a_live_node(self, name: str, address: str) -> None:
        """AlreadyExists when ``name`` is registered elsewhere at an address that still serves.

        The probe is a gRPC health check over mutual TLS with ``name`` as the TLS target, so only a
        node holding ``name``'s certificate counts as live. A second process started with the same
        certificate therefore cannot take a live party's place; a dead or stalled old address
        (no SERVING answer within PROBE_TIMEOUT) is replaced.
        """
        current = self.store.parties().get(name)
        if current is None or current.address == address:
            return
        status = await check_health(
            self.security, current.address, name, PROBE_TIMEOUT, PARTY_SERVICE
        )
        if status == "SERVING":
            log.warning(
                "refused to move %s: another node with its certificate still serves at its "
                "registered address",
                name,
            )
            raise AlreadyExists(
                f"{name} is already registered at another address that still serves (health "
                "check over mutual TLS); stop that node first"
            )

    async def ListParties(
        self, request: coordinator_pb2.ListPartiesRequest, context: grpc.aio.ServicerContext
    ) -> coordinator_pb2.ListPartiesResponse:  # noqa: N802
        try:
            self.require_operator(context)
            return coordinator_pb2.ListPartiesResponse(
                parties=[
                    coordinator_pb2.PartyInfo(
                        name=p.name,
                        address=p.address,
                        identity=p.identity,
                        registered_at=p.registered_at,
                    )
                    for p in self.store.parties().values()
                ]
            )
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def GetRun(
        self, request: coordinator_pb2.GetRunRequest, context: grpc.aio.ServicerContext
    ) -> coordinator_pb2.GetRunResponse:  # noqa: N802
        try:
            self.require_operator(context)
            check_run_id(request.run_id)
            status = self.store.status(request.run_id)
            if status is None:
                raise NotFound(f"unknown run {request.run_id}")
            return coordinator_pb2.GetRunResponse(status=status)
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def WatchRun(
        self, request: coordinator_pb2.WatchRunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[coordinator_pb2.WatchRunResponse]:  # noqa: N802
        try:
            self.require_operator(context)
            check_run_id(request.run_id)
            if not self.store.run_exists(request.run_id):
                raise NotFound(f"unknown run {request.run_id}")
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            return
        q: asyncio.Queue[None] = asyncio.Queue()
        self._watchers[request.run_id].add(q)
        try:
            while True:
                status = self.store.status(request.run_id)
                assert status is not None
                yield coordinator_pb2.WatchRunResponse(status=status)
                if status.stage in TERMINAL:
                    return
                await q.get()
                while not q.empty():  # coalesce bursts of updates
                    q.get_nowait()
        finally:
            self._watchers[request.run_id].discard(q)
            if not self._watchers[request.run_id]:
                self._watchers.pop(request.run_id, None)

    async def StartRun(
        self, request: coordinator_pb2.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> coordinator_pb2.StartRunResponse:  # noqa: N802
        try:
            self.require_operator(context)
            params = request.parameters
            try:
                digest = linkage.parameters_digest(params)
                mapping = linkage.parameters_from_mapping(linkage.parameters_file_object(params))
            except linkage.ParametersFormatError as exc:
                raise InvalidArgument(str(exc)) from None
            if linkage.parameters_digest(mapping) != digest:
                raise InvalidArgument("parameters are not in canonical form")
            registry = self.store.parties()
            nodes = linkage.participants(params)
            if self.config.name in nodes:
                raise InvalidArgument(
                    f"the coordinator's identity {self.config.name!r} cannot be a party or a "
                    "compute party of a run"
                )
            missing = [p for p in nodes if p not in registry]
            if missing:
                raise FailedPrecondition(
                    f"parties not registered with the coordinator: {', '.join(missing)}"
                )
            if not 0 <= request.timeout_seconds <= MAX_RUN_TIMEOUT:
                raise InvalidArgument(
                    f"timeout_seconds must be between 0 and {MAX_RUN_TIMEOUT:g} (0: the default)"
                )
            timeout = request.timeout_seconds or self.config.timeouts.run
            run_id = uuid.uuid4().hex
            directory = {p: registry[p].address for p in nodes}
            run = _ActiveRun(run_id, digest, params, directory, timeout)
            self.store.create_run(run_id, digest, params, timeout)
            self.active[run_id] = run
            try:
                await self._agree(run)
            except (FailedPrecondition, InvalidArgument, Unavailable) as exc:
                reason = str(exc)
                self.set_stage(run, S.STAGE_FAILED, reason)
                self.active.pop(run_id, None)
                await self.abort_parties(list(nodes), run_id, reason)
                raise type(exc)(f"run {run_id} failed: {reason}") from None
            except asyncio.CancelledError:
                # The operator gave up (deadline or cancel) before the parties agreed: the run must
                # not stay CREATED without a reason, nor stay PROPOSED at the parties.
                waiting = [p for p in nodes if p not in run.answered]
                reason = "the StartRun call was cancelled by its caller in stage created" + (
                    f" while waiting for {', '.join(waiting)}" if waiting else ""
                )
                self.set_stage(run, S.STAGE_FAILED, reason)
                self.active.pop(run_id, None)
                self._in_background(self.abort_parties(list(nodes), run_id, reason))
                raise
            self.set_stage(run, S.STAGE_AGREED)
            run.task = asyncio.create_task(self._drive(run))
            return coordinator_pb2.StartRunResponse(run_id=run_id, parameters_digest=digest)
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    # -- orchestration -------------------------------------------------------------------------

    async def _agree(self, run: _ActiveRun) -> None:
        """Propose to every party; compare digests and key confirmations."""
        directory = [common_pb2.PartyAddress(name=n, address=a) for n, a in run.directory.items()]
        request = party_pb2.ProposeRequest(
            run_id=run.run_id,
            parameters=run.params,
            parameters_digest=run.digest,
            directory=directory,
            run_timeout_seconds=run.timeout,
        )

        async def one(name: str) -> party_pb2.ProposeResponse:
            try:
                answer = await self.party_stub(name, run.directory[name]).Propose(
                    request, timeout=self.config.timeouts.rpc, metadata=self.security.metadata()
                )
                run.answered.add(name)
                return answer
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                detail = f"{name} rejected the parameters: {exc.details()}"
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    raise InvalidArgument(detail) from None
                if code in (
                    grpc.StatusCode.FAILED_PRECONDITION,
                    grpc.StatusCode.ALREADY_EXISTS,
                    grpc.StatusCode.PERMISSION_DENIED,
                ):
                    raise FailedPrecondition(detail) from None
                raise Unavailable(
                    f"{name} could not be reached in stage created: {code.name}: {exc.details()}"
                ) from None

        results = await asyncio.gather(*(one(p) for p in run.nodes), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        answers = dict(zip(run.nodes, results, strict=True))
        for name, resp in answers.items():
            assert isinstance(resp, party_pb2.ProposeResponse)
            if resp.parameters_digest != run.digest:
                raise FailedPrecondition(f"{name} computed a different parameters digest")
        groups: dict[bytes, list[str]] = collections.defaultdict(list)
        for name, resp in answers.items():
            assert isinstance(resp, party_pb2.ProposeResponse)
            if name in run.params.parties:  # a helper compute node holds no linkage secret
                groups[resp.key_confirmation].append(name)
        if len(groups) > 1:
            ranked = sorted(groups.values(), key=len, reverse=True)
            if len(ranked[0]) > len(ranked[1]):
                odd = sorted(n for g in ranked[1:] for n in g)
                raise FailedPrecondition(
                    f"key confirmation failed: {', '.join(odd)} "
                    f"{'does' if len(odd) == 1 else 'do'} not hold the same linkage "
                    f"secret as {', '.join(ranked[0])}"
                )
            raise FailedPrecondition(
                "key confirmation failed: the parties do not share one linkage secret ("
                + " | ".join(", ".join(g) for g in ranked)
                + ")"
            )

    async def _drive(self, run: _ActiveRun) -> None:
        """Prepare then execute; on any failure mark FAILED and abort every party."""
        try:
            async with asyncio.timeout(run.timeout):
                await self._prepare(run)
                self.set_stage(run, S.STAGE_AUDITED)
                await self._execute(run)
            self.set_stage(run, S.STAGE_DONE)
        except RunFailure as exc:
            await self._fail(run, str(exc))
        except TimeoutError:
            await self._fail(
                run, f"run timed out after {run.timeout:g}s in stage {stage_name(run.stage)}"
            )
        except asyncio.CancelledError:
            await self._fail(
                run, f"the coordinator stopped while the run was {stage_name(run.stage)}"
            )
            raise
        except Exception:  # noqa: BLE001
            log.exception("run %s: internal error", run.run_id)
            await self._fail(run, f"coordinator internal error in stage {stage_name(run.stage)}")
        finally:
            self.active.pop(run.run_id, None)

    async def _fail(self, run: _ActiveRun, reason: str) -> None:
        """Mark the run FAILED (first reason wins) and tell every party, once.

        The aborts run in the background; we wait at most ABORT_GRACE seconds for them so that
        parties usually hear the reason before their Execute streams are cancelled, without a
        stalled party delaying everyone else.
        """
        if run.failed is not None:
            return
        run.failed = reason
        self.set_stage(run, S.STAGE_FAILED, reason)
        task = self._in_background(self.abort_parties(list(run.nodes), run.run_id, reason))
        await asyncio.wait({task}, timeout=ABORT_GRACE)

    def _in_background(self, coro: Any) -> asyncio.Task[Any]:
        """Run ``coro`` as a task the service keeps (and awaits at close)."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _prepare(self, run: _ActiveRun) -> None:
        async def one(name: str) -> None:
            try:
                resp = await self.party_stub(name, run.directory[name]).Prepare(
                    party_pb2.PrepareRequest(run=run.ref),
                    timeout=self.config.timeouts.prepare,
                    metadata=self.security.metadata(),
                )
            except grpc.aio.AioRpcError as exc:
                raise RunFailure(
                    f"{name} failed in stage audited (encoding and self-audit): {exc.code().name}: {exc.details()}"
                ) from None
            if not resp.allowed:
                raise RunFailure(
                    f"{name} declined in stage audited (self-audit): " + "; ".join(resp.reasons)
                )

        await _first_failure([one(p) for p in run.nodes], self._failure_hook(run))

    def _failure_hook(self, run: _ActiveRun) -> Callable[[BaseException], Awaitable[None]]:
        async def hook(exc: BaseException) -> None:
            if isinstance(exc, RunFailure):
                await self._fail(run, str(exc))

        return hook

    async def _execute(self, run: _ActiveRun) -> None:
        liveness = self.config.timeouts.liveness

        async def one(name: str) -> None:
            stub = self.party_stub(name, run.directory[name])
            call = stub.Execute(
                party_pb2.ExecuteRequest(run=run.ref),
                timeout=run.timeout,  # plus the per-message liveness timeout below
                metadata=self.security.metadata(),
            )
            stream = call.__aiter__()
            reading: asyncio.Future[Any] | None = None
            try:
                while True:
                    waiting_since = time.monotonic()
                    # A read is never cancelled on timeout (that would cancel the call): after a
                    # stall of the coordinator the same read goes on and finds the queued messages.
                    if reading is None:
                        reading = asyncio.ensure_future(anext(stream))
                    try:
                        done, _ = await asyncio.wait({reading}, timeout=liveness)
                        if not done:
                            raise TimeoutError
                        msg = reading.result()
                        reading = None
                    except StopAsyncIteration:
                        raise RunFailure(
                            f"{name} ended its stream without a result in stage {stage_name(run.party_stage[name])}"
                        ) from None
                    except TimeoutError:
                        if self.stalls.stalled_since(waiting_since):
                            # The coordinator itself did not run: the silence is ours.
                            log.warning(
                                "run %s: coordinator stalled; %s not blamed", run.run_id, name
                            )
                            continue
                        raise RunFailure(
                            f"{name} stopped responding in stage {stage_name(run.party_stage[name])} "
                            f"(no message for {liveness:g}s)"
                        ) from None
                    except grpc.aio.AioRpcError as exc:
                        if self.stalls.stalled_since(waiting_since):
                            raise RunFailure(
                                f"the coordinator stalled (its process did not run for "
                                f"{self.stalls.longest:.0f}s) and lost its stream to {name} in "
                                f"stage {stage_name(run.party_stage[name])}"
                            ) from None
                        raise RunFailure(
                            f"{name} disconnected in stage {stage_name(run.party_stage[name])}: "
                            f"{exc.code().name}: {exc.details()}"
                        ) from None
                    attribute_to_stream(msg, name, run.party_stage[name])
                    if msg.heartbeat:
                        continue
                    if msg.progress.stage in EXEC_ORDER:
                        run.party_stage[name] = msg.progress.stage
                    self.store.set_progress(run.run_id, msg.progress)
                    if msg.HasField("summary"):
                        if msg.progress.stage != S.STAGE_DONE:
                            raise RunFailure(
                                msg.reason
                                or f"{name} failed in stage {stage_name(run.party_stage[name])}"
                            )
                        self.store.set_summary(run.run_id, msg.summary)
                        self.notify(run.run_id)
                        return
                    slowest = min(run.party_stage.values(), key=lambda s: EXEC_ORDER[s])
                    if (
                        slowest != run.stage
                        and EXEC_ORDER.get(slowest, 0) > EXEC_ORDER.get(run.stage, 0)
                        and slowest != S.STAGE_DONE
                    ):
                        self.set_stage(run, slowest)
                    else:
                        self.notify(run.run_id)
            finally:
                call.cancel()
                if reading is not None:
                    reading.cancel()

        await _first_failure([one(p) for p in run.nodes], self._failure_hook(run))


def attribute_to_stream(msg: party_pb2.ExecuteResponse, name: str, stage: int) -> None:
    """File every message of ``name``'s Execute stream under ``name``, in place.

    The stream's party is the certificate identity the channel pinned (TLS target name = ``name``);
    the ``party`` fields of the message are the sender's claim. A message claiming another party is
    a protocol violation that fails the run, naming the sender (never filed under the other name).
    """
    claims = {msg.progress.party}
    if msg.HasField("summary"):
        claims.add(msg.summary.party)
    if claims - {"", name}:
        raise RunFailure(
            f"{name} sent a message attributed to another party in stage {stage_name(stage)}"
        )
    msg.progress.party = name
    if msg.HasField("summary"):
        msg.summary.party = name


async def _first_failure(
    coros: list[Any], on_failure: Callable[[BaseException], Awaitable[None]] | None = None
) -> None:
    """Run concurrently; on the first exception await ``on_failure(exc)`` (while the others still
    run, so parties hear the reason before their streams close), cancel the rest and re-raise."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        for fut in asyncio.as_completed(tasks):
            try:
                await fut
            except Exception as exc:
                if on_failure is not None:
                    await on_failure(exc)
                raise
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
