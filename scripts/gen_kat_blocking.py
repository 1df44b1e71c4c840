"""Write tests/data/kat_blocking.json: known answers for the blocking-digest scheme sha256-aes256-cbcmac/1.

    .venv/bin/python scripts/gen_kat_blocking.py            # (re)write the file
    .venv/bin/python scripts/gen_kat_blocking.py --check    # exit 1 if the file differs

Independent of the project (imports nothing from it), written from the definition in
docs/encoding.md and the party.encoding.hashing docstring: the key of blocking key N is
HKDF-SHA256(secret, salt "pprl-linkage/v1", info "pprl/v1/blocking-prf/N"), 32 bytes; a record's
parts p_1..p_m give CBC-MAC with AES-256 over the blocks SHA-256(UTF-8 p_i)[0:16] (C_0 = 0); an
LSH band b with value x gives AES-256(b as 8 little-endian bytes || x as 8 little-endian bytes);
the digest is bytes 0-7 of the last block read little-endian, with 0 mapped to 1. Boundary cases:
one, two and three parts, non-ASCII and U+001F inside a part, the all-pairs key, band values 0, 1,
2^63 and 2^64 - 1, band indices 0 and 63, part order (swapped parts differ).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "kat_blocking.json"
SECRET = bytes(range(100, 132))
PART_CASES: list[tuple[str, list[str]]] = [
    ("sdx", ["S530"]),
    ("exact_first", ["anne marie"]),
    ("exact_first", ["zoë"]),
    ("pre_yob", ["an", "1987"]),
    ("pre_yob", ["1987", "an"]),
    ("initials_yob", ["a", "o", "1987"]),
    ("joined", ["a\x1fb", "c"]),
    ("joined", ["a", "b\x1fc"]),
    ("*all-pairs*", [""]),
]
LSH_CASES: list[tuple[str, int, int]] = [
    ("lsh", 0, 0),
    ("lsh", 0, 1),
    ("lsh", 1, 1),
    ("lsh", 15, 2**63),
    ("lsh", 63, 2**64 - 1),
    ("lsh_first", 0, 0),
]


def key_of(name: str) -> bytes:
    info = f"pprl/v1/blocking-prf/{name}".encode()
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"pprl-linkage/v1", info=info).derive(
        SECRET
    )


def aes(key: bytes, block: bytes) -> bytes:
    enc = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(block) + enc.finalize()


def digest_of(block: bytes) -> int:
    return int.from_bytes(block[:8], "little") or 1


def parts_digest(name: str, parts: list[str]) -> int:
    c = bytes(16)
    for p in parts:
        x = hashlib.sha256(p.encode("utf-8")).digest()[:16]
        c = aes(key_of(name), bytes(a ^ b for a, b in zip(c, x, strict=True)))
    return digest_of(c)


def band_digest(name: str, band: int, value: int) -> int:
    return digest_of(aes(key_of(name), band.to_bytes(8, "little") + value.to_bytes(8, "little")))


def build() -> dict[str, Any]:
    return {
        "about": "Blocking digests, scheme sha256-aes256-cbcmac/1; see scripts/gen_kat_blocking.py. "
        "Digests are decimal u64.",
        "scheme": "sha256-aes256-cbcmac/1",
        "secret_hex": SECRET.hex(),
        "keys": {n: key_of(n).hex() for n in sorted({c[0] for c in PART_CASES + LSH_CASES})},
        "parts": [
            {"name": n, "parts": p, "digest": str(parts_digest(n, p))} for n, p in PART_CASES
        ],
        "lsh": [
            {"name": n, "band": b, "value": str(v), "digest": str(band_digest(n, b, v))}
            for n, b, v in LSH_CASES
        ],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    args = ap.parse_args()
    text = json.dumps(build(), indent=1, ensure_ascii=False) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'up to date' if same else 'DIFFERS'}")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
