"""The encoder's batch paths (many values per call) equal the per-value definitions they speed up,
on random text: ASCII (the fast paths), NUL (their separator), and non-ASCII (the fallbacks)."""

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from party.encoding import normalise as normalise_module
from party.encoding.blocking import (
    BlockingKeyer,
    part_function,
    part_values,
    phonetic_letters,
    phonetic_letters_many,
)
from party.encoding.encoder import _may_have_blank_lines
from party.encoding.hashing import SCHEME_FUNCTIONS, random_positions, random_positions_rows
from party.encoding.normalise import PAD, normalise, normalise_many, qgram_list
from party.encoding.schema import NormalisationSpec, parse_schema
from party.encoding.value_filters import GramStreams, gram_codes, or_stream_prefixes

ASCII = st.text(alphabet=st.characters(max_codepoint=127), max_size=12)
ANY = st.text(max_size=12)
VALUES = st.lists(st.one_of(ASCII, ANY), max_size=30)
WORDS = ["Smith", "O'Neil-Smyth", "9eorgia", "  ", "", "12a Queen St.", "Zoë", "Müller", "a\0b"]
WORDS += ["1987/05/03", "1987-05-3a", "a987-05-03", "19870-5-03", "1987 05 03", "2001.12.31"]
WORDS += [
    "1987-05-03",
    " 03/05/1987 ",
    "19870503",
    "١٩٨٧٠٥٠٣",
    "1987-٠٥-03",
    "12/1987/05 x",
    "1987\0",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(ASCII, max_size=30))
def test_phonetic_letters_many_equal_per_value_on_ascii(values: list[str]) -> None:
    assert phonetic_letters_many(values) == [phonetic_letters(v) for v in values]


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_phonetic_letters_many_equal_per_value(values: list[str]) -> None:
    assert phonetic_letters_many(values) == [phonetic_letters(v) for v in values]


def test_phonetic_letters_many_known_values() -> None:
    assert phonetic_letters_many(WORDS) == [phonetic_letters(v) for v in WORDS]
    assert phonetic_letters_many(["1234", "d'SSouza 4", "---"]) == ["lzea", "dssouzaa", ""]
    assert phonetic_letters_many([]) == []


SCHEMA = parse_schema(
    {
        "version": 1,
        "l": 128,
        "features": [
            {"identifier": "name"},
            {"identifier": "dob", "normalisation": {"punctuation": "remove"}},
        ],
        "blocking": [
            {
                "name": f"k{i}",
                "parts": [{"field": field, "function": fn, **({"length": 2} if ln else {})}],
            }
            for i, (field, fn, ln) in enumerate(
                [
                    ("name", "soundex", False),
                    ("name", "nysiis", False),
                    ("name", "metaphone", False),
                    ("name", "exact", False),
                    ("name", "prefix", True),
                    ("dob", "year", False),
                    ("dob", "day_month", False),
                    ("dob", "number", False),
                    ("other", "soundex", False),
                    ("other", "postcode_prefix", True),
                ]
            )
        ],
    }
)


@settings(max_examples=100, deadline=None)
@given(VALUES)
def test_part_values_equal_part_function(values: list[str]) -> None:
    values = values + WORDS
    for key in SCHEMA.blocking:
        (part,) = key.parts
        one = part_function(part, SCHEMA)
        assert part_values(part, SCHEMA)(values) == [one(v) for v in values], part.function


NORMALISATIONS = [
    NormalisationSpec(),
    NormalisationSpec(punctuation="space"),
    NormalisationSpec(whitespace="remove", punctuation="keep"),
    NormalisationSpec(whitespace="keep", case="none", nfkc=False),
    NormalisationSpec(case="lower", strip_accents=True),
    NormalisationSpec(case="upper", replacements=(("ph", "f"), ("  ", "_"))),
    NormalisationSpec(replacements=(("", "x"),)),  # the per-value path
]
SPACY = st.text(alphabet=st.sampled_from(list(" \t\x1c\x1f\xa0\u2003\u3000.-'aAzé\u0301ﬁΣς\0")))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(ASCII, ANY, SPACY), max_size=25))
def test_normalise_many_equal_per_value(values: list[str]) -> None:
    values = values + WORDS + ["", " ", "ΑΣ ", " Σ", "a\u0301", "\u0301"]
    for spec in NORMALISATIONS:
        assert normalise_many(values, spec) == [normalise(v, spec) for v in values], spec
    assert normalise_many([], NormalisationSpec()) == []


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.one_of(ASCII, ANY, SPACY), max_size=25),
    st.integers(1, 4),
    st.booleans(),
    st.booleans(),
)
def test_gram_codes_equal_qgram_list(values: list[str], q: int, padding: bool, pos: bool) -> None:
    values = values + ["a", "ab", "", "abcdefgh", "\U0010ffff\x00"]
    got = gram_codes(values, q, padding, pos, PAD)
    # declined (the string path) iff codes would not fit or "a" is one gram shorter than q
    declined = q == 4 or (q == 3 and pos) or (not padding and q > 1)
    assert (got is None) == declined
    if got is None:
        return
    want = [qgram_list(v, q, padding, pos) for v in values]
    assert got.counts.tolist() == [len(w) for w in want]
    assert [got.gram(c) for c in got.codes.tolist()] == [g for w in want for g in w]


def test_gram_codes_decline_what_does_not_fit() -> None:
    assert gram_codes(["abc"], 4, True, False, PAD) is None  # 84 bits
    assert gram_codes(["abc"], 3, True, True, PAD) is None  # no room for the index
    assert gram_codes(["a"], 2, False, False, PAD) is None  # one gram shorter than q
    assert gram_codes([], 2, True, False, PAD) is None


@pytest.mark.parametrize("budget", [None, 9, 300])
def test_value_rows_of_codes_equal_value_rows_of_strings(budget: int | None) -> None:
    fn = SCHEME_FUNCTIONS["hmac-sha256-random"]
    key = bytes(range(32))
    by_codes, by_strings = GramStreams(fn, key, 512), GramStreams(fn, key, 512)
    by_codes.MAX_GRAMS = 60  # forces resets part-way
    rng = random.Random(budget)
    for _call in range(6):  # memo state carries over between calls
        values = ["".join(rng.choice("abcé1 ") for _ in range(rng.randrange(9))) for _ in range(40)]
        for q, pos in [(2, False), (1, True), (3, False)]:
            codes = gram_codes(values, q, True, pos, PAD)
            assert codes is not None
            lists = [qgram_list(v, q, True, pos) for v in values]
            np.testing.assert_array_equal(
                by_codes.value_rows(codes, 4, budget), by_strings.value_rows(lists, 4, budget)
            )


@pytest.mark.parametrize("nbits", [1024, 1000, (1 << 31) + 1, 7])
@pytest.mark.parametrize("k", [1, 8, 9, 300])
def test_random_positions_rows_equal_random_positions(nbits: int, k: int) -> None:
    key = bytes(range(32))
    grams = [g.encode() for g in ["", "ab", "_a", "é", "0:1", "x" * 40]]
    got = random_positions_rows(key, grams, nbits, k)
    assert got.shape == (len(grams), k)
    assert got.tolist() == [random_positions(key, g, nbits, k) for g in grams]
    assert random_positions_rows(key, [], nbits, k).shape == (0, k)


@pytest.mark.parametrize("seed", range(4))
def test_or_stream_prefixes_equal_the_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nbits = [64, 130, 1024, 4000][seed]
    words = (nbits + 63) // 64
    table = rng.integers(0, nbits, (30, 50)).astype(np.int32)
    counts = rng.integers(0, 9, 200)
    counts[:3] = 0  # values without grams
    gids = rng.integers(0, 30, int(counts.sum()))
    ks = rng.integers(0, 51, gids.size)  # k = 0 sets nothing
    out = np.zeros((counts.size, words), dtype=np.uint64)
    out[5, 0] = 1 << 63  # existing bits are kept
    or_stream_prefixes(out, counts, gids, ks, table)
    want = [0] * counts.size
    want[5] = 1 << 63
    pair = 0
    for v, c in enumerate(counts.tolist()):
        for _ in range(c):
            for pos in table[gids[pair], : ks[pair]].tolist():
                want[v] |= 1 << pos
            pair += 1
    got = [int.from_bytes(row.astype("<u8").tobytes(), "little") for row in out]
    assert got == want
    empty = np.zeros((2, words), dtype=np.uint64)
    none = np.zeros(0, dtype=np.int64)
    or_stream_prefixes(empty, np.zeros(2, dtype=np.int64), none, none, table)
    assert not empty.any()


@pytest.mark.parametrize("limit", [3, 50, 200_000])
def test_shared_column_memos_equal_row_digests(limit: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys sharing columns and parts through one memo dict, across calls, memo resets (tiny
    limits) and repeated lists, give each row's own digest."""
    monkeypatch.setattr(BlockingKeyer, "MAX_CACHE", limit)
    schema = parse_schema(
        {
            "version": 1,
            "l": 128,
            "features": [{"identifier": "name"}, {"identifier": "dob"}],
            "blocking": [
                {"name": "a", "parts": [{"field": "name", "function": "soundex"}]},
                {
                    "name": "b",
                    "parts": [
                        {"field": "name", "function": "soundex"},
                        {"field": "dob", "function": "year"},
                    ],
                },
                {"name": "c", "parts": [{"field": "dob", "function": "exact"}]},
            ],
        }
    )
    secret = bytes(range(32))
    memos: dict[object, object] = {}
    keyers = [BlockingKeyer(b, schema, secret, memos) for b in schema.blocking]
    alone = [BlockingKeyer(b, schema, secret) for b in schema.blocking]
    rng = random.Random(limit)
    names = ["Smith", "Smyth", "", "Jones", "Zoë", "O'Neil", "12", "Li"]
    dobs = ["1987-05-03", "", "19870503", "2001-12-31", "n/a"]
    for _call in range(5):
        cols = {
            "name": [rng.choice(names) for _ in range(60)],
            "dob": [rng.choice(dobs) for _ in range(60)],
        }
        lists = {c: (list(dict.fromkeys(v)), v) for c, v in cols.items()}
        encoded = {
            c: (u, np.array([u.index(x) for x in v], dtype=np.int64)) for c, (u, v) in lists.items()
        }
        shared: dict[object, object] = {}
        for keyer, single in zip(keyers, alone, strict=True):
            parts = [encoded[c] for c in keyer.columns]
            got = keyer.column_digests(parts, shared=shared)  # type: ignore[arg-type]
            rows = zip(*(cols[c] for c in keyer.columns), strict=True)
            want = [single.digest(r) for r in rows]
            assert got.tolist() == want


@pytest.mark.parametrize("limit", [2, 7, 200_000])
def test_memoised_normaliser_many_across_calls_and_resets(
    limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(normalise_module, "MAX_MEMO", limit)
    spec = NormalisationSpec()
    memos: normalise_module.NormaliserMemos = {}
    many = normalise_module.memoised_normaliser_many(spec, memos)
    one = normalise_module.memoised_normaliser(spec, memos)
    rng = random.Random(limit)
    for _call in range(6):
        values = [rng.choice(WORDS) for _ in range(rng.randrange(12))]
        assert many(values) == [normalise(v, spec) for v in values]
        assert [one(v) for v in values] == [normalise(v, spec) for v in values]


@pytest.mark.parametrize("blank", [b"\n\n", b"\n\r\n"])
@pytest.mark.parametrize("shift", [-2, -1, 0, 1])
def test_blank_line_found_across_read_blocks(tmp_path: Path, blank: bytes, shift: int) -> None:
    block = 1 << 22  # the read size of _may_have_blank_lines
    path = tmp_path / "x.csv"
    path.write_bytes(b"a" * (block + shift) + blank + b"b\n")
    assert _may_have_blank_lines(path)
    path.write_bytes(b"a\n" * (block // 2 + 3))
    assert not _may_have_blank_lines(path)
