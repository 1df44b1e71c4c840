"""Test certificates with unusual subjects or validity, issued by a test CA (cryptography.x509).

``issue(ca_dir, out_dir, stem, common_names=[...], ...)`` writes ``out_dir/<stem>.pem`` and
``out_dir/<stem>.key`` signed by ``ca_dir/ca.pem`` + ``ca.key`` (as made by scripts/gen_certs.py),
so tests can present certificates the project's tools would never make: two CNs, no CN, expired,
not yet valid.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def issue(
    ca_dir: pathlib.Path,
    out_dir: pathlib.Path,
    stem: str,
    common_names: list[str],
    *,
    dns_name: str | None = None,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> tuple[pathlib.Path, pathlib.Path]:
    """(certificate path, key path) of a new leaf certificate with these subject CNs."""
    ca_cert = x509.load_pem_x509_certificate((ca_dir / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn) for cn in common_names])
    sans: list[x509.GeneralName] = [x509.DNSName("localhost")]
    if dns_name:
        sans.insert(0, x509.DNSName(dns_name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - dt.timedelta(minutes=5))
        .not_valid_after(not_after or now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out_dir / f"{stem}.pem", out_dir / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path
