"""A short, slow reference encoder (one record at a time, plain Python) that the fast one must equal.

It shares only the schema, normalisation/q-gram splitting and HKDF key derivation with the fast
encoder; hashing (``cryptography``'s HMAC, ``mmh3``), bit setting, hardening, the balancing
permutation and blocking digests are written again here from the descriptions in
``party.encoding.hashing`` and ``party.encoding.encoder``. Bits are lists of 0/1 ints.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

import mmh3
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import hmac as chmac
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from party.encoding.blocking import part_function
from party.encoding.hashing import derive_key, field_key
from party.encoding.normalise import field_qgram_list
from party.encoding.schema import LinkageSchema


def _hmac(key: bytes, data: bytes) -> bytes:
    h = chmac.HMAC(key, hashes.SHA256())
    h.update(data)
    return h.finalize()


def _uniform(key: bytes, prefix: bytes, suffix: bytes, bound: int, count: int) -> list[int]:
    """``count`` values in [0, bound) from HMAC(key, prefix || ctr || suffix) 32-bit words."""
    limit = 2**32 - 2**32 % bound
    out: list[int] = []
    ctr = 0
    while len(out) < count:
        block = _hmac(key, prefix + ctr.to_bytes(4, "big") + suffix)
        words = [int.from_bytes(block[i : i + 4], "big") for i in range(0, 32, 4)]
        out.extend(w % bound for w in words if w < limit)
        ctr += 1
    return out[:count]


def ref_positions(scheme: str, key: bytes, gram: str, nbits: int, k: int) -> list[int]:
    data = gram.encode("utf-8")
    if scheme == "hmac-sha256-random":
        return _uniform(key, b"", data, nbits, k)
    if scheme == "hmac-sha256-double":
        d = _hmac(key, data)
        h1, h2 = int.from_bytes(d[:8], "big"), int.from_bytes(d[8:16], "big")
    elif scheme == "mmh3-double":
        h = mmh3.hash_bytes(data, int.from_bytes(key, "big"), True)
        h1, h2 = int.from_bytes(h[:8], "little"), int.from_bytes(h[8:], "little")
    else:
        raise ValueError(scheme)
    return [(h1 + i * h2) % nbits for i in range(k)]


def ref_permutation(
    secret: bytes, nbits: int, key: bytes | None = None, label: bytes = b"fy"
) -> list[int]:
    key = derive_key(secret, "balance", str(nbits)) if key is None else key
    perm = list(range(nbits))
    for i in range(nbits - 1, 0, -1):
        j = _uniform(key, label + i.to_bytes(4, "big"), b"", i + 1, 1)[0]
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def ref_status(schema: LinkageSchema, row: Mapping[str, str]) -> str:
    """'ok', or 'skip' when some field's missing/invalid policy skips the record ('error' too)."""
    for f in schema.fields:
        v = row[f.source_column]
        if v.strip() in [s.strip() for s in f.missing_sentinels]:
            if f.missing_policy != "empty":
                return "skip" if f.missing_policy == "skip" else "error"
            continue
        bad = (f.max_length is not None and len(v) > f.max_length) or (
            f.pattern is not None and not re.fullmatch(f.pattern, v.strip())
        )
        if bad:
            return "skip" if f.on_invalid == "skip" else "error"
    return "ok"


def _token_ks(bits_per_feature: int | None, k: int, tokens: int) -> list[int]:
    """clkhash's BitsPerFeatureStrategy: the budget spread over the tokens, the first get one more."""
    if bits_per_feature is None:
        return [k] * tokens
    return [
        bits_per_feature // tokens + (1 if i < bits_per_feature % tokens else 0)
        for i in range(tokens)
    ]


def ref_filter(
    schema: LinkageSchema,
    secret: bytes,
    row: Mapping[str, str],
    fields: tuple[str, ...] | None = None,
) -> list[int]:
    """The l-bit CLK of one record before hardening (assumes ref_status(row) == 'ok'), made of
    the listed fields only when ``fields`` is given."""
    nbits = schema.filter_bits
    out = [0] * nbits
    for f in schema.fields:
        if fields is not None and f.name not in fields:
            continue
        v = row[f.source_column]
        if v.strip() in [s.strip() for s in f.missing_sentinels]:
            continue
        key = field_key(secret, schema.hashing.scheme, f.name)
        salt = row.get(schema.column_of(f.salt_field), "") if f.salt_field else None
        grams = field_qgram_list(f, v, salt)
        for gram, k in zip(grams, _token_ks(f.bits_per_feature, f.k, len(grams)), strict=True):
            for p in ref_positions(schema.hashing.scheme, key, gram, nbits, k):
                out[p] = 1
    return out


def ref_harden(schema: LinkageSchema, secret: bytes, filt: list[int]) -> list[int]:
    out = list(filt)
    if schema.hardening.xor_fold:
        half = len(out) // 2
        out = [a ^ b for a, b in zip(out[:half], out[half:], strict=True)]
    if schema.hardening.balance:
        both = out + [1 - b for b in out]
        perm = ref_permutation(secret, len(both))
        out = [both[perm[i]] for i in range(len(both))]
    return out


def _aes(key: bytes, block: bytes) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(block) + enc.finalize()


def _digest_of_block(block: bytes) -> int:
    return int.from_bytes(block[:8], "little") or 1


def _cbc_mac(key: bytes, parts: list[str]) -> int:
    """CBC-MAC with AES-256 over the 16-byte blocks SHA-256(part)[0:16]."""
    c = bytes(16)
    for p in parts:
        x = hashlib.sha256(p.encode("utf-8")).digest()[:16]
        c = _aes(key, bytes(a ^ b for a, b in zip(c, x, strict=True)))
    return _digest_of_block(c)


def ref_block_digests(schema: LinkageSchema, secret: bytes, row: Mapping[str, str]) -> list[int]:
    if not schema.blocking:
        return [_cbc_mac(derive_key(secret, "blocking-prf", "*all-pairs*"), [""])]
    out = []
    for b in schema.blocking:
        prf_key = derive_key(secret, "blocking-prf", b.name)
        if b.lsh is not None:
            lsh = b.lsh
            filt = ref_filter(schema, secret, row, lsh.fields or None)
            key = derive_key(secret, "blocking", b.name)
            pos: list[int] = []
            rnd = 0
            while len(pos) < lsh.bands * lsh.bits_per_band:
                label = b"lsh" + rnd.to_bytes(4, "big")
                pos += ref_permutation(secret, schema.filter_bits, key, label)
                rnd += 1
            for band in range(lsh.bands):
                if not any(filt):
                    out.append(0)
                    continue
                chosen = pos[band * lsh.bits_per_band : (band + 1) * lsh.bits_per_band]
                value = sum(filt[p] << j for j, p in enumerate(chosen))
                block = band.to_bytes(8, "little") + value.to_bytes(8, "little")
                out.append(_digest_of_block(_aes(prf_key, block)))
            continue
        parts = [part_function(p, schema)(row[schema.column_of(p.field)]) for p in b.parts]
        out.append(_cbc_mac(prf_key, parts) if all(parts) else 0)
    return out


def ref_encode(schema: LinkageSchema, secret: bytes, row: Mapping[str, str]) -> list[int]:
    """The hardened output bits (no BLIP) of one record."""
    return ref_harden(schema, secret, ref_filter(schema, secret, row))
