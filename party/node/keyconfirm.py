"""Key confirmation: proof that the parties hold the same linkage secret, without revealing it.

confirmation = HMAC-SHA256(K, "pprl.v1 key confirmation|" || run_id || "|" || parameters_digest)
with K = HKDF-SHA256(secret, salt="pprl.v1", info="pprl.v1 key confirmation", length=32).

Assumptions and sources: HKDF per RFC 5869 and HMAC per RFC 2104 (both from the ``cryptography``
package); the construction is key confirmation in the sense of NIST SP 800-56A rev. 3, section 5.9
(a MAC over public, run-specific data under a key derived from the shared secret). The derived key
is separate from every key the encoder derives (distinct HKDF info), so the confirmation value says
nothing about encoding keys; binding the run id and parameters digest makes values from one run
useless in another. The coordinator only compares values for equality; it cannot compute them. Parties do not rely on
that comparison: each also checks a directional value (``peer_confirmation``, MAC over run id,
digest, sender and receiver) that every co-party sends it with its first block-digest chunk.
A secret with low entropy could be brute-forced from a confirmation value: use 32 random bytes.
"""

from __future__ import annotations

from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_SALT = b"pprl.v1"
_INFO = b"pprl.v1 key confirmation"


def _mac(secret: bytes, message: bytes) -> bytes:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=_SALT, info=_INFO).derive(secret)
    mac = hmac.HMAC(key, hashes.SHA256())
    mac.update(_INFO + message)
    return mac.finalize()


def key_confirmation(secret: bytes, run_id: str, parameters_digest: str) -> bytes:
    """The 32-byte confirmation value of ``secret`` for this run and parameters."""
    return _mac(secret, b"|" + run_id.encode("utf-8") + b"|" + parameters_digest.encode("ascii"))


def peer_confirmation(
    secret: bytes, run_id: str, parameters_digest: str, sender: str, receiver: str
) -> bytes:
    """The 32-byte directional confirmation ``sender`` shows ``receiver`` (party to party).

    Same key as ``key_confirmation`` but the MAC also covers both identities, so the value a party
    sends a co-party differs from the one the coordinator sees at Propose (the coordinator cannot
    relay it) and from the one sent to any other co-party. The receiver recomputes it with its own
    secret and compares in constant time; equal values prove the sender holds the same secret,
    without trusting the coordinator's comparison.
    """
    return _mac(
        secret, b"|peer|" + "|".join((run_id, parameters_digest, sender, receiver)).encode()
    )
