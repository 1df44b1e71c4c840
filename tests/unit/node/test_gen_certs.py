"""scripts/gen_certs.py: CA reuse, node identity in CN and SANs, private keys not world-readable."""

from __future__ import annotations

import pathlib
import stat
import subprocess
import sys

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _gen(out: pathlib.Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_certs.py"), "--out", str(out), *args],
        capture_output=True,
        text=True,
    )


def test_node_certificates(tmp_path: pathlib.Path) -> None:
    assert _gen(tmp_path, "--host", "10.1.2.3", "--host", "pprl.example", "party-a").returncode == 0
    ca_before = (tmp_path / "ca.pem").read_bytes()
    assert _gen(tmp_path, "party-b").returncode == 0
    assert (tmp_path / "ca.pem").read_bytes() == ca_before  # the CA is reused
    ca = x509.load_pem_x509_certificate(ca_before)
    cert = x509.load_pem_x509_certificate((tmp_path / "party-a.pem").read_bytes())
    assert cert.issuer == ca.subject
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "party-a"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"party-a", "localhost", "pprl.example"} <= set(san.get_values_for_type(x509.DNSName))
    assert "pprl://node/party-a" in san.get_values_for_type(x509.UniformResourceIdentifier)
    assert {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} >= {"127.0.0.1", "10.1.2.3"}
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH} <= set(eku)
    for key in ("ca.key", "party-a.key", "party-b.key"):
        mode = stat.S_IMODE((tmp_path / key).stat().st_mode)
        assert mode & 0o077 == 0, f"{key} is readable by others"


def test_invalid_names_are_refused(tmp_path: pathlib.Path) -> None:
    proc = _gen(tmp_path, "Party_A")
    assert proc.returncode == 2 and "invalid node names" in proc.stderr
    assert not (tmp_path / "ca.key").exists()
