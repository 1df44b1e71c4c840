"""Running the coordinator: bind (mutual TLS by default), serve Coordinator + health + reflection,
recover runs a previous process left unfinished, shut down cleanly."""

from __future__ import annotations

import asyncio
import logging
import sqlite3

import grpc

from coordinator.config import CoordinatorConfig, security_for
from coordinator.errors import ConfigError
from coordinator.service import CoordinatorService
from coordinator.store import Store
from proto import coordinator_pb2
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
COORDINATOR_SERVICE = coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"].full_name


def open_store(config: CoordinatorConfig) -> Store:
    """The run-state store; ConfigError naming coordinator.state_db when it cannot be used."""
    path = config.state_db
    try:
        return Store(path)
    except sqlite3.OperationalError:
        problem = "is a directory" if path.is_dir() else "cannot be opened as an SQLite database"
    except sqlite3.DatabaseError:
        problem = "is not an SQLite database"
    except OSError as exc:
        problem = f"cannot be created ({exc.strerror})"
    raise ConfigError(config.source, [f"coordinator.state_db: {path} {problem}"])


async def serve(config: CoordinatorConfig, insecure: bool = False, grace: float = 5.0) -> None:
    if insecure:
        log.warning(INSECURE_WARNING)
    problems = listen_problems(config.listen, "coordinator.listen")
    if not insecure and config.tls_ca and config.tls_cert and config.tls_key:
        problems += tls_problems(config.tls_ca, config.tls_cert, config.tls_key, config.name)
    if problems:
        raise ConfigError(config.source, problems)
    security = security_for(config, insecure)
    store = open_store(config)
    service = CoordinatorService(config, security, store)
    service.stalls.start()
    quiet_caller_gone()
    server = grpc.aio.server(options=SERVER_OPTIONS)
    add_service(
        server, service, coordinator_pb2.DESCRIPTOR.services_by_name["Coordinator"], insecure
    )
    health = add_health_and_reflection(server, [COORDINATOR_SERVICE])
    try:
        port = bind(server, config.listen, security)
    except RuntimeError:
        store.close()
        raise ConfigError(
            config.source, [bind_problem(config.listen, "coordinator.listen")]
        ) from None
    await server.start()
    recovered = store.recover()
    for run_id, parties in recovered:
        log.warning("run %s was unfinished when the coordinator stopped: marked failed", run_id)
        asyncio.create_task(
            service.abort_parties(parties, run_id, "the coordinator restarted during the run")
        )
    await set_serving(health, [COORDINATOR_SERVICE], True)
    write_port_file(config.port_file, port)
    log.info(
        "coordinator %s serving on port %d (%s)",
        config.name,
        port,
        "insecure" if insecure else "mutual TLS",
    )
    stop = stop_on_signals()
    try:
        await stop.wait()
    finally:
        log.info("coordinator shutting down")
        await set_serving(health, [COORDINATOR_SERVICE], False)
        await service.close()
        await server.stop(grace)
        store.close()
