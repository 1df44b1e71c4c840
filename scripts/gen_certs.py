"""Make a local certificate authority and one TLS certificate per node for mutual TLS (local use).

    python scripts/gen_certs.py [--out certs] [--host HOST ...] coordinator party-a party-b party-c

Writes ``OUT/ca.pem`` + ``OUT/ca.key`` (created once, reused on later calls so nodes can be added) and
``OUT/<name>.pem`` + ``OUT/<name>.key`` per node. Each node certificate has the node name as its
subject common name (the identity every RPC is authorised against) and as DNS subject alternative
name, a URI SAN ``pprl://node/<name>``, plus ``localhost``, ``127.0.0.1``, ``::1`` and any ``--host``
values, and is valid for both server and client authentication. Keys are ECDSA P-256, written with
mode 0600 into OUT, which must never be committed (``certs/`` is git-ignored). For production use your
organisation's PKI instead; the nodes only need a CA bundle, a certificate and a key per node.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import pathlib
import re
import sys

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _write_key(path: pathlib.Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _write_cert(path: pathlib.Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def load_or_make_ca(
    out: pathlib.Path, ca_name: str, days: int
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    cert_path, key_path = out / "ca.pem", out / "ca.key"
    if cert_path.exists() and key_path.exists():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cert, key
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(key_path, key)
    _write_cert(cert_path, cert)
    return cert, key


def make_node_cert(
    out: pathlib.Path,
    name: str,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    hosts: list[str],
    days: int,
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    sans: list[x509.GeneralName] = [
        x509.DNSName(name),
        x509.UniformResourceIdentifier(f"pprl://node/{name}"),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(out / f"{name}.key", key)
    _write_cert(out / f"{name}.pem", cert)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="+", help="node names (lower-case letters, digits, '-')")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("certs"))
    parser.add_argument("--host", action="append", default=[], help="extra SAN host or IP")
    parser.add_argument("--ca-name", default="pprl local CA")
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args(argv)
    bad = [n for n in args.names if not NAME_RE.match(n)]
    if bad:
        print(f"gen_certs: invalid node names {bad}: use a-z, 0-9 and '-'", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    os.chmod(args.out, 0o700)
    ca_cert, ca_key = load_or_make_ca(args.out, args.ca_name, args.days)
    for name in args.names:
        make_node_cert(args.out, name, ca_cert, ca_key, args.host, args.days)
    print(f"wrote CA and {len(args.names)} node certificates to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
