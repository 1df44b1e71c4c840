"""Mode mpc3 at a node: the data-party side (input shares out, results in) and the compute-party
side (per-run PRF keys, the circuit's rounds with the other compute parties, results out).

Message order of one mpc3 run at node N (docs/protocol.md, "Mode mpc3"):

1. Data parties exchange block digests and compute the common blocks exactly as in mode segments
   (PartyNode._exchange_blocks).
2. Each data party splits its records in common blocks into replicated shares
   (party.mpc.inputs.input_shares) and sends share t to compute party t (PushInputShare), after
   checking that every compute party is an identity it trusts in its own configuration and is
   not the coordinator. A compute party that is itself a data party hands its own share over
   locally.
3. Compute party i draws a fresh key k_i and sends it to compute party (i+2) mod 3
   (PushComputeKey); it receives k_(i+1) from compute party (i+1) mod 3.
4. Once it holds the key and every data party's share, compute party i runs
   ComputeParty.run(): every Round goes to (i+2) mod 3 on one ExchangeRounds stream, and the
   round of the same (batch, number) from (i+1) mod 3 comes back through the RoundInbox.
5. Compute party 0 sends each data party j its results (DeliverResults, source 0): linkage ids,
   similarities and party j's own pseudonyms of the matched sets. Data parties write matches.csv.
   Target any (docs/protocol.md, section 15.1): the compute parties run the pairwise circuit
   (party.mpc.pairs) on the records in blocks of two or more parties (the data parties' PairEngine
   picks them); compute party 0 solves the groups from the matched pairs and sends each data party,
   per group it is in, the group columns of mode segments (GroupResults, ``groups`` set).

Stages reported: exchanging (steps 1-3), comparing (the circuit; compute parties report batches
done), summing (results). A helper compute node (P = 2) holds no data and does steps 3-5 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from party.node import mpc_wire
from party.node.errors import AlreadyExists, Forbidden, Malformed, RunAborted, RunFailed
from proto import common_pb2, party_pb2

if TYPE_CHECKING:
    from party.node.node import PartyNode, Run

log = logging.getLogger(__name__)
S = common_pb2.Stage


@dataclass
class Mpc3State:
    """What one node keeps for one mpc3 run (on ``Run.mpc``)."""

    compute_names: tuple[str, str, str]
    cp_index: int | None  # this node's compute-party index, None for a data party only
    inputs: dict[int, Any] = field(default_factory=dict)  # source -> InputShare (validated)
    inputs_seen: set[int] = field(default_factory=set)
    key_in: bytes | None = None
    inbox: mpc_wire.RoundInbox | None = None
    stats: Any = None  # MpcStats of the circuit, at a compute party

    @property
    def is_compute(self) -> bool:
        return self.cp_index is not None

    def sender_of_rounds(self) -> int:
        """The compute party whose rounds and key this one receives: (i+1) mod 3."""
        assert self.cp_index is not None
        return (self.cp_index + 1) % 3


def new_state(node: PartyNode, run_id: str, compute_names: tuple[str, str, str]) -> Mpc3State:
    """The run's state; at a compute party with a round inbox that buffers at most the node's
    buffer budget, every byte reserved from it (party/node/budget.py)."""
    me = node.config.name
    cp = compute_names.index(me) if me in compute_names else None
    state = Mpc3State(compute_names=compute_names, cp_index=cp)
    if cp is not None:
        state.inbox = mpc_wire.RoundInbox(
            max_bytes=node.budget.limit_bytes, account=node.budget.account(run_id)
        )
    return state


def check_compute_recipients(node: PartyNode, run: Run) -> None:
    """A data party sends input shares only to compute parties it trusts itself (never the
    coordinator); raises the trust module's PERMISSION_DENIED error otherwise."""
    from party.node.trust import check_recipients

    assert run.mpc is not None
    check_recipients(
        run.mpc.compute_names,
        own_name=node.config.name,
        coordinator_name=node.config.coordinator_name,
        trusted=node.config.trusted_peers,
        role="compute party",
    )


# -- RPC handlers (called by the thin PartyNode servicer methods) ------------------------------


def compute_state(run: Run, who: str) -> Mpc3State:
    """The run's mpc3 state at a compute party; PERMISSION_DENIED for anything else."""
    st = run.mpc
    if st is None:
        raise Forbidden(f"run {run.run_id} is not an mpc3 run: {who} may not call compute RPCs")
    if st.cp_index is None:
        raise Forbidden(f"this node is not a compute party of run {run.run_id}")
    return st


def check_compute_sender(run: Run, who: str, source: int) -> Mpc3State:
    """Keys and rounds come only from compute party (i+1) mod 3, naming its own index."""
    st = compute_state(run, who)
    sender = st.sender_of_rounds()
    if who != st.compute_names[sender] or source != sender:
        raise Forbidden(
            f"{who} is not compute party {sender} of run {run.run_id}, the only one that sends "
            f"keys and rounds to compute party {st.cp_index}"
        )
    return st


async def receive_input_share(
    node: PartyNode,
    run: Run,
    who: str,
    first: party_pb2.PushInputShareRequest,
    rest: Any,
) -> int:
    from party.mpc.inputs import validate_input_share
    from party.mpc.threshold import run_threshold_test

    st = compute_state(run, who)
    if first.target != st.cp_index:
        raise Malformed(
            f"input share for compute party {first.target} sent to compute party {st.cp_index}"
        )
    if first.source in st.inputs_seen:
        raise AlreadyExists(f"run {run.run_id}: the input share of {who} was already received")
    st.inputs_seen.add(first.source)  # at once: a concurrent duplicate is refused
    account = node.budget.account(run.run_id)
    share = None
    try:
        share = await mpc_wire.input_share_from_chunks(first, rest, account=account)
        p = run.params
        test = run_threshold_test(p)  # P-way sets, or pairs (target any)
        await asyncio.to_thread(
            validate_input_share,
            share,
            target=st.cp_index,
            parties=p.party_count,
            filter_bits=p.filter_bits,
            digest_width=run.schema.digest_width,
            count_bits=test.width,
        )
    except BaseException:
        st.inputs_seen.discard(first.source)
        if share is not None:
            account.release(mpc_wire.input_share_bytes(share))
        raise
    # The share stays reserved in the budget until the run ends (close_run releases it).
    st.inputs[first.source] = share
    if len(st.inputs) == len(run.parties):
        run.event("mpc_inputs").set()
    return int(share.pseudonyms.shape[0])


def receive_key(run: Run, who: str, request: party_pb2.PushComputeKeyRequest) -> None:
    from party.mpc.keys import KEY_BYTES

    st = check_compute_sender(run, who, request.source)
    if len(request.key) != KEY_BYTES:
        raise Malformed(f"compute key must be {KEY_BYTES} bytes, got {len(request.key)}")
    if st.key_in is not None:
        raise AlreadyExists(f"run {run.run_id}: the compute key of {who} was already received")
    st.key_in = bytes(request.key)
    run.event("mpc_key").set()


async def receive_rounds(
    run: Run, who: str, first: party_pb2.ExchangeRoundsRequest, rest: Any
) -> int:
    st = check_compute_sender(run, who, first.source)
    assert st.inbox is not None
    if st.inbox.stream_open:
        raise AlreadyExists(f"run {run.run_id}: a round stream from {who} is already open")
    st.inbox.stream_open = True
    return await st.inbox.receive(first, rest)


# -- the run driver ----------------------------------------------------------------------------


async def execute(
    node: PartyNode,
    run: Run,
    progress: Callable[..., None],
    enter: Callable[[Any], None],
) -> Any:
    """One node's part of an mpc3 run; returns this data party's own results as PartyResults
    chunks (resolved and written by the node), or None at a helper compute node."""
    st = run.mpc
    assert st is not None
    data_party = run.index >= 0
    if data_party:
        await node._exchange_blocks(run)
        check_compute_recipients(node, run)
        await _send_inputs(node, run, st)
        run.event("inputs_sent").set()  # from now on results may arrive (node._receive_stream)
    outcome = None
    if st.is_compute:
        outcome = await _compute(node, run, st, progress, enter)
    else:
        enter(S.STAGE_COMPARING)
    enter(S.STAGE_SUMMING)
    if st.cp_index == 0:
        assert outcome is not None
        return await _deliver_results(
            node, run, await asyncio.to_thread(_results_of, node, run, outcome)
        )
    if not data_party:
        return None
    what = f"results from {st.compute_names[0]}"
    await node._wait_peer(run, run.event("results"), what, "summing", whole_run=True)
    return run.engine.received_results()


def results_bound(run: Run) -> int:
    """Most result rows a data party accepts in an mpc3 run: one per record it shared with
    one-to-one resolution, else the wire's row limit (the rows go to the engine's spilling
    store chunk by chunk, each chunk counted against the buffer budget while it is processed)."""
    from party.node.wire import MAX_ROWS

    if run.params.one_to_one and run.engine is not None:
        return int(np.count_nonzero(run.engine.record_pseudonyms))
    return MAX_ROWS


async def _send_inputs(node: PartyNode, run: Run, st: Mpc3State) -> None:
    from party.mpc.inputs import input_shares

    shares = await node._engine(run, input_shares, run.engine)
    sends = []
    for share in shares:
        name = st.compute_names[share.target]
        if name == node.config.name:
            _accept_own_share(run, st, share)
            continue
        sends.append(
            node._send(
                run,
                name,
                "input shares",
                "exchanging",
                "PushInputShare",
                mpc_wire.input_share_to_chunks(run.ref, share),
            )
        )
    await asyncio.gather(*sends)


def _accept_own_share(run: Run, st: Mpc3State, share: Any) -> None:
    st.inputs_seen.add(share.source)
    st.inputs[share.source] = share
    if len(st.inputs) == len(run.parties):
        run.event("mpc_inputs").set()


async def _compute(
    node: PartyNode,
    run: Run,
    st: Mpc3State,
    progress: Callable[..., None],
    enter: Callable[[Any], None],
) -> Any:
    """Keys, then the circuit with the other two compute parties; returns the MpcOutcome."""
    from party.cluster import ClusterError
    from party.encoding.parallel import resolve_workers
    from party.mpc.keys import ComputeKeys, key_recipient, new_key
    from party.mpc.pairs import compute_party_class

    assert st.cp_index is not None and st.inbox is not None
    i = st.cp_index
    own_key = new_key()
    recipient = st.compute_names[key_recipient(i)]
    await node._send(
        run,
        recipient,
        "its compute key",
        "exchanging",
        "PushComputeKey",
        party_pb2.PushComputeKeyRequest(run=run.ref, source=i, key=own_key),
    )
    sender = st.compute_names[st.sender_of_rounds()]
    await node._wait_peer(run, run.event("mpc_key"), f"the compute key of {sender}", "exchanging")
    missing = [p for j, p in enumerate(run.parties) if j not in st.inputs]
    if missing:
        what = f"input shares from {', '.join(missing)}"
        await node._wait_peer(run, run.event("mpc_inputs"), what, "exchanging")
    assert st.key_in is not None
    enter(S.STAGE_COMPARING)
    await node._pause_hook(run, "circuit")
    # the party's Dask cluster, when it has one: entered and closed in one context (the
    # client's context variable), each time in a thread
    cluster = contextlib.ExitStack()
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    try:
        circuits = None
        if node.config.cluster is not None:  # the batches on the party's Dask workers
            circuits = await loop.run_in_executor(
                None, context.run, _circuits_on_cluster, node, run, cluster
            )
        cp = compute_party_class(run.params)(
            i,
            run.params,
            ComputeKeys(own=own_key, received=st.key_in),
            memory_budget_bytes=run.params.memory_budget_bytes,
            workers=resolve_workers(node.config.workers),
            circuits=circuits,
        )
        return await _circuit(node, run, st, cp, progress)
    except ClusterError as exc:  # the party's own addresses and errors stay in its log
        log.error("the circuit on the party's Dask cluster failed: %s", exc)
        raise ClusterError(
            "its circuit on the party's Dask cluster failed (the party's log says where)"
        ) from None
    finally:
        await loop.run_in_executor(None, context.run, cluster.close)


def _circuits_on_cluster(node: PartyNode, run: Run, stack: contextlib.ExitStack) -> Any:
    """The compute party's ``ClusterCircuits`` for this run, closed with ``stack``; the shares'
    files on the party's cluster reserved against the run's memory budget."""
    from party.cluster_mpc import circuits_on_cluster
    from party.protocol.spill import LocalGauge

    assert node.config.cluster is not None
    return stack.enter_context(
        circuits_on_cluster(
            node.config.cluster,
            node.config.workers,
            LocalGauge(run.params.memory_budget_bytes),
            run.cancel,
        )
    )


async def _circuit(
    node: PartyNode, run: Run, st: Mpc3State, cp: Any, progress: Callable[..., None]
) -> Any:
    """The circuit with the other two compute parties; returns the MpcOutcome."""
    from party.mpc.keys import key_recipient

    assert st.cp_index is not None
    i = st.cp_index
    for source in sorted(st.inputs):
        await asyncio.to_thread(cp.receive_input, st.inputs[source])
    st.inputs.clear()  # the ComputeParty holds them now
    from party.node.node import comparing_progress

    on_progress = comparing_progress(progress)
    outgoing: asyncio.Queue[Any] = asyncio.Queue(maxsize=mpc_wire.ROUND_WINDOW)
    target = st.compute_names[key_recipient(i)]
    stream = asyncio.ensure_future(
        node._send(
            run,
            target,
            "round payloads",
            "comparing",
            "ExchangeRounds",
            _round_chunks(run, i, outgoing),
            whole_run=True,
        )
    )
    try:
        outcome = await _drive(node, run, st, cp, outgoing, stream, on_progress)
        await outgoing.put(None)
        await stream
    finally:
        if not stream.done():
            stream.cancel()
            await asyncio.gather(stream, return_exceptions=True)
    st.stats = outcome.stats
    return outcome


async def _round_chunks(run: Run, source: int, outgoing: asyncio.Queue[Any]) -> Any:
    """Async chunk source of the ExchangeRounds stream: rounds from ``outgoing`` until None."""
    while True:
        item = await outgoing.get()
        if item is None:
            return
        seq, rnd = item
        for chunk in mpc_wire.round_to_chunks(
            run.ref, source, seq, rnd.batch, rnd.number, rnd.payload
        ):
            yield chunk


async def _drive(
    node: PartyNode,
    run: Run,
    st: Mpc3State,
    cp: Any,
    outgoing: asyncio.Queue[Any],
    stream: asyncio.Future[Any],
    on_progress: Callable[[int, int], None],
) -> Any:
    """Step the ComputeParty generator off the event loop, one round at a time."""
    assert st.inbox is not None
    gen = cp.run(progress=on_progress, cancel=run.cancel)
    incoming: bytes | None = None
    seq = 0
    while True:
        finished, rnd = await asyncio.to_thread(_step, gen, incoming)
        if finished:
            return rnd  # the MpcOutcome
        await node._unless_aborted(run, outgoing.put((seq, rnd)))
        seq += 1
        if stream.done():  # the send failed: surface its error now
            await stream
            raise RunFailed(f"{node.config.name}: the round stream ended early")
        try:
            incoming = await node._unless_aborted(
                run, st.inbox.take(rnd.batch, rnd.number, len(rnd.payload))
            )
        except RunAborted:
            raise
        except Exception as exc:  # noqa: BLE001 - a peer's bad round ends the run with a reason
            raise RunFailed(
                f"{node.config.name} failed in stage comparing: compute party "
                f"{st.compute_names[st.sender_of_rounds()]} sent a bad round: {exc}"
            ) from None


def _step(gen: Any, incoming: bytes | None) -> tuple[bool, Any]:
    """One generator step in a worker thread: (False, Round) or (True, MpcOutcome) at the end
    (StopIteration cannot cross into an asyncio future)."""
    try:
        return False, gen.send(incoming)
    except StopIteration as stop:
        return True, stop.value


def _results_of(node: PartyNode, run: Run, outcome: Any) -> list[Any]:
    """Compute party 0: every data party's results, by party index (PartyResults of the matched
    sets; target any: GroupResults of the groups solved from the matched pairs)."""
    from party.mpc.pairs import solve_pair_rows
    from party.protocol.classify import PartyResults
    from party.protocol.pair_engine import group_results

    p = run.params
    if p.target == "any":
        rows = solve_pair_rows(outcome, p, str(node.spill_dir()))
        return [group_results(rows[j], j) for j in range(p.party_count)]
    cls = outcome.classification
    lids = np.asarray(cls.linkage_ids, dtype=np.uint64)
    sims = np.asarray(cls.similarities, dtype=np.float64)
    return [
        PartyResults(j, lids, sims, np.ascontiguousarray(cls.candidates[:, j], dtype=np.uint64))
        for j in range(p.party_count)
    ]


async def _deliver_results(node: PartyNode, run: Run, results: list[Any]) -> Any:
    """Compute party 0: each data party its results; returns this node's own as PartyResults
    chunks (None at a helper)."""
    from party.node import wire

    own = None
    sends = []
    groups = run.params.target == "any"
    for j, name in enumerate(run.parties):
        mine = results[j]
        if name == node.config.name:
            own = [mine]
            continue
        chunks = wire.results_stream_to_chunks(
            run.ref, 0, j, int(mine.pseudonyms.shape[0]), [wire.result_columns(mine)], groups
        )
        sends.append(node._send(run, name, "results", "summing", "DeliverResults", chunks))
    await asyncio.gather(*sends)
    return own


def end(st: Mpc3State | None, failure: str | None) -> None:
    """The run ended: free its input shares. On a ``failure`` also drop buffered rounds and end
    any open round stream with ABORTED (after success the sender closes its stream itself)."""
    if st is None:
        return
    st.inputs.clear()
    if failure is not None and st.inbox is not None:
        st.inbox.fail(RunAborted(failure))


def summary_fields(st: Mpc3State | None, summary: common_pb2.PartySummary) -> None:
    """Fill the mpc fields of a compute party's PartySummary."""
    if st is None or st.stats is None:
        return
    s = st.stats
    summary.candidate_sets = int(getattr(s, "candidate_sets", 0))
    summary.mpc_batches = int(getattr(s, "batches", 0))
    summary.mpc_rounds = int(getattr(s, "rounds", 0))
    summary.mpc_and_gates = int(getattr(s, "and_gates", 0))
    summary.mpc_round_bytes = int(getattr(s, "bytes_sent", 0))
