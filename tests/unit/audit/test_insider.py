"""Insider segment attack: recovers planted values on unhardened filters, fails as segments shrink or
hardening is added; the vectorised consistency test equals a plain reference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from party.audit import insider
from party.audit.hardening_map import identity_map, probe_hardening
from party.audit.insider import build_dictionary, insider_attack
from party.encoding.bits import unpack_rows
from party.encoding.encoder import Encoder
from party.encoding.schema import parse_schema
from party.synthetic import generate

SECRET = b"audit-test-secret-0123456789abcdef"
FIELDS = ["given_name", "surname"]


def name_rows(n: int, seed: int = 5) -> list[dict[str, str]]:
    ds = generate(2, n, corruption=0.0, seed=seed)
    return list(ds.tables[0].rows())


def encoder_for(bits: int, **hardening: Any) -> Encoder:
    hd = {"xorFold": False, "balance": False, "blip": None, **hardening}
    schema = parse_schema(
        {
            "version": 1,
            "l": bits,
            "hashing": {"k": 20},
            "hardening": hd,
            "features": [{"identifier": f} for f in FIELDS],
        }
    )
    return Encoder(schema, SECRET, blip_rng=np.random.default_rng(1))


def attack(
    rows: list[dict[str, str]], enc: Encoder, parties: int, **kw: Any
) -> insider.InsiderResult:
    recs = enc.encode_rows(rows)
    hmap = probe_hardening(enc.harden, enc.schema.filter_bits, enc.schema.output_bits)
    return insider_attack(rows, recs.filters, enc, FIELDS, hmap, parties, **kw)


@pytest.fixture(scope="module")
def rows() -> list[dict[str, str]]:
    return name_rows(400)


def test_large_segments_lose_almost_every_name(rows: list[dict[str, str]]) -> None:
    # Published result: unhardened 1000-bit name filters, segments of 25-50% -> almost all names lost.
    for parties in (2, 4):
        res = attack(rows, encoder_for(1000), parties, include_full=False)
        for seg in res.segments:
            for name in FIELDS:
                assert seg.fields[name].top1.value > 0.9
                assert seg.fields[name].one_to_one.value > 0.8
            assert seg.record.one_to_one.value > 0.9
        assert res.targets == len(rows) and not res.sampled


def test_tiny_segments_lose_almost_none(rows: list[dict[str, str]]) -> None:
    # 2% segments (50 parties): no value is singled out one-to-one.
    res = attack(
        rows, encoder_for(1000), 50, include_full=True, max_targets=100, only_segments=range(5)
    )
    assert [s.segment for s in res.segments] == [0, 1, 2, 3, 4]
    worst = max(s.fields[f].one_to_one.value for s in res.segments for f in FIELDS)
    assert worst < 0.05
    assert res.sampled and res.targets == 100
    # the full filter (reference) still gives everything away
    assert res.full is not None and res.full.fields["surname"].one_to_one.value > 0.9


def test_hardening_defeats_or_does_not_defeat_the_attack(rows: list[dict[str, str]]) -> None:
    folded = attack(rows, encoder_for(1000, xorFold=True), 2, include_full=False)
    assert max(s.max_one_to_one() for s in folded.segments) == 0.0
    noisy = attack(rows, encoder_for(1000, blip={"flipProbability": 0.1}), 2, include_full=False)
    plain = attack(rows, encoder_for(1000), 2, include_full=False)
    assert max(s.max_one_to_one() for s in noisy.segments) < 0.5 * min(
        s.max_one_to_one() for s in plain.segments
    )
    # balancing is no protection against a key holder: the complement half reveals the same bits
    balanced = attack(rows, encoder_for(1000, balance=True), 2, include_full=False)
    assert min(s.max_one_to_one() for s in balanced.segments) > 0.8


def test_hardening_map_probe() -> None:
    assert identity_map(16).identity
    bal = encoder_for(64, balance=True)
    m = probe_hardening(bal.harden, 64, 128)
    assert m.affine and sorted(m.source.tolist()) == sorted(list(range(64)) * 2)
    assert int(m.inverted.sum()) == 64  # the complement half
    fold = encoder_for(64, xorFold=True)
    f = probe_hardening(fold.harden, 64, 32)
    assert f.affine and (f.source == -1).all() and f.influence.sum(axis=0).tolist() == [2] * 32
    nonlinear = probe_hardening(lambda r: r & (r >> np.uint64(1)), 64, 64)
    assert not nonlinear.affine and (nonlinear.source == -1).all()


class _Atoms:
    """A tiny attacker view with hand-made q-grams and atoms (no hashing)."""

    def __init__(self, table: Mapping[str, list[int]]) -> None:
        self.table = table

    def field_qgrams(
        self, field: str, value: str, row: Mapping[str, str] | None = None
    ) -> list[str]:
        return list(value)  # one "q-gram" per character

    def qgram_positions(self, field: str, qgram: str) -> np.ndarray:
        return np.asarray(self.table[qgram], dtype=np.int64)


def reference_consistent(
    d: insider.FieldDictionary, known0: np.ndarray, obs: np.ndarray
) -> np.ndarray:
    out = np.zeros((known0.shape[0], d.entries), dtype=bool)
    col = {int(p): i for i, p in enumerate(obs)}
    for r in range(known0.shape[0]):
        for e in range(d.entries):
            grams = d.entry_qgrams[d.entry_ptr[e] : d.entry_ptr[e + 1]]
            ok = True
            for g in grams:
                for p in d.qgram_positions[g]:
                    if int(p) in col and known0[r, col[int(p)]]:
                        ok = False
            out[r, e] = ok
    return out


@pytest.mark.parametrize("route", [None, "impossible", "possible", "dense"])
def test_consistency_routes_equal_reference(route: str | None) -> None:
    rng = np.random.default_rng(2)
    bits = 48
    letters = "abcdefghij"
    atoms = _Atoms({ch: sorted(rng.choice(bits, 3, replace=False).tolist()) for ch in letters})
    values = ["".join(rng.choice(list(letters), rng.integers(1, 5))) for _ in range(60)]
    rows = [{"f": v} for v in values]
    d = build_dictionary(atoms, "f", rows)
    filters_bits = rng.integers(0, 2, size=(30, bits), dtype=np.uint8)
    hmap = identity_map(bits)
    obs, _known1, known0 = insider._knowledge(filters_bits[:, 10:40], hmap, 10, 40)
    view = insider._field_view(d, obs, bits)
    got = insider._consistent(d, view, known0.astype(np.float32), route=route)
    assert np.array_equal(got, reference_consistent(d, known0, obs))


def attack_planted(
    atoms: _Atoms, rows: list[dict[str, str]]
) -> tuple[insider.InsiderResult, np.ndarray]:
    """Attack 16-bit filters made of the atoms of each row's fields f and g (2 segments, full too)."""
    from party.encoding.bits import rows_from_positions

    def positions(r: dict[str, str]) -> list[int]:
        return sorted({p for ch in r["f"] + r["g"] for p in atoms.table[ch]})

    filters = rows_from_positions([positions(r) for r in rows], 16)
    res = insider_attack(rows, filters, atoms, ["f", "g"], identity_map(16), 2, include_full=True)
    return res, filters


def test_whole_record_and_outcomes_on_planted_values() -> None:
    # two fields over disjoint atoms; a record is identified when its exact pair is the only match
    atoms = _Atoms({"a": [0, 1], "b": [2, 3], "c": [4, 5], "x": [8, 9], "y": [10, 11]})
    rows = [
        {"f": "ab", "g": "x"},
        {"f": "ab", "g": "y"},
        {"f": "c", "g": "x"},
        {"f": "abc", "g": "xy"},
    ]
    res, filters = attack_planted(atoms, rows)
    full = res.full
    assert full is not None
    # f: "ab" is consistent with "ab" and with... only values whose letters are all present
    # row 0 bits {a,b,x}: f candidates "ab" only (c absent) -> 1-1; g candidates "x" only
    # row 3 bits everything: f candidates ab, c, abc -> top-1 by matching bits = abc
    assert full.fields["f"].one_to_one.count == 3
    assert full.fields["f"].top1.count == 4
    assert full.fields["g"].one_to_one.count == 3
    assert full.record.one_to_one.count == 3 and full.record.top1.count == 4
    assert res.dictionary_entries == {"f": 3, "g": 3}
    # segment 0 holds positions 0..7 (only field f's atoms): g learns nothing there
    seg0 = res.segments[0]
    assert seg0.fields["g"].one_to_one.count == 0
    assert seg0.fields["f"].one_to_one.count == 3
    unpacked = unpack_rows(filters, 16)
    assert unpacked.shape == (4, 16)


def test_unhardened_filters_rebuilt_from_atoms_equal_the_encoder(
    rows: list[dict[str, str]],
) -> None:
    enc = encoder_for(1000)
    recs = enc.encode_rows(rows)
    dicts = [build_dictionary(enc, f, rows) for f in FIELDS]
    rebuilt = insider.unhardened_from_dictionaries(dicts, 1000)
    assert np.array_equal(rebuilt, recs.filters)
    folded = encoder_for(1000, xorFold=True)
    assert np.array_equal(folded.harden(rebuilt), folded.encode_rows(rows).filters)


def test_binomial_tolerance() -> None:
    t = insider.binomial_tolerance(np.array([0, 1, 7, 20]), None, 0.99)
    assert t.tolist() == [0, 0, 0, 0]
    t = insider.binomial_tolerance(np.array([0, 7, 7, 20]), 0.1, 0.99)
    # P(Bin(7, 0.1) <= 2) = 0.974 < 0.99 <= P(<= 3) = 0.997; P(Bin(20, 0.1) <= 4) = 0.957, <= 5: 0.989,
    # <= 6: 0.998
    assert t.tolist() == [0, 3, 3, 6]


def test_noise_aware_attack_sees_through_blip(rows: list[dict[str, str]]) -> None:
    enc = encoder_for(1000, blip={"flipProbability": 0.05})
    strict = attack(rows, enc, 4, include_full=False, only_segments=(0,))
    aware = attack(rows, enc, 4, include_full=False, only_segments=(0,), flip_probability=0.05)
    s, a = strict.segments[0], aware.segments[0]
    for name in FIELDS:
        assert a.fields[name].top1.value > 0.9
        assert a.fields[name].top1.value > s.fields[name].top1.value + 0.3


def test_external_values_extend_the_dictionary() -> None:
    atoms = _Atoms({ch: [i] for i, ch in enumerate("abcxyz")})
    rows = [{"f": "ab"}, {"f": "ab"}, {"f": ""}]
    d = build_dictionary(atoms, "f", rows, external_values=["xyz", "ab", "c"])
    assert d.entries == 3 and d.record_entry.tolist() == [0, 0, -1]


def test_top1_tie_between_the_true_value_and_another_is_not_a_reidentification() -> None:
    # Known answer with a tie: row 0's filter holds the atoms of "ab" (its value) and of "cd" (set by
    # its field g), so both f entries are consistent with the same score (4 known-set positions):
    # the attacker cannot pick the true one, and top-1 must not count it. Row 1 ("cd") is unique.
    atoms = _Atoms({"a": [0, 1], "b": [2, 3], "c": [4, 5], "d": [6, 7], "x": [8, 9]})
    rows = [{"f": "ab", "g": "cd"}, {"f": "cd", "g": "x"}]
    res, _ = attack_planted(atoms, rows)
    full = res.full
    assert full is not None
    f = full.fields["f"]
    assert (f.one_to_one.count, f.one_to_many.count, f.top1.count) == (1, 1, 1)
    # g of row 1: "x" (score 2) and "cd" (score 4, set by f) are consistent: "cd" ranks first, so the
    # true value is not top-1; row 0's g ("cd") is the only consistent entry.
    g = full.fields["g"]
    assert (g.one_to_one.count, g.top1.count) == (1, 1)
