"""Linkage secret files: the key material a secret file must hold, and refusing passphrases."""

from __future__ import annotations

import base64
import re

from party.errors import PprlError

MIN_KEY_BYTES = 32
MIN_DISTINCT_KEY_BYTES = 16
MIN_DISTINCT_BASE64_CHARS = 20  # 44 random base64 characters have about 31 distinct ones


class SecretError(PprlError, ValueError):
    """The shared secret is missing, unreadable, too short or guessable (never shown)."""


SECRET_FILE_RULE = (
    "a secret file must hold at least 32 random bytes (256 bits) of key material: hex (openssl "
    "rand -hex 32) or base64 (openssl rand -base64 32) text, or raw bytes (head -c 32 /dev/urandom; "
    "one trailing newline is dropped when 32 bytes remain); passphrases are refused"
)
_HEX_RE = re.compile(r"[0-9a-fA-F]+")
_B64_RE = re.compile(r"[A-Za-z0-9+/]+={0,2}|[A-Za-z0-9_-]+={0,2}")


def secret_from_file_bytes(data: bytes, source: str) -> bytes:
    """The key material of a secret file's bytes; SecretError (never showing them) otherwise.

    Why: the parties' key confirmation lets whoever sees it (the coordinator) test guesses of the
    secret offline at the cost of one HKDF and one HMAC per guess, so a guessable secret is a
    broken secret. We require 256 bits of key material instead of stretching a passphrase with a
    memory-hard KDF. Accepted forms:

    - text (UTF-8, printable, surrounding whitespace ignored) that is hex (64+ digits, both digits
      and letters) or base64 (standard or URL-safe alphabet, 44+ characters, both upper and lower
      case, at least 20 distinct characters) decodes to the key material; any other text is a
      passphrase and refused;
    - anything else is raw key material, one trailing newline removed when at least 32 bytes
      remain (an editor's newline after the key is dropped; a key whose own last byte is a
      newline, 1 draw in 256, is kept whole).

    The key material must have at least 32 bytes and at least 16 distinct byte values (32 random
    bytes have about 30; a repeated pattern such as "abab..." or "0000..." has few). These text
    heuristics catch typical passphrases, not every one: the secret must come from a CSPRNG.
    """
    text = _as_text(data)
    if text is None:
        key, form = _raw_key(data), "raw"
    elif _HEX_RE.fullmatch(text) and len(text) % 2 == 0:
        if not (re.search("[0-9]", text) and re.search("[a-fA-F]", text)):
            raise SecretError(
                f"{source}: the secret is too regular to be random; {SECRET_FILE_RULE}"
            )
        key, form = bytes.fromhex(text), "hex"
    elif _B64_RE.fullmatch(text) and len(text) % 4 == 0:
        mixed = re.search("[A-Z]", text) and re.search("[a-z]", text)
        if not mixed or len(set(text)) < MIN_DISTINCT_BASE64_CHARS:
            raise SecretError(f"{source}: the secret looks like a passphrase; {SECRET_FILE_RULE}")
        key = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
        form = "base64"
    else:
        raise SecretError(
            f"{source}: the secret is text that is neither hex nor base64 (a passphrase); "
            f"{SECRET_FILE_RULE}"
        )
    if len(key) < MIN_KEY_BYTES:
        raise SecretError(
            f"{source}: the secret ({form}) holds {len(key)} bytes of key material, fewer than "
            f"{MIN_KEY_BYTES}; {SECRET_FILE_RULE}"
        )
    if len(set(key)) < MIN_DISTINCT_KEY_BYTES:
        raise SecretError(f"{source}: the secret is too regular to be random; {SECRET_FILE_RULE}")
    return key


def _raw_key(data: bytes) -> bytes:
    """``data`` without its trailing CRLF or LF when at least 32 bytes remain, else whole.

    A text editor's newline after the key is dropped; 32 random bytes whose last is a newline
    (1 draw of ``head -c 32 /dev/urandom`` in 256) keep it as key material.
    """
    for end in (b"\r\n", b"\n"):
        if data.endswith(end) and len(data) - len(end) >= MIN_KEY_BYTES:
            return data[: -len(end)]
    if len(data) >= MIN_KEY_BYTES:
        return data
    return data.removesuffix(b"\r\n") if data.endswith(b"\r\n") else data.removesuffix(b"\n")


def _as_text(data: bytes) -> str | None:
    """The stripped text of ``data`` when it is printable UTF-8 text, else None."""
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None
    return text if text and text.isprintable() else None
