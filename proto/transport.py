"""gRPC plumbing shared by party nodes and the coordinator: TLS, identities, channels, health.

Both ``party.node`` and ``coordinator`` use this module (they may not import each other; both may
import ``proto``). It owns:

- message limits (8 MiB per message, ~1 MiB chunks for bulk streams);
- mutual TLS credentials (server requires a client certificate signed by the configured CA);
- the caller identity every RPC is authorised against: the one subject common name of the verified
  client certificate (parsed from ``x509_pem_cert`` in the gRPC auth context; a subject with no CN
  or several CNs has no identity and gets UNAUTHENTICATED). In ``--insecure`` mode there is
  no verified identity; the caller's claimed name travels in the ``x-pprl-identity`` metadata header
  and is trusted blindly, which is why insecure mode is for local experiments only and logs a loud
  warning;
- channel options: a service config declaring retries on UNAVAILABLE only, keepalive, message limits
  and, under TLS, a target-name override so that the peer must present a certificate for the
  expected node name (authenticating the server side as well);
- the standard health service and server reflection on every server;
- one warning line, not a traceback, when grpc cannot send a reply because the caller has gone.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import pathlib
import re
import signal
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 8 * 2**20
CHUNK_BYTES = 2**20
IDENTITY_HEADER = "x-pprl-identity"


def retry_service_config(service_names: Sequence[str]) -> str:
    """Service config JSON: retries (up to 4 attempts, exponential backoff) on UNAVAILABLE only."""
    return json.dumps(
        {
            "methodConfig": [
                {
                    "name": [{"service": s} for s in service_names],
                    "retryPolicy": {
                        "maxAttempts": 4,
                        "initialBackoff": "0.1s",
                        "maxBackoff": "2s",
                        "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE"],
                    },
                }
            ]
        }
    )


SERVER_OPTIONS: list[tuple[str, int | str]] = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ("grpc.so_reuseport", 0),
]


INSECURE_WARNING = (
    "INSECURE MODE: plaintext gRPC without mutual TLS; caller identities are NOT verified. "
    "Use only for local experiments, never with real data."
)


@dataclass(frozen=True)
class TlsMaterial:
    """PEM bytes of the CA bundle, this node's certificate chain and its private key."""

    ca: bytes
    cert: bytes
    key: bytes


@dataclass(frozen=True)
class Security:
    """How this node talks: mutual TLS with ``tls``, or plaintext when ``tls`` is None."""

    name: str
    tls: TlsMaterial | None

    @classmethod
    def for_node(
        cls, name: str, insecure: bool, read_tls: Callable[[], tuple[bytes, bytes, bytes]]
    ) -> Security:
        """Plaintext when ``insecure``, else mutual TLS from ``read_tls() -> (ca, cert, key)``."""
        if insecure:
            return cls(name=name, tls=None)
        ca, cert, key = read_tls()
        return cls(name=name, tls=TlsMaterial(ca=ca, cert=cert, key=key))

    @property
    def insecure(self) -> bool:
        return self.tls is None

    def server_credentials(self) -> grpc.ServerCredentials | None:
        if self.tls is None:
            return None
        return grpc.ssl_server_credentials(
            [(self.tls.key, self.tls.cert)],
            root_certificates=self.tls.ca,
            require_client_auth=True,
        )

    def channel(
        self,
        address: str,
        peer_name: str,
        services: Sequence[str],
        keepalive_ms: int = 10000,
    ) -> grpc.aio.Channel:
        """An aio channel to ``address`` whose server must present a certificate for ``peer_name``."""
        options: list[tuple[str, int | str]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.service_config", retry_service_config(services)),
            ("grpc.enable_retries", 1),
            ("grpc.keepalive_time_ms", keepalive_ms),
            ("grpc.keepalive_timeout_ms", 5000),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        if self.tls is None:
            return grpc.aio.insecure_channel(address, options=options)
        options.append(("grpc.ssl_target_name_override", peer_name))
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.tls.ca,
            private_key=self.tls.key,
            certificate_chain=self.tls.cert,
        )
        return grpc.aio.secure_channel(address, creds, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Call metadata: the claimed identity (only read by servers in insecure mode)."""
        return ((IDENTITY_HEADER, self.name),)


def bind(server: grpc.aio.Server, address: str, security: Security) -> int:
    """Bind ``address`` (port 0 picks one); return the bound port. Raises RuntimeError on failure."""
    creds = security.server_credentials()
    if creds is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, creds)
    if port == 0:
        raise RuntimeError(f"cannot bind {address}")
    return port


def caller_identity(context: grpc.aio.ServicerContext, insecure: bool) -> str | None:
    """The caller's verified certificate common name, or (insecure mode only) its claimed name.

    Under TLS the identity is read from the verified peer certificate itself (``x509_pem_cert``,
    parsed with ``cryptography``), not from gRPC's ``x509_common_name`` property, which exposes only
    the first CN of a subject: a certificate whose subject holds two CNs (``CN=coordinator,
    CN=party-d``) has no identity here, nor does one without a CN.
    """
    if insecure:
        for key, value in context.invocation_metadata() or ():
            if key == IDENTITY_HEADER and isinstance(value, str):
                return value
        return None
    pems = context.auth_context().get("x509_pem_cert") or []
    if len(pems) != 1:
        return None
    return certificate_identity(pems[0])


@functools.lru_cache(maxsize=256)
def certificate_identity(pem: bytes) -> str | None:
    """The single subject common name of a PEM certificate, or None (none, several, unreadable)."""
    # Imported here: health probes and clients never parse certificates (issue 15 item 9).
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    try:
        cert = x509.load_pem_x509_certificate(pem)
        names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    except ValueError:
        return None
    if len(names) != 1 or not isinstance(names[0].value, str) or not names[0].value:
        return None
    return names[0].value


MAX_DETAILS_CHARS = 1024


def bounded_details(message: str) -> str:
    """A status message cut to MAX_DETAILS_CHARS, so nothing unbounded reaches status metadata."""
    if len(message) <= MAX_DETAILS_CHARS:
        return message
    return message[: MAX_DETAILS_CHARS - 3] + "..."


class UndecodableMessage(ValueError):
    """A streamed request message is not a valid protobuf message of its type (INVALID_ARGUMENT).

    Both services' error catalogs map it to INVALID_ARGUMENT with its (fixed, value-free) message.
    """


def add_service(
    server: grpc.aio.Server, servicer: object, service: ServiceDescriptor, insecure: bool
) -> None:
    """Serve ``servicer``'s methods of ``service``, decoding requests here rather than in gRPC.

    The generated ``add_*Servicer_to_server`` lets gRPC deserialize each request before any handler
    runs, so an undecodable message ends as UNKNOWN with the Python exception class in the status
    details and a traceback logged per request. Here every handler first requires a caller identity
    (UNAUTHENTICATED), then decodes: an undecodable unary request is refused with INVALID_ARGUMENT
    ("request is not a valid pprl.v1.X"), an undecodable message of a request stream raises
    UndecodableMessage inside the servicer, whose catalog maps it to INVALID_ARGUMENT. Nothing is
    logged per request and nothing of the caller's bytes is echoed.
    """
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        behaviour = getattr(servicer, method.name)
        handler = _decoding_handler(
            behaviour,
            request_cls,
            method.input_type.full_name,
            method.client_streaming,
            method.server_streaming,
            insecure,
        )
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(method.client_streaming, method.server_streaming)]
        handlers[method.name] = make(
            handler, request_deserializer=None, response_serializer=response_cls.SerializeToString
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    server.add_registered_method_handlers(service.full_name, handlers)


def _decoding_handler(
    behaviour: Callable[..., Any],
    request_cls: Any,
    type_name: str,
    client_streaming: bool,
    server_streaming: bool,
    insecure: bool,
) -> Callable[..., Any]:
    invalid = f"request is not a valid {type_name}"

    async def identified(context: grpc.aio.ServicerContext) -> None:
        if not caller_identity(context, insecure):
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                "no caller identity (client certificate with exactly one CN required)",
            )

    async def decode(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        await identified(context)
        try:
            return request_cls.FromString(raw)
        except DecodeError:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, invalid)

    async def decoded_stream(raw_stream: AsyncIterator[bytes]) -> AsyncIterator[Any]:
        async for raw in raw_stream:
            try:
                message = request_cls.FromString(raw)
            except DecodeError:
                raise UndecodableMessage(invalid) from None
            yield message

    if client_streaming:

        async def stream_in(
            raw_stream: AsyncIterator[bytes], context: grpc.aio.ServicerContext
        ) -> Any:
            await identified(context)
            return await behaviour(decoded_stream(raw_stream), context)

        return stream_in
    if server_streaming:

        async def stream_out(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            request = await decode(raw, context)
            async for item in behaviour(request, context):
                yield item

        return stream_out

    async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        return await behaviour(await decode(raw, context), context)

    return unary


def add_health_and_reflection(
    server: grpc.aio.Server, service_full_names: Iterable[str]
) -> health.aio.HealthServicer:
    """Serve grpc.health.v1.Health and reflection; return the health servicer (initially NOT_SERVING)."""
    from grpc_reflection.v1alpha import reflection  # servers only: probes and clients skip it

    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    names = list(service_full_names)
    reflection.enable_server_reflection(
        [
            *names,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ],
        server,
    )
    return servicer


async def set_serving(
    servicer: health.aio.HealthServicer, services: Iterable[str], on: bool, overall: bool = True
) -> None:
    """Report ``services`` (and, with ``overall``, the server as a whole: service "") SERVING or
    NOT_SERVING."""
    status = (
        health_pb2.HealthCheckResponse.SERVING if on else health_pb2.HealthCheckResponse.NOT_SERVING
    )
    for name in ["", *services] if overall else services:
        await servicer.set(name, status)


async def check_health(
    security: Security, address: str, peer_name: str, timeout: float, service: str = ""
) -> str:
    """The health status name of ``address`` ("SERVING", "NOT_SERVING", ...) or "UNREACHABLE: ..."."""
    async with security.channel(address, peer_name, ["grpc.health.v1.Health"]) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            resp = await stub.Check(
                health_pb2.HealthCheckRequest(service=service),
                timeout=timeout,
                metadata=security.metadata(),
            )
        except grpc.aio.AioRpcError as exc:
            return f"UNREACHABLE: {exc.code().name} {exc.details()}"
        return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


_HOST_LABEL_RE = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
MAX_ADDRESS_CHARS = 261  # 253-character DNS name, ":", 5-digit port, brackets to spare


def address_problem(value: object, allow_port_zero: bool = False) -> str | None:
    """Why ``value`` is not a ``host:port`` address, or None when it is one.

    The host must be a DNS name (dot-separated labels of letters, digits and '-', at most 253
    characters), an IPv4 address, or an IPv6 address in brackets; the port 1-65535 (0 too when
    ``allow_port_zero``, for binding). The reason never contains the value.
    """
    if not isinstance(value, str) or not value:
        return "expected host:port"
    if len(value) > MAX_ADDRESS_CHARS:
        return f"expected host:port (at most {MAX_ADDRESS_CHARS} characters)"
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isascii() or not port.isdigit():
        return "expected host:port"
    p = int(port)
    if p > 65535 or (p == 0 and not allow_port_zero):
        return "port out of range"
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return "host is not a valid IPv6 address"
        return None
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_HOST_LABEL_RE.fullmatch(label) for label in labels):
        return "host must be a DNS name, an IPv4 address or a bracketed IPv6 address"
    return None


def check_address(value: object, key: str, problems: list[str], allow_port_zero: bool) -> str:
    """Validate a ``host:port`` setting (address_problem); append a problem naming ``key``."""
    problem = address_problem(value, allow_port_zero)
    if problem is not None:
        problems.append(f"{key}: {problem}")
    return value if isinstance(value, str) else ""


class CallerGoneFilter(logging.Filter):
    """Turns grpc's traceback for a reply it could not send (the caller had cancelled or closed the
    call) into one warning line: the call is over and the node has nothing to repair."""

    def filter(self, record: logging.LogRecord) -> bool:
        from grpc._cython import cygrpc

        if record.exc_info and isinstance(record.exc_info[1], cygrpc.ExecuteBatchError):
            record.msg = f"{record.getMessage()} (the caller had closed the call before the reply)"
            record.args = ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


def quiet_caller_gone() -> None:
    """Install CallerGoneFilter on grpc's server logger once (servers call it before starting)."""
    logger = logging.getLogger("grpc._cython.cygrpc")
    if not any(isinstance(f, CallerGoneFilter) for f in logger.filters):
        logger.addFilter(CallerGoneFilter())


def write_port_file(path: pathlib.Path | None, port: int) -> None:
    """Publish the bound port atomically (temp file + rename) for launchers that bound port 0."""
    if path is None:
        return
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(path)


def stop_on_signals() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM (graceful shutdown of a server in the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop
