"""The Party service's error catalog maps exceptions to status codes with safe messages."""

from __future__ import annotations

import grpc

from party.errors import PprlError
from party.node import errors


def test_catalog_codes() -> None:
    cases = [
        (errors.Malformed("m"), grpc.StatusCode.INVALID_ARGUMENT),
        (errors.UnknownRun("u"), grpc.StatusCode.NOT_FOUND),
        (errors.AlreadyExists("a"), grpc.StatusCode.ALREADY_EXISTS),
        (errors.WrongStage("w"), grpc.StatusCode.FAILED_PRECONDITION),
        (errors.DigestMismatch("d"), grpc.StatusCode.FAILED_PRECONDITION),
        (errors.Forbidden("f"), grpc.StatusCode.PERMISSION_DENIED),
        (errors.Unauthenticated("n"), grpc.StatusCode.UNAUTHENTICATED),
        (errors.RunAborted("r"), grpc.StatusCode.ABORTED),
        (errors.RunFailed("r"), grpc.StatusCode.ABORTED),
        (PprlError("domain"), grpc.StatusCode.INVALID_ARGUMENT),
    ]
    for exc, code in cases:
        assert errors.status_for(exc) == (code, str(exc))


def test_unexpected_errors_do_not_leak_their_message() -> None:
    code, text = errors.status_for(RuntimeError("secret value Smith"))
    assert code == grpc.StatusCode.INTERNAL and "Smith" not in text
    code, text = errors.status_for(FileNotFoundError(2, "No such file or directory", "/d/x.csv"))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "No such file" in text
