"""Running a party node: bind (mutual TLS by default), serve Party + health + reflection, register
with the coordinator, and shut down cleanly (health NOT_SERVING, ``server.stop(grace)``, close)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import grpc

from party.config import ConfigError, PartyConfig
from party.node.hooks import Hooks
from party.node.node import PartyNode
from party.node.probe import WARM_SERVICE, security_for
from proto import party_pb2
from proto.startup import bind_problem, listen_problems, tls_problems
from proto.transport import (
    INSECURE_WARNING,
    SERVER_OPTIONS,
    add_health_and_reflection,
    add_service,
    bind,
    quiet_caller_gone,
    set_serving,
    stop_on_signals,
    write_port_file,
)

log = logging.getLogger(__name__)
PARTY_SERVICE = party_pb2.DESCRIPTOR.services_by_name["Party"].full_name


def advertised_address(config: PartyConfig, port: int) -> str:
    if config.advertise:
        return config.advertise
    host = config.listen.rpartition(":")[0]
    if host in ("0.0.0.0", "[::]", ""):
        host = "127.0.0.1"
    return f"{host}:{port}"


async def _register_forever(node: PartyNode, advertise: str, stop: asyncio.Event) -> None:
    """Register with the coordinator, then re-register every ``timeouts.register`` seconds (a
    registration heartbeat) until the node stops; after a failure retry with backoff.

    The heartbeat heals a registry that lost or replaced this party's address (a coordinator
    restarted on an empty state store, or a second process with this party's certificate that
    registered elsewhere and exited): the coordinator then finds the other address dead and takes
    this one back. Re-registering an unchanged address is a no-op at the coordinator.
    """
    cfg = node.config
    backoff = 0.5
    announced = False
    while not stop.is_set():
        try:
            await node.peers.register(
                cfg.coordinator_name, cfg.coordinator, cfg.name, advertise, cfg.timeouts.rpc
            )
            if not announced:
                log.info(
                    "registered with the coordinator at %s as %s (%s)",
                    cfg.coordinator,
                    cfg.name,
                    advertise,
                )
            announced, wait, backoff = True, cfg.timeouts.register, 0.5
        except grpc.aio.AioRpcError as exc:
            log.warning(
                "registration with the coordinator failed (%s: %s); retrying in %.1fs",
                exc.code().name,
                exc.details(),
                backoff,
            )
            announced, wait, backoff = False, backoff, min(backoff * 2, 10.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)


async def _warm_up(node: PartyNode, done: Callable[[], Awaitable[None]]) -> None:
    """Load the compiled loops and, beside them, start the encoding lanes (own processes);
    ``node.warmed`` is set and ``done`` awaited when both are over, failed or not (optimisations
    only: the first run pays the cost instead)."""
    from party.node.warmup import warm_up

    async def lanes() -> None:
        try:
            started = await asyncio.to_thread(node.start_encoding_lanes)
            if started:
                log.info("%d encoding lanes started", started)
        except Exception:  # noqa: BLE001
            log.warning(
                "starting the encoding lanes failed; the first run starts them", exc_info=True
            )

    starting = asyncio.create_task(lanes())
    try:
        seconds = await asyncio.to_thread(warm_up)
        log.info("comparison kernel warmed up in %.2fs", seconds)
    except Exception:  # noqa: BLE001 - an optimisation only; the first run pays the cost instead
        log.warning("warm-up failed; the first run will compile the kernel", exc_info=True)
    finally:
        await starting
        if node.warmed is not None:
            node.warmed.set()
        await done()


async def serve(config: PartyConfig, insecure: bool = False, grace: float = 5.0) -> None:
    """Serve until SIGINT/SIGTERM."""
    if insecure:
        log.warning(INSECURE_WARNING)
    problems = listen_problems(config.listen, "node.listen")
    if not insecure and config.tls.complete:
        assert config.tls.ca and config.tls.cert and config.tls.key
        problems += tls_problems(config.tls.ca, config.tls.cert, config.tls.key, config.name)
    if problems:
        raise ConfigError(config.source, problems)
    security = security_for(config, insecure)
    node = PartyNode(config, security, Hooks())
    if config.audit_policy is not None:
        node.audit_policy()  # fail at start, not at the first run, when the policy is invalid
    if not config.is_compute_only:  # a helper compute node holds no linkage secret
        config.read_secret()  # likewise for an unreadable or too short secret
    node.pinned_schema_digest()  # and for an invalid pinned schema (data.schema)
    if not config.trusted_peers:
        log.warning(
            "[trust] peers is empty: %s will refuse every run (list the identities it may send "
            "run data to, or set PPRL_TRUST_PEERS)",
            config.name,
        )
    quiet_caller_gone()
    server = grpc.aio.server(options=SERVER_OPTIONS)
    add_service(server, node, party_pb2.DESCRIPTOR.services_by_name["Party"], insecure)
    health = add_health_and_reflection(server, [PARTY_SERVICE])
    try:
        port = bind(server, config.listen, security)
    except RuntimeError:
        raise ConfigError(config.source, [bind_problem(config.listen, "node.listen")]) from None
    await server.start()
    await set_serving(health, [PARTY_SERVICE], True)
    advertise = advertised_address(config, port)
    write_port_file(config.port_file, port)
    log.info(
        "party %s serving on port %d (%s)",
        config.name,
        port,
        "insecure" if insecure else "mutual TLS",
    )
    stop = stop_on_signals()
    registrar = asyncio.create_task(_register_forever(node, advertise, stop))
    node.warmed = asyncio.Event()
    await set_serving(health, [WARM_SERVICE], False, overall=False)
    warming = asyncio.create_task(
        _warm_up(node, lambda: set_serving(health, [WARM_SERVICE], True, overall=False))
    )
    try:
        await stop.wait()
    finally:
        log.info("party %s shutting down", config.name)
        await set_serving(health, [PARTY_SERVICE, WARM_SERVICE], False)
        registrar.cancel()
        await asyncio.gather(registrar, warming, return_exceptions=True)
        await node.shutdown()
        await server.stop(grace)
