"""Keyed hashing: the shared secret, HKDF key derivation, and the q-gram -> bit-position schemes.

Key derivation. Every key is ``HKDF-SHA256(secret, salt=b"pprl-linkage/v1", info=...)`` (RFC 5869,
via the ``cryptography`` package) with ``info`` = ``"pprl/v1/<purpose>/<name>"`` in UTF-8, where
``purpose`` is one of ``field/<scheme>``, ``blocking``, ``blocking-prf``, ``balance`` and ``name`` is the field name,
blocking-key name or filter length. Different fields, schemes and purposes therefore use
independent keys, and nothing derived here reveals the secret (HKDF is a PRF in its secret).

Schemes (``l`` = filter length, ``k`` = the field's hash count, ``g`` = the q-gram in UTF-8):

``hmac-sha256-random`` (default). Random hashing: the k positions are drawn from the byte stream
``HMAC-SHA256(K, ctr_be32 || g)`` for ctr = 0, 1, ..., cut into big-endian 32-bit words; a word x
is used only if ``x < 2^32 - (2^32 mod l)`` (rejection sampling, so positions are uniform) and gives
position ``x mod l``. Positions are drawn with replacement. This avoids the linear structure
``g_i = h1 + i*h2`` of double hashing that the cryptanalysis of Niedermeyer et al. (2014) and of
Kroll & Steinmetzer (2015) exploits; see Schnell, Rukasz, Borgs et al. (2016) and clkhash's
``blakeHash`` for the same idea.

``hmac-sha256-double``. Double hashing (Schnell, Bachteler & Reiher 2009; Kirsch & Mitzenmacher
2006): ``d = HMAC-SHA256(K, g)``, ``h1 = int(d[0:8])``, ``h2 = int(d[8:16])`` (big-endian), positions
``(h1 + i*h2) mod l`` for i = 0..k-1. Kept for comparability with published CLK work; prefer random.

``mmh3-double``. Fast, explicitly weaker: MurmurHash3 x64-128 of g with a 32-bit seed derived by
HKDF, split into unsigned halves h1, h2, then double hashing as above. MurmurHash3 is not a keyed
PRF: there are seed-independent multicollisions (Aumasson & Bernstein 2012) and the seed space is
only 2^32, so an outsider who sees filters can search for the seed. Use it only when the parties
accept that the filters' secrecy rests on the segmentation and hardening alone.

Blocking digests (scheme ``sha256-aes256-cbcmac/1``, ``BLOCKING_DIGEST_SCHEME``; it enters the
schema digest so encodings made under another scheme are not mistaken for these). The key of
blocking key N is ``K = HKDF(secret, "blocking-prf", N)`` (32 bytes, AES-256). A part value v is
compressed to the 128-bit block ``X(v) = SHA-256(UTF-8 v)[0:16]``; a key of m parts has digest
``CBC-MAC_K(X(p_1), ..., X(p_m))`` (C_0 = 0, C_i = AES_K(C_{i-1} xor X(p_i))), an LSH band b with
value x has digest ``AES_K(b_le64 || x_le64)``; in both the digest is bytes 0-7 of the last
ciphertext block read little-endian, 0 mapped to 1 (0 means "no value"). Why this is a keyed
64-bit PRF like the HMAC-SHA256 it replaces: AES-256 is a pseudorandom permutation, hence a PRF
up to the switching bound q^2 / 2^129 for q queries; CBC-MAC over a fixed number of blocks (m is
fixed per blocking key) is a PRF (Bellare, Kilian & Rogaway 1994/2000); SHA-256 truncated to 128
bits is collision resistant (2^64 work), so PRF(X(.)) is a PRF on strings; the LSH blocks are
distinct inputs of one permutation. Distinct values collide in 64 bits with probability about
n^2 / 2^65, as before. Speed: SHA-256 runs once per distinct part value (memoised), and all AES
calls of a batch are one C call per part over every record, instead of one HMAC per record and key.

Speed. The encoder memoises q-gram -> positions, so HMACs are computed once per distinct q-gram;
stdlib ``hmac.digest`` (one-shot, OpenSSL-backed) is used here because it has far less per-call
overhead than ``cryptography``'s HMAC object. ``party.encoding.reference`` recomputes the same
positions with ``cryptography``'s HMAC, and the tests check that both agree.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from pathlib import Path

import mmh3
import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from party.encoding.secret import SecretError, secret_from_file_bytes

MIN_SECRET_BYTES = 16  # floor of the in-memory API; secret files need 32 (party.encoding.secret)
HKDF_SALT = b"pprl-linkage/v1"
_U32 = 1 << 32


def check_secret(secret: bytes, source: str = "secret") -> bytes:
    """Return ``secret`` if it is usable; raise SecretError otherwise."""
    if not isinstance(secret, bytes | bytearray):
        raise SecretError(f"{source}: the secret must be bytes")
    if len(secret) == 0:
        raise SecretError(f"{source}: the shared secret is empty")
    if len(secret) < MIN_SECRET_BYTES:
        raise SecretError(
            f"{source}: the shared secret has {len(secret)} bytes; at least "
            f"{MIN_SECRET_BYTES} are required (use e.g. 32 random bytes)"
        )
    return bytes(secret)


def load_secret(path: str | Path) -> bytes:
    """The key material of a secret file (secret_from_file_bytes)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise SecretError(f"secret file {p}: not found") from None
    except OSError as exc:
        raise SecretError(f"secret file {p}: cannot read ({exc.strerror})") from None
    return secret_from_file_bytes(data, f"secret file {p}")


def derive_key(secret: bytes, purpose: str, name: str, length: int = 32) -> bytes:
    """HKDF-SHA256 key for (purpose, name); see the module docstring for the exact inputs."""
    info = f"pprl/v1/{purpose}/{name}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=HKDF_SALT, info=info).derive(
        check_secret(secret)
    )


def field_key(secret: bytes, scheme: str, field: str) -> bytes:
    """Key (32 bytes) or seed material (4 bytes for mmh3) of one field under one scheme."""
    return derive_key(secret, f"field/{scheme}", field, 4 if scheme == "mmh3-double" else 32)


def random_positions(key: bytes, data: bytes, nbits: int, k: int) -> list[int]:
    """hmac-sha256-random: k uniform positions in [0, nbits) from an HMAC counter stream."""
    if k <= 0:
        return []
    limit = _U32 - (_U32 % nbits)
    out: list[int] = []
    ctr = 0
    while True:
        block = hmac.digest(key, ctr.to_bytes(4, "big") + data, "sha256")
        for j in range(0, 32, 4):
            x = int.from_bytes(block[j : j + 4], "big")
            if x < limit:
                out.append(x % nbits)
                if len(out) == k:
                    return out
        ctr += 1


def random_positions_rows(key: bytes, grams: Sequence[bytes], nbits: int, k: int) -> np.ndarray:
    """(len(grams), k) int64: row i is ``random_positions(key, grams[i], nbits, k)``. All the
    HMAC blocks the rows need without rejection are made in one pass and cut into words by numpy;
    a row that rejected too many words (only when nbits is not a power of two) is redone by
    ``random_positions``."""
    out = np.zeros((len(grams), k), dtype=np.int64)
    if k <= 0 or not grams:
        return out
    limit = _U32 - (_U32 % nbits)
    blocks = -(-k // 8)
    ctrs = [c.to_bytes(4, "big") for c in range(blocks)]
    digest = hmac.digest
    data = b"".join([digest(key, c + g, "sha256") for g in grams for c in ctrs])
    words = np.frombuffer(data, dtype=">u4").reshape(len(grams), 8 * blocks).astype(np.int64)
    if limit == _U32:
        return words[:, :k] % nbits
    ok = words < limit
    for i, enough in enumerate((ok.sum(axis=1) >= k).tolist()):
        if enough:
            out[i] = words[i][ok[i]][:k] % nbits
        else:
            out[i] = random_positions(key, grams[i], nbits, k)
    return out


def double_positions(h1: int, h2: int, nbits: int, k: int) -> list[int]:
    """Double hashing: (h1 + i*h2) mod nbits for i = 0..k-1."""
    return [(h1 + i * h2) % nbits for i in range(k)]


def hmac_double_positions(key: bytes, data: bytes, nbits: int, k: int) -> list[int]:
    d = hmac.digest(key, data, "sha256")
    return double_positions(int.from_bytes(d[0:8], "big"), int.from_bytes(d[8:16], "big"), nbits, k)


def mmh3_double_positions(seed_bytes: bytes, data: bytes, nbits: int, k: int) -> list[int]:
    # Keywords matter: mmh3 5.x ignores a positional ``signed`` argument and returns signed
    # halves, which would silently change every position (pinned by the known-answer vectors).
    h1, h2 = mmh3.hash64(data, seed=int.from_bytes(seed_bytes, "big"), x64arch=True, signed=False)
    return double_positions(h1, h2, nbits, k)


PositionFn = Callable[[bytes, bytes, int, int], list[int]]
SCHEME_FUNCTIONS: dict[str, PositionFn] = {
    "hmac-sha256-random": random_positions,
    "hmac-sha256-double": hmac_double_positions,
    "mmh3-double": mmh3_double_positions,
}


def keyed_stream_ints(key: bytes, bound: int, count: int, label: bytes) -> list[int]:
    """``count`` uniform integers in [0, bound) from HMAC-SHA256(key, label || ctr_be32) blocks,
    by rejection sampling of big-endian 32-bit words (same construction as random hashing)."""
    if bound <= 0 or bound > _U32:
        raise ValueError("bound out of range")
    limit = _U32 - (_U32 % bound)
    out: list[int] = []
    ctr = 0
    while len(out) < count:
        block = hmac.digest(key, label + ctr.to_bytes(4, "big"), "sha256")
        for j in range(0, 32, 4):
            x = int.from_bytes(block[j : j + 4], "big")
            if x < limit:
                out.append(x % bound)
                if len(out) == count:
                    break
        ctr += 1
    return out


def keyed_permutation(secret: bytes, nbits: int) -> list[int]:
    """The balancing permutation of [0, nbits): Fisher-Yates driven by a keyed HMAC stream.

    Assumption: HMAC-SHA256 under an HKDF-derived key is a PRF, so the permutation is
    indistinguishable from uniform to anyone without the secret (Knuth, TAOCP 3.4.2, Algorithm P).
    Output position i takes input bit perm[i].
    """
    return keyed_shuffle(derive_key(secret, "balance", str(nbits)), nbits)


def keyed_shuffle(key: bytes, n: int, label: bytes = b"fy") -> list[int]:
    """A permutation of [0, n): Fisher-Yates where step i draws j uniform in [0, i] as
    ``keyed_stream_ints(key, i + 1, 1, label || i_be32)`` (same assumption as keyed_permutation)."""
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        (j,) = keyed_stream_ints(key, i + 1, 1, label + i.to_bytes(4, "big"))
        perm[i], perm[j] = perm[j], perm[i]
    return perm


BLOCKING_DIGEST_SCHEME = "sha256-aes256-cbcmac/1"  # enters the schema digest (schema.to_dict)
_LE64 = np.dtype("<u8")


def blocking_prf_key(secret: bytes, name: str) -> bytes:
    """The AES-256 key of one blocking key's digests (purpose ``blocking-prf``, name = key name)."""
    return derive_key(secret, "blocking-prf", name)


def part_block(value: str) -> bytes:
    """X(value): the first 16 bytes of SHA-256 of the value's UTF-8."""
    return hashlib.sha256(value.encode("utf-8")).digest()[:16]


def value_blocks(values: Sequence[str]) -> np.ndarray:
    """(n, 2) little-endian uint64: the first 16 bytes of SHA-256 of each value's UTF-8, one
    128-bit block per value (a collision-resistant, unkeyed compression of a part value)."""
    buf = b"".join([part_block(v) for v in values])
    return np.frombuffer(buf, dtype=_LE64).reshape(len(values), 2)


def aes_blocks(key: bytes, blocks: np.ndarray) -> np.ndarray:
    """(n, 2) little-endian uint64: AES-256 (ECB, one call) of each 16-byte row of ``blocks``."""
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    data = np.ascontiguousarray(blocks, dtype=_LE64).reshape(-1)
    out = np.empty(data.size + 2, dtype=_LE64)  # update_into wants 15 spare bytes
    done = enc.update_into(data.view(np.uint8).data, out.view(np.uint8).data)
    enc.finalize()
    assert done == 8 * data.size
    return out[: data.size].reshape(-1, 2)


def _digest_words(first_words: np.ndarray) -> np.ndarray:
    d = first_words.astype(np.uint64)  # a writable copy in native order
    d[d == 0] = 1  # 0 means "no value"
    return d


def cbc_mac_digests(key: bytes, parts: Sequence[np.ndarray]) -> np.ndarray:
    """(n,) uint64 digests of n records whose m part values are given as m (n, 2) blocks
    (``value_blocks``): CBC-MAC with AES-256 over the m blocks (C = AES(C xor X_i), C_0 = 0),
    then the first 8 bytes of the last C read little-endian, 0 mapped to 1."""
    c = aes_blocks(key, parts[0])
    for x in parts[1:]:
        c = aes_blocks(key, c ^ x)
    return _digest_words(c[:, 0])


def lsh_band_digests(key: bytes, values: np.ndarray) -> np.ndarray:
    """(n, B) uint64 digests of (n, B) band values: AES-256 of the block (band index, value),
    both little-endian uint64, first 8 bytes read little-endian, 0 mapped to 1."""
    n, bands = values.shape
    blocks = np.empty((n, bands, 2), dtype=_LE64)
    blocks[:, :, 0] = np.arange(bands, dtype=np.uint64)
    blocks[:, :, 1] = values
    return _digest_words(aes_blocks(key, blocks.reshape(-1, 2))[:, 0]).reshape(n, bands)
