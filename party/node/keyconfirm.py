"""Key confirmation: proof that the parties hold the same linkage secret, without revealing it.

confirmation = HMAC-SHA256(K, "pprl.v1 key confirmation|" || run_id || "|" || parameters_digest)
with K = HKDF-SHA256(secret, salt="pprl.v1", info="pprl.v1 key confirmation", length=32).

Assumptions and sources: HKDF per RFC 5869 and HMAC per RFC 2104 (both from the ``cryptography``
package); the construction is key confirmation in the sense of NIST SP 800-56A rev. 3, section 5.9
(a MAC over public, run-specific data under a key derived from the shared secret). The derived key
is separate from every key the encoder derives (distinct HKDF info), so the confirmation value says
nothing about encoding keys; binding the run id and parameters digest makes values from one run
useless in another. The coordinator only compares values for equality; it cannot compute them.
A secret with low entropy could be brute-forced from a confirmation value: use 32 random bytes.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_SALT = b"pprl.v1"
_INFO = b"pprl.v1 key confirmation"


def key_confirmation(secret: bytes, run_id: str, parameters_digest: str) -> bytes:
    """The 32-byte confirmation value of ``secret`` for this run and parameters."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=_INFO).derive(secret)
    mac = hmac.HMAC(key, hashes.SHA256())
    mac.update(_INFO + b"|" + run_id.encode("utf-8") + b"|" + parameters_digest.encode("ascii"))
    return mac.finalize()
