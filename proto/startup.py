"""Start-up checks shared by party nodes and the coordinator: the listen address and the node's
own TLS material, each problem naming the configuration key and file (never file contents).

``serve`` of both services calls ``listen_problems`` and ``tls_problems`` before binding, so a bad
deployment stops at once with one clear message (exit status 2) instead of a traceback or a vague
failure at the first run. ``bind_problem`` turns gRPC's bind failure into the same kind of message.
"""

from __future__ import annotations

import datetime as dt
import pathlib
import socket

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from proto.transport import certificate_identity


def listen_problems(address: str, key: str) -> list[str]:
    """The host of ``address`` must resolve (for binding)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        return []
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError, ValueError):
        return [f"{key}: the host of {address} cannot be resolved"]
    return []


def bind_problem(address: str, key: str) -> str:
    return (
        f"{key}: cannot listen on {address} (the port is in use, or the host is not an address "
        "of this machine)"
    )


def tls_problems(
    ca: pathlib.Path,
    cert: pathlib.Path,
    key: pathlib.Path,
    name: str,
    now: dt.datetime | None = None,
) -> list[str]:
    """Problems of the node's own TLS files: unreadable or garbage PEM, a key that does not belong
    to the certificate, a certificate not issued by a CA of the bundle, expired or not yet valid,
    or not issued to ``name`` (its subject must hold exactly one CN, equal to the node name)."""
    now = now or dt.datetime.now(dt.UTC)
    problems: list[str] = []
    cas = _certificates(ca, "tls.ca", "a PEM CA bundle", problems)
    chain = _certificates(cert, "tls.cert", "a PEM certificate", problems)
    private_key = None
    try:
        private_key = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except OSError as exc:
        problems.append(f"tls.key: cannot read {key} ({exc.strerror})")
    except (ValueError, TypeError, serialization.UnsupportedAlgorithm):
        problems.append(f"tls.key: {key} is not an unencrypted PEM private key")
    if not chain:
        return problems
    leaf = chain[0]
    if private_key is not None and _spki(private_key.public_key()) != _spki(leaf.public_key()):
        problems.append(f"tls.key: {key} is not the private key of the certificate {cert}")
    if cas and not any(leaf.issuer == c.subject for c in cas):
        problems.append(f"tls.cert: {cert} is not issued by a CA of the bundle {ca}")
    if now < leaf.not_valid_before_utc:
        problems.append(
            f"tls.cert: {cert} is not valid yet (valid from {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC)"
        )
    if now > leaf.not_valid_after_utc:
        problems.append(
            f"tls.cert: {cert} expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        )
    identity = certificate_identity(leaf.public_bytes(serialization.Encoding.PEM))
    if identity != name:
        problems.append(
            f"tls.cert: {cert} is not issued to this node's name {name} (its subject must hold "
            "exactly one CN equal to the node name)"
        )
    return problems


def _certificates(
    path: pathlib.Path, key: str, what: str, problems: list[str]
) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(path.read_bytes())
    except OSError as exc:
        problems.append(f"{key}: cannot read {path} ({exc.strerror})")
    except ValueError:
        problems.append(f"{key}: {path} is not {what}")
    return []


def _spki(public_key: object) -> bytes:
    return public_key.public_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
