"""The Coordinator service's error catalog: domain exceptions -> (gRPC status code, public message).

Messages name runs, parties, stages and parameters; they never contain secrets or data (the
coordinator never holds any).
"""

from __future__ import annotations

import logging

import grpc

from proto.transport import UndecodableMessage, bounded_details

log = logging.getLogger(__name__)


class CoordinatorError(Exception):
    """An error whose message is safe to show; ``code`` is the gRPC status sent to the caller."""

    code = grpc.StatusCode.INTERNAL


class ConfigError(CoordinatorError):
    """Invalid coordinator configuration; ``problems`` lists every problem, each naming its key."""

    code = grpc.StatusCode.FAILED_PRECONDITION

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = list(problems)
        lines = "\n  - ".join(self.problems)
        super().__init__(f"{source}: invalid configuration:\n  - {lines}")


class InvalidArgument(CoordinatorError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(CoordinatorError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(CoordinatorError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(CoordinatorError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(CoordinatorError):
    code = grpc.StatusCode.UNAVAILABLE


class Forbidden(CoordinatorError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(CoordinatorError):
    code = grpc.StatusCode.UNAUTHENTICATED


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(exc, CoordinatorError):
        return exc.code, str(exc)
    if isinstance(exc, UndecodableMessage):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    log.exception("internal error while serving a request")
    return grpc.StatusCode.INTERNAL, "internal error (see the coordinator's log)"


async def abort_with(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    code, message = status_for(exc)
    await context.abort(code, bounded_details(message))
