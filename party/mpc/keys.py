"""Per-run PRF keys of the compute parties and the correlated randomness (zero shares) they yield.

Key setup (Araki et al., CCS 2016, section 2.2): for every run, compute party (CP) i draws a fresh
16-byte key k_i from the OS CSPRNG and sends it to CP (i + 2) % 3 over the mutually authenticated
channel, so CP i holds k_i (``own``) and k_{i+1} (``received``). Keys are never reused: each run
draws new ones, and ``ComputeKeys`` refuses two equal keys.

PRF. F(k, batch, round) is the AES-128-CTR keystream (``cryptography``) under key k with the
16-byte initial counter block ``batch (4 bytes, big-endian) || round (4 bytes, big-endian) || 0^8``;
the counter increments as a 128-bit big-endian integer, so distinct (batch, round) streams never
overlap (a stream would need 2^64 blocks to reach the next one). Zero sharing for an AND round:
alpha_i = F(k_i, .) ^ F(k_{i+1}, .); the three alphas XOR to zero and each is pseudorandom to
anyone missing one of the two keys (assumption: AES is a PRP; semi-honest, honest majority).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from party.mpc.errors import MpcError
from party.protocol.threads import run_split

KEY_BYTES = 16


def new_key() -> bytes:
    """A fresh PRF key from the OS CSPRNG (one per compute party and run)."""
    return os.urandom(KEY_BYTES)


def key_recipient(cp: int) -> int:
    """The compute party CP ``cp`` sends its own key to: (cp + 2) % 3."""
    if isinstance(cp, bool) or cp not in (0, 1, 2):
        raise MpcError(f"compute party index must be 0, 1 or 2, got {cp!r}")
    return (cp + 2) % 3


def counter_block(batch: int, round_number: int) -> bytes:
    """The initial AES-CTR counter block of the (batch, round) stream."""
    if not (0 <= batch < 2**32 and 0 <= round_number < 2**32):
        raise MpcError("batch and round numbers must fit in 32 bits")
    return batch.to_bytes(4, "big") + round_number.to_bytes(4, "big") + bytes(8)


@dataclass(frozen=True)
class ComputeKeys:
    """CP i's keys for one run: ``own`` = k_i, ``received`` = k_{i+1} (from CP i + 1)."""

    own: bytes
    received: bytes

    def __post_init__(self) -> None:
        for name in ("own", "received"):
            v = getattr(self, name)
            if not isinstance(v, bytes) or len(v) != KEY_BYTES:
                raise MpcError(f"compute key {name} must be {KEY_BYTES} bytes")
        if self.own == self.received:
            raise MpcError("the two compute keys are equal (a key was reused)")

    def __repr__(self) -> str:  # never print key material
        return "ComputeKeys(<hidden>)"


class ZeroShares:
    """alpha_i streams for one compute party: XOR of the own and received keys' keystreams.

    With ``workers`` > 1 a long stream is cut into ranges of whole AES blocks, each encrypted by
    its own CTR context started at the range's counter (the initial counter block plus the range's
    block offset, as a 128-bit big-endian integer) in a worker thread (the ``cryptography`` cipher
    releases the GIL): the same bytes as one context over the whole stream.
    """

    def __init__(self, keys: ComputeKeys, workers: int = 1) -> None:
        self._own = algorithms.AES(keys.own)
        self._received = algorithms.AES(keys.received)
        self._zeros = np.zeros(0, dtype=np.uint8)
        self._bufs = (np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64))
        self.workers = workers

    def streams(self, batch: int, round_number: int, words: int) -> tuple[np.ndarray, np.ndarray]:
        """F(k_i) and F(k_{i+1}) for (batch, round), ``words`` uint64 each; alpha_i is their XOR.

        The arrays are reused by the next call.
        """
        start = int.from_bytes(counter_block(batch, round_number), "big")
        if self._zeros.size < 8 * words:
            self._zeros = np.zeros(8 * words, dtype=np.uint8)
            self._bufs = (
                np.zeros(words + 2, dtype=np.uint64),
                np.zeros(words + 2, dtype=np.uint64),
            )
        own, received = self._bufs

        def fill(lo: int, hi: int) -> None:  # words [lo, hi), lo a multiple of 2 (one AES block)
            block = ((start + lo // 2) % 2**128).to_bytes(16, "big")
            nbytes = 8 * (hi - lo)
            for algorithm, target in ((self._own, own), (self._received, received)):
                enc = Cipher(algorithm, modes.CTR(block)).encryptor()
                # update_into wants room for one more block than it writes (CTR writes exactly
                # nbytes: the room past hi is not touched, so ranges may run side by side)
                n = enc.update_into(
                    self._zeros.data[:nbytes], target[lo : hi + 2].view(np.uint8).data
                )
                if n != nbytes:
                    raise MpcError("AES-CTR returned a short keystream")

        run_split(self.workers, words, fill, align=2)
        return own[:words], received[:words]

    def alpha(self, batch: int, round_number: int, words: int) -> np.ndarray:
        """alpha_i for (batch, round): ``words`` uint64 (a new array)."""
        own, received = self.streams(batch, round_number, words)
        return own ^ received


def keystream(key: bytes, batch: int, round_number: int, nbytes: int) -> bytes:
    """F(k, batch, round) truncated to ``nbytes`` (for tests and known-answer vectors)."""
    enc = Cipher(algorithms.AES(key), modes.CTR(counter_block(batch, round_number))).encryptor()
    return enc.update(bytes(nbytes)) + enc.finalize()
