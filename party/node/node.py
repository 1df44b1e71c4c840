"""The party node: the Party gRPC servicer and the per-run driver around the protocol engine.

The node is a thin adapter: it decodes requests, checks the caller's identity and the run's stage,
and moves SegmentShare / RingMessage / PartyResults objects between the PartyEngine of this party
and its peers. CPU work (encoding, audit, comparison) runs off the event loop (asyncio.to_thread).

Run life cycle at a party: PROPOSED (parameters accepted, key confirmation returned) -> PREPARED
(data encoded, audit gate passed; or DECLINED) -> EXECUTING (exchange, compare, ring, results) ->
DONE or FAILED. Peer data (blocks, shares, ring, results) is accepted in PREPARED and EXECUTING;
anything else gets FAILED_PRECONDITION. Mode mpc3 runs its own flow (party/node/mpc3.py); this
module only dispatches to it and hosts its thin RPC handlers.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import hmac
import json
import logging
import pathlib
import resource
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import numpy as np
from google.protobuf.message import Message

from party.config import PartyConfig
from party.encoding.schema import LinkageSchema, load_schema, parse_schema
from party.errors import PprlError
from party.node import heap, mpc3, wire
from party.node.budget import BufferBudget, RunAccount
from party.node.errors import (
    AlreadyExists,
    DigestMismatch,
    Forbidden,
    InvalidParameters,
    KeyMismatch,
    LocalDataError,
    Malformed,
    RunAborted,
    RunFailed,
    Unauthenticated,
    UnknownRun,
    WrongStage,
    abort_with,
    status_for,
)
from party.node.hooks import Hooks
from party.node.keyconfirm import key_confirmation, peer_confirmation
from party.node.peers import PeerClients
from party.node.results import remove_run, write_match_chunks
from party.node.trust import check_recipients
from party.protocol.blocks import is_digest_set
from party.protocol.engine import ComparisonStats
from party.protocol.params import ProtocolParameters
from party.protocol.ring import RingMessage
from party.protocol.solver import DEFAULT_SOLVER
from proto import common_pb2, linkage, party_pb2, party_pb2_grpc
from proto.transport import Security, address_problem, caller_identity

log = logging.getLogger(__name__)
S = common_pb2.Stage
MAX_KEPT_RUNS = 64
MAX_REASON_CHARS = 1000
#: Outgoing ring chunks (about 1 MiB each) a party passing the ring on as it comes keeps queued
#: for its successor at most (more wait in gRPC's flow control, which then stops the predecessor).
PIPE_CHUNKS = 4
#: How often a ring step waiting for its budget looks again while its pipe drains.
PIPE_WAIT_SECONDS = 0.01
T = TypeVar("T")


def pipes_ring(index: int, parties: int) -> bool:
    """Whether ring party ``index`` passes the ring on chunk by chunk as it comes (parties
    1..P-2). The last party keeps its whole output first: the initiator reads the returning ring
    only after its own stream ended, which a fully pipelined ring would stall."""
    return 0 < index < parties - 1


def _ring_bytes(msg: RingMessage) -> int:
    return int(msg.candidates.nbytes + msg.c_masked.nbytes + msg.x_masked.nbytes)


class Phase(enum.Enum):
    PROPOSED = "proposed"
    PREPARING = "preparing"
    PREPARED = "prepared"
    DECLINED = "declined"
    EXECUTING = "executing"
    DONE = "done"
    FAILED = "failed"


STAGE_NAMES: dict[int, str] = {
    S.STAGE_EXCHANGING: "exchanging",
    S.STAGE_COMPARING: "comparing",
    S.STAGE_SUMMING: "summing",
    S.STAGE_DONE: "done",
    S.STAGE_FAILED: "failed",
}


@dataclass
class Run:
    run_id: str
    digest: str
    message: common_pb2.LinkageParameters
    params: ProtocolParameters
    schema: LinkageSchema
    index: int
    directory: dict[str, str]
    phase: Phase = Phase.PROPOSED
    engine: Any = None
    records_count: int = 0
    blocks_in: dict[int, np.ndarray] = field(default_factory=dict)
    shares_in: set[int] = field(default_factory=set)  # accepted by the engine
    shares_seen: set[int] = field(default_factory=set)  # being received or accepted
    ring_in: bool = False  # a ring message is being (or was) received
    results_in: bool = False  # results are being (or were) received
    ring_out_rows: int = 0  # non-initiator: rows to pass on after ring_step_end
    # ring parties 1..P-2 pass the ring on as it comes: the receiving handler puts each outgoing
    # chunk here (None at the end), the run driver streams them to the successor
    ring_pipe: asyncio.Queue[RingMessage | None] | None = None
    ring_bound: int = 0  # the incoming ring's declared total (the piped message's bound)
    stage: common_pb2.Stage = S.STAGE_UNSPECIFIED
    reason: str = ""
    cancel: threading.Event = field(default_factory=threading.Event)
    events: dict[str, asyncio.Event] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    bytes_at_start: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Messages for the coordinator's Execute stream; task_done() once each has been written.
    outbox: asyncio.Queue[party_pb2.ExecuteResponse] | None = None
    comparison: ComparisonStats | None = None  # counts of the local comparison, once it ran
    ring_counts: tuple[int, int, int] = (0, 0, 0)  # initiator: sets summed, above s_t, matches
    nodes: tuple[str, ...] = ()  # parties, then helper compute nodes (mode mpc3, P = 2)
    timeout: float = 3600.0  # the coordinator's run timeout (seconds)
    mpc: mpc3.Mpc3State | None = None  # mode mpc3 only

    def event(self, name: str) -> asyncio.Event:
        ev = self.events.get(name)
        if ev is None:
            ev = self.events[name] = asyncio.Event()
        return ev

    @property
    def parties(self) -> tuple[str, ...]:
        return self.params.parties

    @property
    def ref(self) -> common_pb2.RunRef:
        return common_pb2.RunRef(run_id=self.run_id, parameters_digest=self.digest)

    @property
    def others(self) -> list[int]:
        return [j for j in range(len(self.parties)) if j != self.index]

    @property
    def aborted(self) -> bool:
        return self.event("abort").is_set()


def protocol_parameters(
    message: common_pb2.LinkageParameters, memory_budget_bytes: int = 1024 * 2**20
) -> tuple[LinkageSchema, ProtocolParameters]:
    """Validate a parameters message with the encoder and engine; InvalidParameters listing problems.

    The comparison memory budget is the party's own setting (``[limits]``), not agreed.
    """
    try:
        schema_obj = json.loads(message.schema_json)
    except json.JSONDecodeError:
        raise InvalidParameters("parameters: schema_json is not valid JSON") from None
    try:
        schema = parse_schema(schema_obj, source="parameters.schema")
    except PprlError as exc:
        raise InvalidParameters(f"parameters: {exc}") from None
    try:
        params = ProtocolParameters(
            parties=tuple(message.parties),
            filter_bits=schema.output_bits,
            match_threshold=message.match_threshold,
            segment_threshold=message.segment_threshold,
            one_to_one=message.one_to_one,
            max_block_size=message.max_block_size or None,
            memory_budget_bytes=memory_budget_bytes,
            mode=linkage.mode_of(message),
            compute_parties=tuple(message.compute_parties),
            target=linkage.target_of(message),
            min_parties=message.min_parties or 2,
            solver=message.solver or DEFAULT_SOLVER,
        )
    except PprlError as exc:
        raise InvalidParameters(f"parameters: {exc}") from None
    return schema, params


async def reserve_piped(
    run: Run, account: RunAccount, pipe: asyncio.Queue[Any], nbytes: int
) -> None:
    """Reserve an outgoing ring chunk's bytes for the pipe to the successor. While the budget is
    short and the pipe holds chunks (whose bytes the successor's stream gives back as it takes
    them), wait for it to drain: the budget paces the pipe instead of failing the run. Refused
    (BufferLimitExceeded) only when nothing queued could free room; RunAborted when the run is."""
    while not account.try_reserve(nbytes):
        if pipe.empty():
            account.reserve(nbytes, "ring message passed on")  # raises, naming the budget
        if run.aborted:
            raise RunAborted(run.reason or f"run {run.run_id} was aborted")
        await asyncio.sleep(PIPE_WAIT_SECONDS)


class PartyNode(party_pb2_grpc.PartyServicer):
    """One party's node: serves pprl.v1.Party and drives its runs."""

    def __init__(self, config: PartyConfig, security: Security, hooks: Hooks | None = None):
        self.config = config
        self.security = security
        self.hooks = hooks or Hooks()
        self.peers = PeerClients(security, self.hooks)
        self.runs: OrderedDict[str, Run] = OrderedDict()
        self.known_identities: set[str] = {config.coordinator_name, config.name}
        self._secret: bytes | None = None
        self._pinned_schema: str | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # Every byte peers make this node buffer, for all runs (party/node/budget.py).
        self.budget = BufferBudget(config.memory_budget_mib * 2**20)
        # set by the server when its warm-up (compiled loops, encoding lanes) is over; a run's
        # encoding waits for it, so that the two never share the cores (None: no warm-up)
        self.warmed: asyncio.Event | None = None

    # -- helpers -------------------------------------------------------------------------------

    def secret(self) -> bytes:
        if self._secret is None:
            self._secret = self.config.read_secret()
        return self._secret

    def pinned_schema_digest(self) -> str | None:
        if self.config.schema is None:
            return None
        if self._pinned_schema is None:
            self._pinned_schema = load_schema(self.config.schema).digest()
        return self._pinned_schema

    def identity(self, context: grpc.aio.ServicerContext) -> str:
        who = caller_identity(context, self.security.insecure)
        if not who:
            raise Unauthenticated("no caller identity (client certificate required)")
        return who

    def require_coordinator(self, context: grpc.aio.ServicerContext) -> None:
        who = self.identity(context)
        if who != self.config.coordinator_name:
            raise Forbidden(f"caller {who!r} is not the coordinator")

    def get_run(self, run_id: str, who: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            if who not in self.known_identities:
                raise Forbidden(f"caller {who!r} is not a party of any run here")
            if not wire_run_id_ok(run_id):
                raise Malformed("run_id must be 32 lower-case hex characters")
            raise UnknownRun(f"unknown run {run_id}")
        if who != self.config.coordinator_name and who not in run.nodes:
            raise Forbidden(f"caller {who!r} is not a party of run {run_id}")
        return run

    def check_ref(self, ref: common_pb2.RunRef, who: str) -> Run:
        run = self.get_run(ref.run_id, who)
        if ref.parameters_digest != run.digest:
            raise DigestMismatch(f"run {run.run_id}: parameters digest differs from the agreed one")
        return run

    def _remember(self, run: Run) -> None:
        self.runs[run.run_id] = run
        while len(self.runs) > MAX_KEPT_RUNS:
            old_id, old = next(iter(self.runs.items()))
            if old.phase in (Phase.EXECUTING, Phase.PREPARING):
                break
            self.runs.pop(old_id)
            self._end_run(old)
            self.budget.forget(old_id)

    def _end_run(self, run: Run) -> None:
        """The run ended (done, failed, aborted, declined): free its bulk data, keep its summary.

        Drops the engine (encodings, shares, survivors, spill folder) and every peer buffer, and
        closes the run's account in the node's buffer budget (later streams for it are refused).
        """
        if run.engine is not None:
            run.engine.close()  # stores, spill folder, shares
        run.engine = None
        run.blocks_in.clear()
        mpc3.end(run.mpc, None)
        freed = self.budget.close_run(run.run_id)
        if freed:
            log.debug("run %s ended: released %d buffered bytes", run.run_id, freed)

    def _respond(self, message: Any) -> Any:
        self.hooks.sent(message)
        return message

    # -- coordinator calls ---------------------------------------------------------------------

    async def Propose(
        self, request: party_pb2.ProposeRequest, context: grpc.aio.ServicerContext
    ) -> party_pb2.ProposeResponse:  # noqa: N802
        try:
            self.require_coordinator(context)
            if not wire_run_id_ok(request.run_id):
                raise Malformed("run_id must be 32 lower-case hex characters")
            if request.run_id in self.runs:
                raise AlreadyExists(f"run {request.run_id} was already proposed")
            try:
                digest = linkage.parameters_digest(request.parameters)
            except linkage.ParametersFormatError as exc:
                raise InvalidParameters(str(exc)) from None
            if digest != request.parameters_digest:
                raise DigestMismatch(
                    f"run {request.run_id}: the parameters digest computed by "
                    f"{self.config.name} differs from the coordinator's"
                )
            schema, params = protocol_parameters(
                request.parameters, self.config.memory_budget_mib * 2**20
            )
            nodes = linkage.participants(request.parameters)
            helper = self.config.name not in params.parties
            if self.config.name not in nodes:
                raise InvalidParameters(f"parameters: party {self.config.name} is not in parties")
            if helper != self.config.is_compute_only:
                raise InvalidParameters(
                    f"parameters: {self.config.name} is a "
                    f"{'compute-only helper' if self.config.is_compute_only else 'data party'} "
                    f"but the parameters name it as a {'compute party only' if helper else 'party'}"
                )
            check_recipients(
                params.parties,
                own_name=self.config.name,
                coordinator_name=self.config.coordinator_name,
                trusted=self.config.trusted_peers,
            )
            pinned = self.pinned_schema_digest()
            if pinned is not None and schema.digest() != pinned:
                raise DigestMismatch(
                    f"run {request.run_id}: the proposed schema differs from the schema pinned "
                    f"in {self.config.name}'s configuration (data.schema)"
                )
            directory = {p.name: p.address for p in request.directory}
            missing = [p for p in nodes if p not in directory]
            if missing:
                raise InvalidParameters(f"directory lacks addresses of parties {missing}")
            for name in nodes:
                problem = address_problem(directory[name])
                if problem is not None:
                    raise InvalidParameters(f"directory: address of {name}: {problem}")
            run = Run(
                run_id=request.run_id,
                digest=digest,
                message=request.parameters,
                params=params,
                schema=schema,
                index=-1 if helper else params.parties.index(self.config.name),
                directory=directory,
                nodes=nodes,
                timeout=request.run_timeout_seconds or Run.timeout,
            )
            if params.mode == "mpc3":
                run.mpc = mpc3.new_state(self, run.run_id, params.compute_party_names)
                if not helper:
                    mpc3.check_compute_recipients(self, run)
            # A helper holds no linkage secret; the coordinator compares the parties' only.
            confirmation = b"" if helper else key_confirmation(self.secret(), run.run_id, digest)
            self._remember(run)
            asyncio.get_running_loop().call_later(
                self.config.timeouts.stage, self._expire_proposal, run
            )
            self.known_identities.update(nodes)
            log.info(
                "run %s proposed: accepted as party %d of %d",
                run.run_id,
                run.index,
                len(params.parties),
            )
            return self._respond(
                party_pb2.ProposeResponse(parameters_digest=digest, key_confirmation=confirmation)
            )
        except Exception as exc:  # noqa: BLE001 - mapped by the catalog
            await abort_with(context, exc)
            raise  # unreachable: abort raises

    def _expire_proposal(self, run: Run) -> None:
        """Fail a run still PROPOSED after the stage timeout (its coordinator gave up on it)."""
        if run.phase is Phase.PROPOSED:
            self.abort_run(
                run,
                f"the proposal expired at {self.config.name}: no Prepare within "
                f"{self.config.timeouts.stage:g}s",
            )

    async def Prepare(
        self, request: party_pb2.PrepareRequest, context: grpc.aio.ServicerContext
    ) -> party_pb2.PrepareResponse:  # noqa: N802
        try:
            self.require_coordinator(context)
            run = self.check_ref(request.run, self.config.coordinator_name)
            if run.phase is not Phase.PROPOSED:
                raise WrongStage(f"run {run.run_id} is {run.phase.value}, not proposed")
            run.phase = Phase.PREPARING
            try:
                allowed, reasons = await self._prepare(run)
            except BaseException:
                run.phase = Phase.FAILED
                self._end_run(run)
                raise
            run.phase = Phase.PREPARED if allowed else Phase.DECLINED
            if not allowed:
                run.reason = "; ".join(reasons)
                self._end_run(run)
            return self._respond(
                party_pb2.PrepareResponse(
                    allowed=allowed, reasons=reasons, records=run.records_count
                )
            )
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def _prepare(self, run: Run) -> tuple[bool, list[str]]:
        from party.cluster import encode_csv_on_workers
        from party.encoding.encoder import Encoder
        from party.encoding.parallel import ParallelStats, resolve_workers
        from party.protocol.engine import PartyEngine
        from party.protocol.pair_engine import PairEngine

        if run.index < 0:  # a compute-only helper: no data to encode, nothing to audit
            return True, []
        if self.warmed is not None and not self.warmed.is_set():
            w0 = time.perf_counter()
            await self._unless_aborted(run, self.warmed.wait())
            run.stage_seconds["wait.audited"] = time.perf_counter() - w0
        t0, c0 = time.perf_counter(), cpu_seconds()
        encoder = Encoder(run.schema, self.secret())
        workers_cpu = ParallelStats()  # CPU of the encoding worker processes (not ours)
        records, _report = await self._on_local_files(
            run,
            "encoding its data CSV",
            encode_csv_on_workers,
            encoder,
            self.config.data_csv,
            workers=self.config.workers,
            cluster=self.config.cluster,
            id_column=self.config.id_column,
            stats=workers_cpu,
        )
        t1, c1 = time.perf_counter(), cpu_seconds()
        run.stage_seconds["audited.encoding"] = t1 - t0
        run.stage_seconds["cpu.audited.encoding"] = c1 - c0 + workers_cpu.cpu_seconds
        run.stage_seconds.update(workers_cpu.stage_entries(encoder, c1 - c0))
        if run.aborted:
            raise RunAborted(f"run {run.run_id} was aborted")
        allowed, reasons = await self._on_local_files(
            run, "its self-audit", self._gate, records, encoder, run
        )
        run.stage_seconds["audited.gate"] = time.perf_counter() - t1
        run.stage_seconds["cpu.audited.gate"] = cpu_seconds() - c1
        if run.aborted:
            raise RunAborted(f"run {run.run_id} was aborted")
        run.records_count = len(records.record_ids)
        if allowed:
            # Dispatch on the linkage target: PairEngine runs target "any" (pairs on the ring,
            # party/protocol/pair_engine.py) through the same exchange/ring/results flow below.
            engine_class = PairEngine if run.params.target == "any" else PartyEngine
            # off the event loop: the engine counts every filter's bits (seconds at 1M records)
            run.engine = await asyncio.to_thread(
                functools.partial(
                    engine_class,
                    run.index,
                    run.params,
                    records,
                    workers=resolve_workers(self.config.workers),
                    memory=self.budget.account(run.run_id),
                    spill_dir=self.spill_dir(),
                )
            )
        run.stage_seconds["audited"] = time.perf_counter() - t0
        run.stage_seconds["cpu.audited"] = cpu_seconds() - c0 + workers_cpu.cpu_seconds
        log.info(
            "run %s prepared: %d records, gate %s",
            run.run_id,
            run.records_count,
            "passed" if allowed else "declined",
        )
        return allowed, reasons

    async def _on_local_files(
        self, run: Run, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any
    ) -> T:
        """``fn`` off the event loop; its errors name this party's files (absolute paths), rows and
        fields: the full message goes to this party's log only, the coordinator gets a path-free one."""
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except PprlError as exc:
            log.error("run %s: %s failed: %s", run.run_id, what, exc)
            raise LocalDataError(
                f"{self.config.name} failed {what} (the party's log names the file and row)"
            ) from None

    def start_encoding_lanes(self) -> int:
        """Start the encoding lanes the first run will use (part of the node's warm-up), so that
        the run does not wait for them; none for a compute-only helper, a Dask cluster (started
        per encoding) or a data CSV of one block. Returns how many lanes run."""
        if self.config.is_compute_only or self.config.cluster is not None:
            return 0
        from party.encoding.parallel import start_lanes_for

        return start_lanes_for(self.config.data_csv, self.config.workers)

    def _gate(self, records: Any, encoder: Any, run: Run) -> tuple[bool, list[str]]:
        """The self-audit gate (party.audit.gate); no policy configured -> allowed."""
        if self.config.audit_policy is None:
            return True, []
        from party.audit.gate import check_before_join

        decision = check_before_join(
            records,
            encoder,
            run.schema,
            run.params,
            self.audit_policy(),
            data_csv=self.config.data_csv,
            id_column=self.config.id_column,
            self_index=run.index,
            mode=run.params.mode,
        )
        reasons = [f"{self.config.name}: {r}" for r in decision.reasons]
        return bool(decision.allowed), reasons

    def audit_policy(self) -> Any:
        """The validated AuditPolicy of the config (PolicyError, a PprlError, when invalid)."""
        from party.audit.policy import AuditPolicy

        base = pathlib.Path(self.config.source).resolve().parent
        return AuditPolicy.from_mapping(dict(self.config.audit_policy or {}), base=base)

    async def Execute(
        self, request: party_pb2.ExecuteRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[party_pb2.ExecuteResponse]:  # noqa: N802
        try:
            self.require_coordinator(context)
            run = self.check_ref(request.run, self.config.coordinator_name)
            if run.phase is not Phase.PREPARED:
                raise WrongStage(f"run {run.run_id} is {run.phase.value}, not prepared")
            run.phase = Phase.EXECUTING
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            return
        queue: asyncio.Queue[party_pb2.ExecuteResponse] = asyncio.Queue()
        run.outbox = queue
        task = asyncio.create_task(self._execute(run, queue.put_nowait))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), self.config.timeouts.heartbeat)
                    queued = True
                except TimeoutError:
                    item = party_pb2.ExecuteResponse(
                        progress=common_pb2.Progress(party=self.config.name, stage=run.stage),
                        heartbeat=True,
                    )
                    queued = False
                self.hooks.forge_execute(item)
                yield self._respond(item)  # grpc resumes the generator once the write is done
                if queued:
                    queue.task_done()
                if item.HasField("summary"):
                    break
        finally:
            if not task.done():
                self.abort_run(run, f"the coordinator closed {self.config.name}'s Execute stream")
                await asyncio.gather(task, return_exceptions=True)

    async def Abort(
        self, request: party_pb2.AbortRequest, context: grpc.aio.ServicerContext
    ) -> party_pb2.AbortResponse:  # noqa: N802
        try:
            self.require_coordinator(context)
            run = self.get_run(request.run_id, self.config.coordinator_name)
            reason = " ".join(request.reason.split())[:MAX_REASON_CHARS]  # one bounded log line
            self.abort_run(run, reason or "aborted by the coordinator")
            if not self.config.is_compute_only:
                remove_run(self.config.results_dir, run.run_id)
            return self._respond(party_pb2.AbortResponse())
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    def abort_run(self, run: Run, reason: str) -> None:
        if run.phase in (Phase.DONE, Phase.FAILED, Phase.DECLINED):
            if run.phase is Phase.DONE:
                run.phase = Phase.FAILED
                run.reason = reason
            return
        if not run.aborted:
            log.warning("run %s aborted: %s", run.run_id, reason)
        run.reason = run.reason or reason
        run.cancel.set()
        run.event("abort").set()
        mpc3.end(run.mpc, run.reason)
        if run.phase in (Phase.PROPOSED, Phase.PREPARED):
            run.phase = Phase.FAILED
            self._end_run(run)  # free the encodings now; no Execute will run

    # -- peer calls ----------------------------------------------------------------------------

    async def _peer_run(
        self,
        first: Any,
        context: grpc.aio.ServicerContext,
        what: str,
        senders: Callable[[Run], tuple[str, ...]] | None = None,
    ) -> tuple[Run, str]:
        """Check a peer call's caller, run, digest, ``source`` and phase.

        ``source`` indexes ``senders(run)`` (default: the run's parties in ring order).
        """
        who = self.identity(context)
        run = self.check_ref(first.run, who)
        names = run.parties if senders is None else senders(run)
        if first.source >= len(names) or names[first.source] != who:
            raise Forbidden(f"{who} may only deliver its own {what} (source index mismatch)")
        if run.phase not in (Phase.PREPARED, Phase.EXECUTING):
            raise WrongStage(f"run {run.run_id} is {run.phase.value}: not accepting {what}")
        if run.aborted:
            raise RunAborted(f"run {run.run_id} was aborted")
        return run, who

    @contextlib.contextmanager
    def _kept(self, run: Run, nbytes: int) -> Iterator[None]:
        """Guard a just-received buffer of ``nbytes`` (reserved in the budget by the decoder):
        if the body raises, or the run ended while the stream came in, the bytes are released."""
        try:
            if run.aborted or run.phase not in (Phase.PREPARED, Phase.EXECUTING):
                raise RunAborted(run.reason or f"run {run.run_id} has ended")
            yield
        except BaseException:
            self.budget.release(run.run_id, nbytes)
            raise

    async def _first(self, stream: AsyncIterator[Any], what: str) -> Any:
        first = await anext(stream, None)
        if first is None:
            raise Malformed(f"{what}: empty stream")
        return first

    async def PushBlocks(
        self,
        request_iterator: AsyncIterator[party_pb2.PushBlocksRequest],
        context: grpc.aio.ServicerContext,
    ) -> party_pb2.PushBlocksResponse:  # noqa: N802
        try:
            first = await self._first(request_iterator, "block digests")
            run, who = await self._peer_run(first, context, "block digests")
            self._check_peer_confirmation(run, who, first.key_confirmation)
            digests = await wire.blocks_from_chunks(
                first, request_iterator, account=self.budget.account(run.run_id)
            )
            with self._kept(run, digests.nbytes):
                if first.source in run.blocks_in:
                    raise AlreadyExists(
                        f"run {run.run_id}: block digests of {who} already received"
                    )
                if not is_digest_set(digests):
                    raise Malformed("block digests must be sorted, distinct and non-zero")
                run.blocks_in[first.source] = digests
            if all(j in run.blocks_in for j in run.others):
                run.event("blocks").set()
            return self._respond(party_pb2.PushBlocksResponse(received=digests.size))
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    def _check_peer_confirmation(self, run: Run, who: str, confirmation: bytes) -> None:
        """Fail the run (and refuse the stream) unless ``who`` proved it holds our secret."""
        expected = peer_confirmation(self.secret(), run.run_id, run.digest, who, self.config.name)
        if hmac.compare_digest(expected, confirmation):
            return
        reason = (
            f"key confirmation failed: {who} does not hold the same linkage secret as "
            f"{self.config.name} (checked party to party in stage exchanging)"
        )
        self.abort_run(run, reason)
        raise KeyMismatch(reason)

    async def PushShare(
        self,
        request_iterator: AsyncIterator[party_pb2.PushShareRequest],
        context: grpc.aio.ServicerContext,
    ) -> party_pb2.PushShareResponse:  # noqa: N802
        try:
            first = await self._first(request_iterator, "segment share")
            run, who = await self._peer_run(first, context, "segments")
            if first.target != run.index:
                raise Malformed(
                    f"segment share for party index {first.target} sent to {self.config.name}"
                )
            if first.segment_bits != run.params.segment_bits:
                raise Malformed(
                    f"segment share: segment_bits {first.segment_bits} differs from the run's "
                    f"{run.params.segment_bits}"
                )
            share = await wire.share_from_chunks(
                first, request_iterator, account=self.budget.account(run.run_id)
            )
            nbytes = share.pseudonyms.nbytes + share.block_positions.nbytes + share.segments.nbytes
            with self._kept(run, nbytes):
                if share.source in run.shares_seen:
                    raise AlreadyExists(f"run {run.run_id}: segments of {who} already received")
                run.shares_seen.add(share.source)  # at once: a concurrent duplicate is refused
                try:
                    await self._wait(
                        run, run.event("common"), "its own common blocks", "exchanging"
                    )
                    if run.engine is None or run.aborted:
                        raise RunAborted(run.reason or f"run {run.run_id} was aborted")
                    # the engine owns the share's reserved bytes now (freed after its comparison)
                    await self._engine(
                        run,
                        thread_timed,
                        run,
                        "cpu.exchanging.install",
                        run.engine.receive_share,
                        share,
                        nbytes,
                    )
                except BaseException:
                    run.shares_seen.discard(share.source)
                    raise
            run.shares_in.add(share.source)
            if all(j in run.shares_in for j in run.others):
                run.event("shares").set()
            return self._respond(party_pb2.PushShareResponse(received=share.pseudonyms.shape[0]))
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def PassRing(
        self,
        request_iterator: AsyncIterator[party_pb2.PassRingRequest],
        context: grpc.aio.ServicerContext,
    ) -> party_pb2.PassRingResponse:  # noqa: N802
        try:
            first = await self._first(request_iterator, "ring message")
            run, who = await self._peer_run(first, context, "ring messages")
            predecessor = (run.index - 1) % len(run.parties)
            if first.source != predecessor:
                raise Forbidden(f"{who} is not the ring predecessor of {self.config.name}")
            if first.hop != first.source:
                raise Malformed(
                    f"ring message hop {first.hop} does not match its sender's position"
                )
            if first.bounded and first.hop == 0:
                raise Malformed("ring message: hop 0 declares its exact total (not bounded)")
            if run.ring_in:
                raise AlreadyExists(f"run {run.run_id}: ring message already received")
            run.ring_in = True
            received = await self._receive_stream(run, who, "ring message", first, request_iterator)
            run.event("ring").set()
            log.info("run %s: ring from %s received (%d rows)", run.run_id, who, received)
            return self._respond(party_pb2.PassRingResponse(received=received))
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def DeliverResults(
        self,
        request_iterator: AsyncIterator[party_pb2.DeliverResultsRequest],
        context: grpc.aio.ServicerContext,
    ) -> party_pb2.DeliverResultsResponse:  # noqa: N802
        try:
            first = await self._first(request_iterator, "results")
            run, who = await self._peer_run(first, context, "results", _results_senders)
            if first.source != 0:
                raise Forbidden(
                    f"{who} is not the ring initiator (mode mpc3: compute party 0): only it "
                    "delivers results"
                )
            if first.target != run.index:
                raise Malformed(
                    f"results for party index {first.target} sent to {self.config.name}"
                )
            if run.results_in:
                raise AlreadyExists(f"run {run.run_id}: results already received")
            run.results_in = True
            received = await self._receive_stream(run, who, "results", first, request_iterator)
            run.event("results").set()
            return self._respond(party_pb2.DeliverResultsResponse(received=received))
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def _receive_stream(
        self, run: Run, who: str, what: str, first: Any, rest: AsyncIterator[Any]
    ) -> int:
        """Feed a ring message or results into the engine chunk by chunk; return the rows.

        Waits (holding the sender's stream, so gRPC flow control stops it) until this party's
        own comparison is done (initiator: until its ring went out), because the declared total is
        checked against what the run allows: no more rows than the candidate sets every party
        enumerated (initiator: than the sets it sent). Each chunk counts against the node's buffer
        budget only while it is processed; what the engine keeps goes to its spilling stores. A
        stream refused at its first chunk changes nothing (the sender may retry); one refused
        half-way leaves the engine's ring or results state unusable, so the run fails (with a
        reason naming the sender) as well as the stream.
        """
        received = fed = 0
        try:
            wire.check_first_chunk(what, first)  # malformed: INVALID_ARGUMENT at any stage
            if run.phase is not Phase.EXECUTING:
                # no party can have compared before this one executes (it needs its segments)
                raise WrongStage(f"run {run.run_id} is {run.phase.value}: not accepting {what} yet")
            if run.mpc is not None:  # mode mpc3: results may come once the input shares went out
                ready = "inputs_sent"
            else:
                ready = "ring_sent" if what == "ring message" and run.index == 0 else "compared"
            await self._wait(run, run.event(ready), "its own comparison", "summing", whole_run=True)
            engine = run.engine
            if engine is None or run.aborted:
                raise RunAborted(run.reason or f"run {run.run_id} was aborted")
            account = self.budget.account(run.run_id)
            if what == "ring message" and not pipes_ring(run.index, len(run.parties)):
                initiator = run.index == 0
                bound = engine.ring_rows_sent if initiator else engine.candidate_set_bound
                feed = engine.ring_finish_feed if initiator else engine.ring_step_feed
                ring = wire.ring_chunks(first, rest, account=account, max_rows=bound)
                step = "summing.ring_back" if initiator else "summing.ring_step"
                with timed(run, step):
                    async with contextlib.aclosing(ring):  # releases the chunk in hand on failure
                        async for part in ring:
                            await self._engine(run, feed, part)
                            received += len(part)
                            fed += 1
                    if not initiator:
                        run.ring_out_rows = await self._engine(run, engine.ring_step_end)
                if initiator:
                    log.info("run %s: ring back (%d rows), classifying", run.run_id, received)
                    with timed(run, "summing.classify"):
                        run.ring_counts = await self._engine(run, engine.ring_finish_end)
                    for key in ("groups", "cpu.groups"):  # target any: the solver's part of it
                        if key in engine.timings:
                            run.stage_seconds[key.replace("groups", "summing.groups")] = (
                                engine.timings[key]
                            )
            elif what == "ring message" and pipes_ring(run.index, len(run.parties)):
                # passed on chunk by chunk: each outgoing chunk waits in a short queue (its bytes
                # counted in the buffer budget) for the driver's stream to the successor
                ring = wire.ring_chunks(
                    first, rest, account=account, max_rows=engine.candidate_set_bound
                )
                pipe = run.ring_pipe = run.ring_pipe or asyncio.Queue(PIPE_CHUNKS)
                run.ring_bound = first.total_rows
                with timed(run, "summing.ring_step"):
                    async with contextlib.aclosing(ring):
                        async for part in ring:
                            out = await self._engine(run, engine.ring_step_chunk, part)
                            fed += 1  # the engine took it: a failure from here on fails the run
                            received += len(part)
                            nbytes = _ring_bytes(out)
                            await reserve_piped(run, account, pipe, nbytes)
                            try:
                                await self._unless_aborted(run, pipe.put(out))
                            except BaseException:
                                account.release(nbytes)
                                raise
                            run.event("ring_started").set()
                    run.ring_out_rows = await self._engine(run, engine.ring_step_close)
                await self._unless_aborted(run, pipe.put(None))
            elif what != "ring message":
                bound = mpc3.results_bound(run) if run.mpc else engine.candidate_set_bound
                chunks = wire.results_chunks(first, rest, account=account, max_rows=bound)
                with timed(run, "summing.results_in"):
                    async with contextlib.aclosing(chunks):
                        async for cols in chunks:
                            results = wire.party_results(run.index, cols)
                            await self._engine(run, engine.receive_results_chunk, results)
                            received += cols[0].shape[0]
                            fed += 1
                    await self._engine(run, engine.results_end)
        except Exception as exc:
            if fed == 0:
                # refused before the engine took any of it (a refused chunk changes nothing
                # there): the sender may still deliver a well-formed stream
                if what == "ring message":
                    run.ring_in = False
                else:
                    run.results_in = False
                raise
            _, message = status_for(exc)
            self.abort_run(run, f"{self.config.name} refused the {what} from {who}: {message}")
            raise
        return received

    def spill_dir(self) -> pathlib.Path:
        """Parent of the runs' private spill folders: ``<results>/.spill`` (0700)."""
        path = self.config.results_dir / ".spill"
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        return path

    async def PushInputShare(
        self,
        request_iterator: AsyncIterator[party_pb2.PushInputShareRequest],
        context: grpc.aio.ServicerContext,
    ) -> party_pb2.PushInputShareResponse:  # noqa: N802
        try:
            first = await self._first(request_iterator, "input share")
            run, who = await self._peer_run(first, context, "input share")
            rows = await mpc3.receive_input_share(self, run, who, first, request_iterator)
            return self._respond(party_pb2.PushInputShareResponse(received=rows))
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def PushComputeKey(
        self, request: party_pb2.PushComputeKeyRequest, context: grpc.aio.ServicerContext
    ) -> party_pb2.PushComputeKeyResponse:  # noqa: N802
        try:
            run, who = await self._peer_run(request, context, "compute key", _compute_parties)
            mpc3.receive_key(run, who, request)
            return self._respond(party_pb2.PushComputeKeyResponse())
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    async def ExchangeRounds(
        self,
        request_iterator: AsyncIterator[party_pb2.ExchangeRoundsRequest],
        context: grpc.aio.ServicerContext,
    ) -> party_pb2.ExchangeRoundsResponse:  # noqa: N802
        try:
            first = await self._first(request_iterator, "rounds")
            run, who = await self._peer_run(first, context, "rounds", _compute_parties)
            rounds = await mpc3.receive_rounds(run, who, first, request_iterator)
            return self._respond(party_pb2.ExchangeRoundsResponse(rounds=rounds))
        except Exception as exc:  # noqa: BLE001
            await abort_with(context, exc)
            raise

    # -- the run driver ------------------------------------------------------------------------

    async def _wait(
        self, run: Run, event: asyncio.Event, what: str, stage: str, whole_run: bool = False
    ) -> None:
        """Wait for ``event`` within the stage timeout (``whole_run``: the run's timeout, for
        waits that span a whole computation); RunFailed/RunAborted otherwise."""
        if event.is_set():
            return
        abort = run.event("abort")
        waiter = asyncio.ensure_future(event.wait())
        aborter = asyncio.ensure_future(abort.wait())
        timeout = run.timeout if whole_run else self.config.timeouts.stage
        try:
            await asyncio.wait(
                {waiter, aborter},
                timeout=timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            waiter.cancel()
            aborter.cancel()
        if event.is_set():
            return
        if abort.is_set():
            raise RunAborted(run.reason or f"run {run.run_id} was aborted")
        raise RunFailed(
            f"{self.config.name} timed out after {timeout:g}s waiting for {what} in stage {stage}"
        )

    async def _wait_peer(
        self, run: Run, event: asyncio.Event, what: str, stage: str, whole_run: bool = False
    ) -> None:
        """``_wait`` for the run driver: the seconds spent waiting on peers are added to the run's
        ``wait.<stage>`` entry (what the node reports as time not its own)."""
        t0 = time.perf_counter()
        try:
            await self._wait(run, event, what, stage, whole_run)
        finally:
            key = f"wait.{stage}"
            run.stage_seconds[key] = run.stage_seconds.get(key, 0.0) + time.perf_counter() - t0

    async def _engine(self, run: Run, fn: Callable[..., T], *args: Any) -> T:
        """Call a PartyEngine method in a worker thread, one call at a time per run.

        Keeps the event loop (heartbeats, other RPCs) responsive however large the tables are;
        the lock serialises engine calls because the engine is not thread-safe.
        """
        async with run.lock:
            return await asyncio.to_thread(fn, *args)

    async def _unless_aborted(self, run: Run, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` but give up (cancelling it) as soon as the run is aborted."""
        task = asyncio.ensure_future(awaitable)
        aborter = asyncio.ensure_future(run.event("abort").wait())
        try:
            await asyncio.wait({task, aborter}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            aborter.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise RunAborted(run.reason or f"run {run.run_id} was aborted")
        return task.result()

    async def _pause_hook(self, run: Run, point: str) -> None:
        if self.hooks.pause_at != point:
            return
        if run.outbox is not None:
            # The coordinator must know this stage before the test learns the node paused here.
            await run.outbox.join()
        if self.hooks.should_pause(point):
            log.warning("test hook: pausing run %s at %s", run.run_id, point)
            await run.event("abort").wait()
            raise RunAborted(run.reason or "aborted while paused")

    async def _send(
        self,
        run: Run,
        peer: int | str,
        what: str,
        stage: str,
        method: str,
        chunks: Any,
        whole_run: bool = False,
    ) -> None:
        """Stream ``chunks`` (or send one unary request) to node ``peer`` (party index or node
        name) with ``method``; RunFailed naming peer and stage. ``whole_run``: the deadline is the
        run's timeout instead of the stage timeout."""
        name = peer if isinstance(peer, str) else run.parties[peer]
        stub = self.peers.party(name, run.directory[name])
        timeout = run.timeout if whole_run else self.config.timeouts.stage
        if isinstance(chunks, Message):
            call = self.peers.unary(getattr(stub, method), chunks, timeout)
        else:
            call = self.peers.stream(getattr(stub, method), chunks, timeout)
        try:
            await self._unless_aborted(run, call)
        except grpc.aio.AioRpcError as exc:
            if run.aborted:
                raise RunAborted(run.reason or "aborted") from None
            raise RunFailed(
                f"{self.config.name} could not send {what} to {name} in stage {stage}: "
                f"{exc.code().name}: {exc.details()}"
            ) from None

    async def _exchange_blocks(self, run: Run) -> None:
        """Send this party's block digests to every other party, wait for theirs, and set the
        common blocks (both modes)."""
        engine = run.engine
        me = self.config.name
        with timed(run, "exchanging.digests"):
            mine = await self._engine(run, engine.block_digests)
        with timed(run, "exchanging.digests_sent"):  # the peers' come in meanwhile
            await asyncio.gather(
                *(
                    self._send(
                        run,
                        j,
                        "block digests",
                        "exchanging",
                        "PushBlocks",
                        wire.blocks_to_chunks(
                            run.ref,
                            run.index,
                            mine,
                            peer_confirmation(
                                self.secret(), run.run_id, run.digest, me, run.parties[j]
                            ),
                        ),
                    )
                    for j in run.others
                )
            )
        await self._pause_hook(run, "exchange")
        missing = [run.parties[j] for j in run.others if j not in run.blocks_in]
        if missing:
            what = f"block digests from {', '.join(missing)}"
            await self._wait_peer(run, run.event("blocks"), what, "exchanging")
        sets = [mine if j == run.index else run.blocks_in[j] for j in range(len(run.parties))]
        # off the event loop: at 1M records the intersection takes seconds (heartbeats must go on)
        with timed(run, "exchanging.common"):
            await self._engine(run, lambda: engine.use_common_blocks(engine.common_of(sets)))
        # the peers' digest sets did their work: free them and the bytes reserved for them (an
        # empty set stays, so a repeated stream is still refused)
        for j in run.others:
            self.budget.release(run.run_id, run.blocks_in[j].nbytes)
            run.blocks_in[j] = np.zeros(0, dtype=np.uint64)
        run.event("common").set()

    async def _segments(
        self,
        run: Run,
        progress: Callable[..., None],
        enter: Callable[[common_pb2.Stage | None], None],
    ) -> Any:
        """Mode segments: segment exchange, local comparison, ring, results; this party's own
        results as PartyResults chunks (resolved and written by _execute)."""
        engine = run.engine
        await self._exchange_blocks(run)
        with timed(run, "exchanging.shares"):
            shares = await self._engine(run, engine.outgoing_shares)
        with timed(run, "exchanging.shares_sent"):  # the peers' come in (and are checked) meanwhile
            await asyncio.gather(
                *(
                    self._send(
                        run,
                        s.target,
                        "segments",
                        "exchanging",
                        "PushShare",
                        wire.share_to_chunks(run.ref, s),
                    )
                    for s in shares
                )
            )
        missing = [run.parties[j] for j in run.others if j not in run.shares_in]
        if missing:
            what = f"segments from {', '.join(missing)}"
            await self._wait_peer(run, run.event("shares"), what, "exchanging")

        enter(S.STAGE_COMPARING)
        await self._pause_hook(run, "compare")
        on_progress = comparing_progress(progress)
        compare: Callable[..., Any] = engine.compare
        target = getattr(engine, "TARGET", None)
        if self.config.cluster is not None and target in ("any", "all"):
            # the pairs of parties (any) or the fast blocks (all) on the party's cluster
            from party.cluster_blocks import ClusterBlocks
            from party.cluster_pairs import ClusterPairs
            from party.cluster_tasks import compare_on_cluster

            kind = ClusterPairs if target == "any" else ClusterBlocks
            compare = functools.partial(
                compare_on_cluster, kind, engine, self.config.cluster, self.config.workers
            )
        run.comparison = await self._engine(run, compare, on_progress, run.cancel)
        run.event("compared").set()

        enter(S.STAGE_SUMMING)
        successor = (run.index + 1) % len(run.parties)
        predecessor = run.parties[(run.index - 1) % len(run.parties)]
        p = len(run.parties)
        if run.index == 0:
            with timed(run, "summing.ring_out"):
                rows_out, chunks = await self._engine(run, engine.ring_start_chunks)
                await self._pause_hook(run, "ring")
                await self._send(
                    run,
                    successor,
                    "the ring",
                    "summing",
                    "PassRing",
                    wire.ring_stream_to_chunks(run.ref, 0, 0, rows_out, p, chunks),
                )
            run.event("ring_sent").set()
            log.info("run %s: ring sent on (%d rows)", run.run_id, rows_out)
            await self._wait_peer(run, run.event("ring"), f"the ring from {predecessor}", "summing")
            groups = run.params.target == "any"

            async def deliver(j: int) -> None:
                # each party's results come from its own finished store: the streams to the
                # parties run at once (each produced in worker threads, read only)
                parts = (wire.result_columns(r) for r in engine.result_chunks(j))
                await self._send(
                    run,
                    j,
                    "results",
                    "summing",
                    "DeliverResults",
                    wire.results_stream_to_chunks(
                        run.ref, 0, j, engine.result_count(j), parts, groups
                    ),
                )

            with timed(run, "summing.deliver"):
                sent = await asyncio.gather(
                    *(deliver(j) for j in run.others), return_exceptions=True
                )
            for failed in sent:  # both streams ended: the first failure fails the run
                if isinstance(failed, BaseException):
                    raise failed
            log.info("run %s: results delivered", run.run_id)
            own = engine.result_chunks(0)
        elif pipes_ring(run.index, p):
            # passed on as it comes: the stream opens once the first chunk is stepped
            what = f"the ring from {predecessor}"
            await self._wait_peer(run, run.event("ring_started"), what, "summing")
            await self._pause_hook(run, "ring")
            await self._send(
                run,
                successor,
                "the ring",
                "summing",
                "PassRing",
                wire.ring_piped_chunks(
                    run.ref, run.index, run.index, run.ring_bound, p, self._piped(run)
                ),
            )
            log.info("run %s: ring passed on (%d rows)", run.run_id, run.ring_out_rows)
            what = f"results from {run.parties[0]}"
            await self._wait_peer(run, run.event("results"), what, "summing")
            own = engine.received_results()
        else:
            await self._wait_peer(run, run.event("ring"), f"the ring from {predecessor}", "summing")
            await self._pause_hook(run, "ring")
            with timed(run, "summing.ring_send"):
                await self._send(
                    run,
                    successor,
                    "the ring",
                    "summing",
                    "PassRing",
                    wire.ring_stream_to_chunks(
                        run.ref,
                        run.index,
                        run.index,
                        run.ring_out_rows,
                        p,
                        engine.ring_out_chunks(),
                    ),
                )
            log.info("run %s: ring sent on (%d rows)", run.run_id, run.ring_out_rows)
            what = f"results from {run.parties[0]}"
            await self._wait_peer(run, run.event("results"), what, "summing")
            own = engine.received_results()
        return own

    async def _piped(self, run: Run) -> AsyncIterator[RingMessage]:
        """The outgoing ring chunks the receiving handler queues (``ring_pipe``), until its end;
        the seconds waiting for them count as ``wait.summing``."""
        assert run.ring_pipe is not None
        account = self.budget.account(run.run_id)
        while True:
            t0 = time.perf_counter()
            out = await run.ring_pipe.get()
            key = "wait.summing"
            run.stage_seconds[key] = run.stage_seconds.get(key, 0.0) + time.perf_counter() - t0
            if out is None:
                return
            account.release(_ring_bytes(out))
            yield out

    async def _execute(self, run: Run, emit: Callable[[party_pb2.ExecuteResponse], None]) -> None:
        me = self.config.name
        run.bytes_at_start = self.hooks.bytes_sent
        clock: dict[str, Any] = {
            "name": "exchanging",
            "t": time.perf_counter(),
            "cpu": cpu_seconds(),
        }
        matches = 0
        result_path = ""

        def progress(stage: common_pb2.Stage, done: int = 0, total: int = 0) -> None:
            run.stage = stage
            emit(
                party_pb2.ExecuteResponse(
                    progress=common_pb2.Progress(party=me, stage=stage, done=done, total=total)
                )
            )

        def switch(name: str | None) -> None:
            """Close the current stage (wall and CPU seconds); start ``name`` (None: the end)."""
            now, cpu = time.perf_counter(), cpu_seconds()
            was = clock["name"]
            add = run.stage_seconds
            add[was] = add.get(was, 0.0) + now - clock["t"]
            add[f"cpu.{was}"] = add.get(f"cpu.{was}", 0.0) + cpu - clock["cpu"]
            clock["name"], clock["t"], clock["cpu"] = name or was, now, cpu
            log_memory(run, was)

        def enter(stage: common_pb2.Stage | None) -> None:
            switch(None if stage is None else STAGE_NAMES[stage])
            if stage is not None:
                progress(stage)

        try:
            progress(S.STAGE_EXCHANGING)
            if run.mpc is not None:
                own = await mpc3.execute(self, run, progress, enter)
            else:
                own = await self._segments(run, progress, enter)
            if run.aborted:
                raise RunAborted(run.reason or "aborted")
            switch("writing")  # a sub-stage: the coordinator still sees stage summing
            if own is not None:  # a helper compute node has no results to write
                # results are resolved to record ids and written chunk by chunk
                path, matches = await self._engine(
                    run,
                    write_match_chunks,
                    self.config.results_dir,
                    run.run_id,
                    run.engine.resolved_chunks(own),
                    run.params.target == "any",
                )
                result_path = str(path)
            enter(None)
            run.phase = Phase.DONE
            run.stage = S.STAGE_DONE
            log.info("run %s done: %d matches written", run.run_id, matches)
        except Exception as exc:  # noqa: BLE001 - every failure ends the run with a safe reason
            stage_name = clock["name"]
            if isinstance(exc, RunAborted | RunFailed) or run.aborted:
                # after an abort, a step may fail on what the abort removed (its results folder):
                # the abort's reason, not an internal error
                reason = run.reason if run.aborted and run.reason else str(exc)
            elif isinstance(exc, PprlError):
                reason = f"{me} failed in stage {stage_name}: {exc}"
            else:
                log.exception("run %s: internal error", run.run_id)
                reason = f"{me} failed in stage {stage_name}: internal error (see its log)"
            run.cancel.set()
            run.phase = Phase.FAILED
            run.stage = S.STAGE_FAILED
            run.reason = run.reason or reason
            run.event("abort").set()  # wake any handler still waiting on this run
            mpc3.end(run.mpc, run.reason)
            matches, result_path = 0, ""
            if not self.config.is_compute_only:
                remove_run(self.config.results_dir, run.run_id)
            log.warning("run %s failed: %s", run.run_id, run.reason)
        finally:
            self._end_run(run)  # free the encodings, survivors and peer buffers
        summary = common_pb2.PartySummary(
            party=me,
            matches=matches,
            bytes_sent=self.hooks.bytes_sent - run.bytes_at_start,
            peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            stage_seconds=run.stage_seconds,
            result_path=result_path,
        )
        if run.comparison is not None:
            cs = run.comparison
            summary.candidate_sets = cs.candidate_sets
            summary.join_order.extend(cs.join_order)
            summary.evaluated_per_stage.extend(cs.evaluated_per_stage)
            summary.kept_per_stage.extend(cs.survived_per_stage)
            summary.survivors = cs.survivors
            summary.reduction_ratio = cs.reduction_ratio
        mpc3.summary_fields(run.mpc, summary)
        mpc3.end(run.mpc, run.reason if run.phase is Phase.FAILED else None)
        emit(
            party_pb2.ExecuteResponse(
                progress=common_pb2.Progress(party=me, stage=run.stage),
                summary=summary,
                reason=run.reason if run.phase is Phase.FAILED else "",
            )
        )

    async def shutdown(self) -> None:
        for run in list(self.runs.values()):
            self.abort_run(run, f"{self.config.name} is shutting down")
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.peers.close()


def log_memory(run: Run, stage: str) -> None:
    """At the end of ``stage``: give freed heap pages back to the OS, then log the node's resident
    set (before and after, and the peak) and the run's accounted structures (sizes only)."""
    held = getattr(run.engine, "resident_bytes", None)
    parts = held() if callable(held) else {}
    before = heap.rss_bytes()
    heap.trim()
    log.info(
        "run %s memory after %s: rss %d MiB (%d MiB before returning free heap; peak %d MiB); %s",
        run.run_id,
        stage,
        heap.rss_bytes() // 2**20,
        before // 2**20,
        heap.peak_rss_bytes() // 2**20,
        ", ".join(f"{k} {v // 2**20} MiB" for k, v in parts.items()) or "no engine",
    )


@contextlib.contextmanager
def timed(run: Run, key: str) -> Iterator[None]:
    """Add the wall seconds of the block to ``run.stage_seconds[key]`` and the process's CPU
    seconds (all threads) to ``cpu.<key>``: a step of a stage (e.g. ``summing.classify``)."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    try:
        yield
    finally:
        add = run.stage_seconds
        add[key] = add.get(key, 0.0) + time.perf_counter() - t0
        add[f"cpu.{key}"] = add.get(f"cpu.{key}", 0.0) + cpu_seconds() - c0


def thread_timed(run: Run, key: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, adding the CPU seconds of the calling thread meanwhile to
    ``run.stage_seconds[key]`` (a handler's engine call, without the other threads' CPU)."""
    c0 = time.thread_time()
    try:
        return fn(*args)
    finally:
        run.stage_seconds[key] = run.stage_seconds.get(key, 0.0) + time.thread_time() - c0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def wire_run_id_ok(run_id: str) -> bool:
    return len(run_id) == 32 and all(c in "0123456789abcdef" for c in run_id)


def comparing_progress(progress: Callable[..., None]) -> Callable[[int, int], None]:
    """A progress callback for work in a worker thread (comparison, mpc3 circuit): reports
    (done, total) of stage COMPARING through the event loop, at most every 0.5 s and at the end."""
    loop = asyncio.get_running_loop()
    last = [0.0]

    def on_progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total or now - last[0] >= 0.5:
            last[0] = now
            loop.call_soon_threadsafe(progress, S.STAGE_COMPARING, done, total)

    return on_progress


def _results_senders(run: Run) -> tuple[str, ...]:
    """Whom a results ``source`` index names: the parties, or in mode mpc3 the compute parties
    (DeliverResults then accepts only source 0: the ring initiator, or compute party 0)."""
    if run.mpc is not None:
        return run.mpc.compute_names
    return run.parties


def _compute_parties(run: Run) -> tuple[str, ...]:
    """mpc3 compute-party RPCs: ``source`` is a compute-party index (none in mode segments)."""
    return run.mpc.compute_names if run.mpc is not None else ()
