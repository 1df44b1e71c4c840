"""party/encoding/secret.py: 256 bits of key material from a secret file; passphrases refused."""

from __future__ import annotations

import base64

import pytest

from party.encoding.secret import SecretError, secret_from_file_bytes

KEY = bytes.fromhex("9b1e5f03c7a24d68e0f3b1975a2c8d4e6f01a3b5c7d9e2f40618a3c5e7092b4d")


@pytest.mark.parametrize(
    "content",
    [
        KEY,
        KEY + b"\n",
        KEY + b"\r\n",
        KEY.hex().encode(),
        KEY.hex().upper().encode() + b"\n",
        b"  " + base64.b64encode(KEY) + b"\n",
        base64.urlsafe_b64encode(KEY),
    ],
)
def test_raw_hex_and_base64_give_the_same_key_material(content: bytes) -> None:
    assert secret_from_file_bytes(content, "data.secret_file") == KEY


@pytest.mark.parametrize(
    "content", [KEY[:31] + b"\n", KEY[:30] + b"\r\n", KEY[:31] + b"\n\n", KEY[:31] + b"\r\n"]
)
def test_raw_bytes_ending_in_a_newline_keep_32_bytes_of_key_material(content: bytes) -> None:
    # head -c 32 /dev/urandom ends in a newline byte once in 256 draws: that byte is key material
    # when dropping it would leave fewer than 32; an editor's newline after 32 bytes is dropped.
    expected = content if len(content) == 32 else content[:32]
    assert secret_from_file_bytes(content, "data.secret_file") == expected


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"passwordpassword", "passphrase"),  # 16 bytes passed the old minimum
        (b"correct horse battery staple is long enough\n", "passphrase"),
        (b"passwordpasswordpasswordpasswordpasswordpass", "passphrase"),  # base64 alphabet
        (b"integration-test-linkage-secret-0123456789abcdef", "passphrase"),
        (KEY[:31], "holds 31 bytes of key material"),
        (KEY[:30] + b"\n", "holds 30 bytes of key material"),
        (KEY.hex()[:62].encode(), "(hex) holds 31 bytes"),
        (base64.b64encode(KEY[:24]), "(base64) holds 24 bytes"),
        (b"\x01\x02" * 16, "too regular"),
        (b"ab" * 32, "too regular"),  # hex of a repeated byte pattern
        (b"1" * 64, "too regular"),
        (b"", "holds 0 bytes"),
    ],
)
def test_weak_or_short_secrets_are_refused_without_echo(content: bytes, words: str) -> None:
    with pytest.raises(SecretError, match=words.replace("(", r"\(").replace(")", r"\)")) as info:
        secret_from_file_bytes(content, "data.secret_file")
    message = str(info.value)
    assert "data.secret_file" in message and "32 random bytes" in message
    if len(content) >= 8:
        assert content.decode("latin-1")[:8] not in message
