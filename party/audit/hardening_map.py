"""What each revealed bit says about the unhardened filter: the hardening as an affine map over GF(2).

The insider holds the linkage secret, so it can compute the deterministic hardening itself (XOR-folding,
balancing with the keyed permutation). Every such hardening is affine over GF(2): output bit o is
``c_o XOR (XOR of the input bits in S_o)``. We recover ``c`` and the sets ``S_o`` by probing the
encoder's own ``harden`` with the zero filter and with each unit filter, then check affinity on random
filters. An output bit with ``|S_o| = 1`` reveals one input bit exactly (directly, or inverted when
``c_o = 1``, as balancing's complement half does); an output with several sources (XOR-folding) is treated
as revealing nothing exactly, so the insider attack below is a lower bound on the risk for folded filters.
BLIP noise is random, not part of ``harden``: the attack sees it only as noise in the observed bits.

Assumption: ``harden`` is a pure function of its input rows (no randomness, no per-record state).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from party.encoding.bits import pack_rows, unpack_rows

log = logging.getLogger(__name__)

_AFFINITY_PROBES = 4


@dataclass(frozen=True)
class HardeningMap:
    """Per output bit: the single input bit it copies (or -1) and whether it is inverted."""

    input_bits: int
    output_bits: int
    source: np.ndarray  # (output_bits,) int64: input position copied, -1 if none or several
    inverted: np.ndarray  # (output_bits,) bool
    influence: np.ndarray = field(
        repr=False
    )  # (input_bits, output_bits) bool: input p affects output o
    affine: bool = True

    @property
    def identity(self) -> bool:
        return (
            self.input_bits == self.output_bits
            and bool(np.all(self.source == np.arange(self.output_bits)))
            and not bool(self.inverted.any())
        )


def identity_map(bits: int) -> HardeningMap:
    """No hardening: output bit p is input bit p."""
    return HardeningMap(
        input_bits=bits,
        output_bits=bits,
        source=np.arange(bits, dtype=np.int64),
        inverted=np.zeros(bits, dtype=bool),
        influence=np.eye(bits, dtype=bool),
    )


def probe_hardening(
    harden: Callable[[np.ndarray], np.ndarray] | None,
    input_bits: int,
    output_bits: int,
    *,
    seed: int = 0,
) -> HardeningMap:
    """Recover the hardening's affine map by probing ``harden`` (None: no hardening)."""
    if harden is None:
        if input_bits != output_bits:
            raise ValueError("without a harden function input and output lengths must be equal")
        return identity_map(input_bits)
    zero = np.zeros((1, input_bits), dtype=np.uint8)
    base = unpack_rows(harden(pack_rows(zero)), output_bits)[0].astype(bool)
    units = pack_rows(np.eye(input_bits, dtype=np.uint8))
    influence = unpack_rows(harden(units), output_bits).astype(bool) ^ base[None, :]
    rng = np.random.default_rng(seed)
    probes = rng.integers(0, 2, size=(_AFFINITY_PROBES, input_bits), dtype=np.uint8)
    got = unpack_rows(harden(pack_rows(probes)), output_bits).astype(bool)
    predicted = ((probes.astype(np.int64) @ influence.astype(np.int64)) % 2).astype(bool) ^ base
    affine = bool(np.array_equal(got, predicted))
    counts = influence.sum(axis=0)
    source = np.where(counts == 1, influence.argmax(axis=0), -1).astype(np.int64)
    if not affine:
        log.warning("hardening is not affine over GF(2); the insider attack reads no bit exactly")
        source[:] = -1
    return HardeningMap(
        input_bits=input_bits,
        output_bits=output_bits,
        source=source,
        inverted=base.copy(),
        influence=influence,
        affine=affine,
    )
