"""proto/transport.py: retry policy only on UNAVAILABLE, message limits, identity extraction, and
one warning line instead of grpc's traceback when a caller has gone."""

from __future__ import annotations

import io
import json
import logging
import pathlib

from party.synthetic.cluster import make_certs
from proto import transport
from tests.x509_factory import issue


def test_retry_service_config_retries_only_unavailable() -> None:
    cfg = json.loads(transport.retry_service_config(["pprl.v1.Party"]))
    (method,) = cfg["methodConfig"]
    assert method["name"] == [{"service": "pprl.v1.Party"}]
    assert method["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert int(method["retryPolicy"]["maxAttempts"]) <= 5


def test_message_limits_are_moderate() -> None:
    assert 4 * 2**20 <= transport.MAX_MESSAGE_BYTES <= 8 * 2**20
    assert transport.CHUNK_BYTES * 4 <= transport.MAX_MESSAGE_BYTES
    opts = dict(transport.SERVER_OPTIONS)
    assert opts["grpc.max_receive_message_length"] == transport.MAX_MESSAGE_BYTES


class _Ctx:
    def __init__(self, auth: dict[str, list[bytes]], metadata: tuple[tuple[str, str], ...] = ()):
        self._auth = auth
        self._md = metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._md


def test_identity_comes_from_the_certificate_unless_insecure(tmp_path: pathlib.Path) -> None:
    make_certs(tmp_path, ["party-a"])
    pem = (tmp_path / "party-a.pem").read_bytes()
    claimed = (("x-pprl-identity", "coordinator"),)
    ctx = _Ctx({"x509_pem_cert": [pem], "x509_common_name": [b"other"]}, claimed)
    assert transport.caller_identity(ctx, insecure=False) == "party-a"  # type: ignore[arg-type]
    assert transport.caller_identity(_Ctx({}, claimed), insecure=False) is None  # type: ignore[arg-type]
    assert transport.caller_identity(_Ctx({}, claimed), insecure=True) == "coordinator"  # type: ignore[arg-type]
    assert transport.caller_identity(_Ctx({}), insecure=True) is None  # type: ignore[arg-type]
    two, _ = issue(tmp_path, tmp_path, "two", ["coordinator", "party-d"])
    none, _ = issue(tmp_path, tmp_path, "none", [])
    for bad in (two.read_bytes(), none.read_bytes(), b"not a certificate"):
        ctx = _Ctx({"x509_pem_cert": [bad], "x509_common_name": [b"coordinator"]})
        assert transport.caller_identity(ctx, insecure=False) is None  # type: ignore[arg-type]


def _logged_by_grpc(exc: Exception) -> str:
    """What grpc's server logger writes when a servicer call ends in ``exc``, with the filter on."""
    transport.quiet_caller_gone()
    transport.quiet_caller_gone()  # idempotent
    logger = logging.getLogger("grpc._cython.cygrpc")
    assert sum(isinstance(f, transport.CallerGoneFilter) for f in logger.filters) == 1
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    try:
        try:
            raise exc
        except Exception:
            logger.exception(
                "Unexpected [%s] raised by servicer method [%s]",
                type(exc).__name__,
                "/pprl.v1.Party/Execute",
            )
    finally:
        logger.removeHandler(handler)
    return out.getvalue()


def test_a_reply_to_a_caller_that_has_gone_is_one_warning_line() -> None:
    from grpc._cython import cygrpc

    text = _logged_by_grpc(cygrpc.ExecuteBatchError('Failed "execute_batch"'))
    assert text.count("\n") == 1 and "Traceback" not in text, text
    assert text.startswith("WARNING grpc._cython.cygrpc: Unexpected [ExecuteBatchError] raised by")
    assert "/pprl.v1.Party/Execute" in text and "caller had closed the call" in text


def test_other_servicer_errors_keep_their_traceback() -> None:
    text = _logged_by_grpc(RuntimeError("a bug"))
    assert text.startswith("ERROR ") and "Traceback" in text and "RuntimeError: a bug" in text
