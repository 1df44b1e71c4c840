"""Bit sensitivity: per revealed bit, how many distinct q-grams and how many records set it.

Following Durham et al.'s analysis of Bloom-filter bit positions (Durham, Kantarcioglu, Xue, Toth, Kuzu
and Malin, "Composite Bloom filters for secure record linkage", IEEE TKDE 26(12), 2014): a bit that few
distinct q-grams map to tells an attacker which q-gram is present, and a bit that few records set points
at those few records. A bit's *sensitivity* here is the minimum of the two counts; small is bad.

Definitions (in the revealed, hardened bit space, so they apply to exactly what a co-party receives):

- ``qgrams[o]``: distinct (field, q-gram) pairs of the party's data whose atom positions influence
  output bit o (through the hardening map; for unhardened filters, the q-grams hashing to o).
- ``records[o]``: records whose revealed bit o carries a set input bit: bit o is 1, or 0 for an
  inverted (balancing complement) bit.
- ``sensitivity[o] = min(qgrams[o], records[o])``.

Per segment we report the distribution (min, 5th percentile, median, mean) of each count and the share
of bits set by at most one q-gram or with sensitivity below k.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from party.audit.hardening_map import HardeningMap
from party.audit.insider import FieldDictionary
from party.audit.stats import Rate
from party.audit.uniqueness import DEFAULT_K
from party.encoding.bits import check_rows, popcount_rows, segment_bounds, unpack_rows


@dataclass(frozen=True)
class BitSensitivity:
    """Per revealed bit counts."""

    qgrams: np.ndarray = field(repr=False)  # (output_bits,) int64
    records: np.ndarray = field(repr=False)  # (output_bits,) int64

    @property
    def sensitivity(self) -> np.ndarray:
        return np.minimum(self.qgrams, self.records)


@dataclass(frozen=True)
class SegmentSensitivity:
    segment: int
    start: int
    stop: int
    qgrams_min: int
    qgrams_p5: float
    qgrams_median: float
    records_min: int
    records_median: float
    sensitivity_min: int
    sensitivity_median: float
    single_qgram_bits: Rate  # bits influenced by at most one q-gram
    low_sensitivity_bits: Rate  # bits with sensitivity < k

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            k: getattr(self, k)
            for k in (
                "segment",
                "start",
                "stop",
                "qgrams_min",
                "qgrams_p5",
                "qgrams_median",
                "records_min",
                "records_median",
                "sensitivity_min",
                "sensitivity_median",
            )
        }
        d["single_qgram_bits"] = self.single_qgram_bits.to_dict()
        d["low_sensitivity_bits"] = self.low_sensitivity_bits.to_dict()
        return d


def bit_sensitivity(
    dicts: Sequence[FieldDictionary], hmap: HardeningMap, filters: np.ndarray
) -> BitSensitivity:
    """Distinct q-grams and records per revealed bit (see the module docstring)."""
    check_rows(filters, hmap.output_bits)
    inp, outp = np.nonzero(hmap.influence)  # sorted by input position
    ptr = np.zeros(hmap.input_bits + 1, dtype=np.int64)
    np.cumsum(np.bincount(inp, minlength=hmap.input_bits), out=ptr[1:])
    qcount = np.zeros(hmap.output_bits, dtype=np.int64)
    for d in dicts:
        if not d.qgram_positions:
            continue
        lens = np.fromiter((p.size for p in d.qgram_positions), dtype=np.int64)
        g = np.repeat(np.arange(lens.size, dtype=np.int64), lens)
        p = np.concatenate(d.qgram_positions).astype(np.int64)
        keep = p < hmap.input_bits
        g, p = g[keep], p[keep]
        olens = ptr[p + 1] - ptr[p]
        gg = np.repeat(g, olens)
        starts = np.repeat(ptr[p] - (np.cumsum(olens) - olens), olens)
        oo = outp[starts + np.arange(int(olens.sum()), dtype=np.int64)]
        pairs = np.unique(gg * hmap.output_bits + oo)
        qcount += np.bincount(pairs % hmap.output_bits, minlength=hmap.output_bits)
    n = filters.shape[0]
    ones = np.zeros(hmap.output_bits, dtype=np.int64)
    step = 4096
    for lo in range(0, n, step):
        ones += unpack_rows(filters[lo : lo + step], hmap.output_bits).sum(axis=0, dtype=np.int64)
    records = np.where(hmap.inverted, n - ones, ones)
    return BitSensitivity(qcount, records)


def per_segment(
    sens: BitSensitivity, parties: int, *, k: int = DEFAULT_K
) -> tuple[SegmentSensitivity, ...]:
    """Summaries of the bit counts over each segment's bit range."""
    out = []
    s_all = sens.sensitivity
    for j, (a, b) in enumerate(segment_bounds(sens.qgrams.size, parties)):
        q = sens.qgrams[a:b]
        r = sens.records[a:b]
        s = s_all[a:b]
        width = b - a
        out.append(
            SegmentSensitivity(
                segment=j,
                start=a,
                stop=b,
                qgrams_min=int(q.min()),
                qgrams_p5=float(np.percentile(q, 5)),
                qgrams_median=float(np.median(q)),
                records_min=int(r.min()),
                records_median=float(np.median(r)),
                sensitivity_min=int(s.min()),
                sensitivity_median=float(np.median(s)),
                single_qgram_bits=Rate(int(np.count_nonzero(q <= 1)), width),
                low_sensitivity_bits=Rate(int(np.count_nonzero(s < k)), width),
            )
        )
    return tuple(out)


def fill_of(filters: np.ndarray, nbits: int) -> float:
    """Mean share of set bits (for the report)."""
    if filters.shape[0] == 0:
        return 0.0
    return float(popcount_rows(filters).mean() / nbits)
