"""Generator: determinism, overlap and corruption shares, value formats, CSV output."""

import csv
import datetime as dt
import json
from collections import Counter

import numpy as np
import pytest

from party.synthetic import COLUMNS, GenerationError, generate, write_dataset


def _entity_parties(ds):
    seen: dict[int, set[int]] = {}
    for p, ents in enumerate(ds.truth.entity_ids):
        for e in ents.tolist():
            seen.setdefault(e, set()).add(p)
    return seen


def test_same_seed_same_data_different_seed_different_data():
    a = generate(3, 300, seed=7)
    b = generate(3, 300, seed=7)
    c = generate(3, 300, seed=8)
    for ta, tb in zip(a.tables, b.tables, strict=True):
        assert ta.columns == tb.columns
    for ea, eb in zip(a.truth.entity_ids, b.truth.entity_ids, strict=True):
        assert np.array_equal(ea, eb)
    assert a.tables[0].columns["surname"] != c.tables[0].columns["surname"]


@pytest.mark.parametrize(("parties", "n", "overlap"), [(3, 400, 0.5), (5, 200, 0.3), (2, 100, 1.0)])
def test_overlap_shares(parties, n, overlap):
    ds = generate(parties, n, overlap=overlap, corruption=0.0, seed=1)
    assert [len(t) for t in ds.tables] == [n] * parties
    where = _entity_parties(ds)
    counts = Counter(len(ps) for ps in where.values())
    common = round(overlap * n)
    assert counts[parties] == common
    assert counts[1] == parties * (n - common)
    assert set(counts) <= {1, parties}
    assert len(ds.truth.complete_entities()) == common
    # Each entity appears at most once per party.
    for ents in ds.truth.entity_ids:
        assert len(np.unique(ents)) == n


def test_no_corruption_means_identical_copies():
    ds = generate(3, 200, corruption=0.0, seed=3)
    rows = [{r["rec_id"]: r for r in t.rows()} for t in ds.tables]
    by_entity: dict[int, list[dict]] = {}
    for p, t in enumerate(ds.tables):
        for rid, e in zip(t.record_ids, ds.truth.entity_ids[p].tolist(), strict=True):
            r = dict(rows[p][rid])
            del r["rec_id"]
            by_entity.setdefault(e, []).append(r)
    for copies in by_entity.values():
        assert all(c == copies[0] for c in copies)
    assert all(not f.any() for f in ds.corrupted)


@pytest.mark.parametrize("corruption", [0.2, 0.4])
def test_corruption_share_and_parties(corruption):
    parties, n = 4, 500
    ds = generate(parties, n, corruption=corruption, seed=11)
    clean = generate(parties, n, corruption=0.0, seed=11)
    common = round(0.5 * n)
    assert ds.parameters["corrupted_entities"] == round(corruption * common)
    corrupted_at: dict[int, int] = Counter()
    for p in range(parties):
        ents = ds.truth.entity_ids[p]
        assert np.array_equal(ents, clean.truth.entity_ids[p])
        for i in range(n):
            changed = ds.tables[p].row(i) != clean.tables[p].row(i)
            # A row is flagged iff it differs from the clean copy; only common entities change.
            assert changed == bool(ds.corrupted[p][i])
            if changed:
                assert ents[i] < common
                corrupted_at[int(ents[i])] += 1
    assert len(corrupted_at) == round(corruption * common)
    # At least one copy of each entity stays clean: 1..P-1 corrupted copies.
    assert set(corrupted_at.values()) <= set(range(1, parties))


def test_value_formats():
    ds = generate(2, 500, seed=5)
    t = ds.tables[0]
    assert list(t.columns) == list(COLUMNS)
    assert len(set(t.record_ids)) == 500
    clean = np.flatnonzero(~ds.corrupted[0])
    for i in clean.tolist():
        r = t.row(i)
        assert r["sex"] in ("m", "f")
        d = dt.date.fromisoformat(r["dob"])
        assert dt.date(1930, 1, 1) <= d <= dt.date(2009, 12, 31)
        assert len(r["postcode"]) == 4 and r["postcode"].isdigit()
        assert r["street_address"].split(" ")[0].isdigit()
        assert r["given_name"] and r["surname"] and r["suburb"] and r["state"]
    # Zipf-like: the most common surname is much more common than the median one.
    freq = Counter(t.columns["surname"]).most_common()
    assert freq[0][1] > 5 * freq[len(freq) // 2][1]


def test_write_dataset(tmp_path):
    ds = generate(3, 50, seed=2)
    paths = write_dataset(ds, tmp_path / "out")
    assert [p.name for p in paths] == ["party-0.csv", "party-1.csv", "party-2.csv"]
    with paths[1].open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == list(COLUMNS)
    assert len(rows) == 51
    assert rows[1] == [ds.tables[1].row(0)[c] for c in COLUMNS]
    with (tmp_path / "out" / "truth.csv").open(newline="") as fh:
        truth = list(csv.DictReader(fh))
    assert len(truth) == 150
    first = truth[50]
    assert first["party"] == "1" and first["rec_id"] == ds.tables[1].record_ids[0]
    assert first["entity_id"] == f"e{int(ds.truth.entity_ids[1][0])}"
    meta = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert meta["parties"] == 3 and meta["seed"] == 2


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"parties": 1}, "parties"),
        ({"records_per_party": 0}, "records_per_party"),
        ({"overlap": 1.5}, "overlap"),
        ({"corruption": -0.1}, "corruption"),
        ({"max_errors": 0}, "max_errors"),
    ],
)
def test_bad_parameters(kwargs, needle):
    args = {"parties": 3, "records_per_party": 10} | kwargs
    with pytest.raises(GenerationError, match=needle):
        generate(**args)
