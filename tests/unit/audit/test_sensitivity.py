"""Bit sensitivity on a hand-checked example, including an inverting (complement) hardening."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from party.audit.hardening_map import identity_map, probe_hardening
from party.audit.insider import build_dictionary
from party.audit.sensitivity import bit_sensitivity, per_segment
from party.encoding.bits import rows_from_positions


class _Atoms:
    table = {"a": [0, 1], "b": [1, 2], "c": [5]}

    def field_qgrams(
        self, field: str, value: str, row: Mapping[str, str] | None = None
    ) -> list[str]:
        return list(value)

    def qgram_positions(self, field: str, qgram: str) -> np.ndarray:
        return np.asarray(self.table[qgram], dtype=np.int64)


def test_counts_per_bit_and_segment() -> None:
    rows = [{"f": "a"}, {"f": "b"}, {"f": "ab"}, {"f": "c"}]
    d = build_dictionary(_Atoms(), "f", rows)
    filters = rows_from_positions([[0, 1], [1, 2], [0, 1, 2], [5]], 8)
    sens = bit_sensitivity([d], identity_map(8), filters)
    assert sens.qgrams.tolist() == [1, 2, 1, 0, 0, 1, 0, 0]
    assert sens.records.tolist() == [2, 3, 2, 0, 0, 1, 0, 0]
    assert sens.sensitivity.tolist() == [1, 2, 1, 0, 0, 1, 0, 0]
    seg0, seg1 = per_segment(sens, 2, k=2)
    assert (seg0.qgrams_min, seg0.records_min, seg0.sensitivity_min) == (0, 0, 0)
    assert seg0.single_qgram_bits.count == 3 and seg0.single_qgram_bits.total == 4
    assert seg0.low_sensitivity_bits.count == 3  # bits 0, 2, 3 have sensitivity < 2
    assert seg1.single_qgram_bits.count == 4


def test_inverted_bits_count_records_with_the_bit_unset() -> None:
    mask = np.uint64((1 << 8) - 1)

    def complement(r: np.ndarray) -> np.ndarray:
        return ~r & mask

    hmap = probe_hardening(complement, 8, 8)
    assert hmap.affine and hmap.inverted.all() and hmap.source.tolist() == list(range(8))
    rows = [{"f": "a"}, {"f": "b"}]
    d = build_dictionary(_Atoms(), "f", rows)
    revealed = complement(rows_from_positions([[0, 1], [1, 2]], 8))
    sens = bit_sensitivity([d], hmap, revealed)
    assert sens.records.tolist()[:3] == [1, 2, 1]
    assert sens.qgrams.tolist()[:3] == [1, 2, 1]
