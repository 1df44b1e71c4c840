"""Packed bit layout: slicing, segments, packing and serialisation against a plain-Python reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding import bits


def _ref_bits(positions: list[int], nbits: int) -> list[int]:
    out = [0] * nbits
    for p in positions:
        out[p] = 1
    return out


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_slice_and_segments_match_reference(data):
    parties = data.draw(st.integers(2, 7))
    width = data.draw(st.integers(1, 200))
    nbits = parties * width
    n = data.draw(st.integers(0, 5))
    positions = [
        sorted(set(data.draw(st.lists(st.integers(0, nbits - 1), max_size=nbits))))
        for _ in range(n)
    ]
    rows = bits.rows_from_positions(positions, nbits)
    bits.check_rows(rows, nbits)
    assert np.array_equal(bits.popcount_rows(rows), [len(p) for p in positions])
    plain = np.array([_ref_bits(p, nbits) for p in positions], dtype=np.uint8).reshape(n, nbits)
    assert np.array_equal(bits.unpack_rows(rows, nbits), plain)
    assert np.array_equal(bits.pack_rows(plain), rows)
    for j, seg in enumerate(bits.segments(rows, nbits, parties)):
        bits.check_rows(seg, width)
        assert np.array_equal(bits.unpack_rows(seg, width), plain[:, j * width : (j + 1) * width])
    assert np.array_equal(bits.rows_from_bytes(bits.rows_to_bytes(rows), nbits), rows)


def test_bit_order_is_lsb_first_little_endian():
    row = bits.rows_from_positions([[0, 9, 64]], 72)[0]
    assert bits.row_to_hex(row) == "0102000000000000" + "0100000000000000"
    assert np.array_equal(bits.row_from_hex(bits.row_to_hex(row), 72), row)


def test_segment_count_must_divide_length():
    with pytest.raises(bits.BitLayoutError, match="l=1024 is not divisible by .* P=3"):
        bits.segments(bits.empty_rows(1, 1024), 1024, 3)


def test_padding_bits_and_bad_payloads_are_rejected():
    rows = bits.empty_rows(1, 70)
    rows[0, 1] = np.uint64(1) << np.uint64(10)
    with pytest.raises(bits.BitLayoutError, match="beyond position 70"):
        bits.check_rows(rows, 70)
    with pytest.raises(bits.BitLayoutError, match="not a whole number"):
        bits.rows_from_bytes(b"\x00" * 12, 70)
    with pytest.raises(bits.BitLayoutError, match="out of range"):
        bits.rows_from_positions([[70]], 70)
