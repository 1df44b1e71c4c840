"""The Party service's error catalog: node and domain exceptions -> (gRPC status code, public message).

Every message is safe to send and log: it names the run, party, stage, field or parameter and never
contains record values, secrets, filters or segments (PprlError messages follow the same rule).
"""

from __future__ import annotations

import logging

import grpc

from party.errors import PprlError
from proto.transport import UndecodableMessage, bounded_details

log = logging.getLogger(__name__)


class NodeError(PprlError):
    """A request the node refuses; ``code`` is the gRPC status code sent to the caller."""

    code = grpc.StatusCode.INTERNAL


class Malformed(NodeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class InvalidParameters(NodeError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class UnknownRun(NodeError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(NodeError):
    code = grpc.StatusCode.ALREADY_EXISTS


class WrongStage(NodeError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class DigestMismatch(NodeError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class KeyMismatch(NodeError):
    """A co-party's key confirmation differs: it does not hold this party's linkage secret."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class Forbidden(NodeError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(NodeError):
    code = grpc.StatusCode.UNAUTHENTICATED


class RunAborted(NodeError):
    code = grpc.StatusCode.ABORTED


class LocalDataError(NodeError):
    """The party's own files (data CSV, audit inputs) failed; the full message stays in its log."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfOrder(NodeError):
    """mpc3: a round that is not the next one of the sender's sequence or of the circuit."""

    code = grpc.StatusCode.OUT_OF_RANGE


class RunFailed(PprlError):
    """The run failed at this node; the message names the party and the stage."""


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """Map an exception to (code, public message). Unknown exceptions become INTERNAL (logged)."""
    if isinstance(exc, NodeError):
        return exc.code, str(exc)
    if isinstance(exc, UndecodableMessage):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, RunFailed):
        return grpc.StatusCode.ABORTED, str(exc)
    if isinstance(exc, OSError):
        # The node's own files (data CSV, secret, schema pin, results folder): say which kind of
        # failure without echoing anything read from them.
        log.error("file error while serving a request: %s: %s", type(exc).__name__, exc.strerror)
        return grpc.StatusCode.FAILED_PRECONDITION, (
            f"the party cannot access one of its files ({type(exc).__name__}: {exc.strerror}); "
            "see the party node's log"
        )
    if isinstance(exc, PprlError):
        # Domain validation (schema, protocol shares/rings, bit layout, config): the caller's input
        # does not fit. PprlError messages are safe by contract.
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    log.exception("internal error while serving a request")
    return grpc.StatusCode.INTERNAL, "internal error (see the party node's log)"


async def abort_with(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    """Abort the RPC with the catalog's code and message (raises)."""
    code, message = status_for(exc)
    await context.abort(code, bounded_details(message))
