"""External dataset loader: a good dataset round-trips; each kind of bad input names the problem."""

from typing import Any

import numpy as np
import pytest

from party.synthetic import DatasetError, generate, load, load_folder, write_dataset


@pytest.fixture
def folder(tmp_path):
    ds = generate(3, 40, seed=6)
    write_dataset(ds, tmp_path)
    return tmp_path, ds


def test_round_trip_of_generated_dataset(folder):
    path, ds = folder
    ext = load_folder(path, required_columns=["given_name", "dob"])
    assert ext.parties == 3
    assert ext.columns[0][0] == "rec_id"
    assert ext.truth.record_ids == ds.truth.record_ids
    assert len(ext.truth.complete_entities()) == len(ds.truth.complete_entities())
    # Same partition into entities (codes may differ).
    for p in range(3):
        a, b = ext.truth.entity_ids[p], ds.truth.entity_ids[p]
        assert len(np.unique(a)) == len(np.unique(b))


def test_party_named_by_file_stem_and_unlisted_records(tmp_path):
    (tmp_path / "a.csv").write_text("id,name\n1,x\n2,y\n")
    (tmp_path / "b.csv").write_text("id,name\n7,x\n8,z\n")
    (tmp_path / "t.csv").write_text("entity_id,party,rec_id\nE1,a,1\nE1,b,7\n")
    ext = load([tmp_path / "a.csv", tmp_path / "b.csv"], tmp_path / "t.csv", id_column="id")
    assert ext.truth.entity_ids[0].tolist() == [0, -1]
    assert ext.truth.complete_entities().tolist() == [0]


def _write(tmp_path, data=None, truth=None):
    files = []
    for i, text in enumerate(data or ["rec_id,name\n1,x\n2,y\n", "rec_id,name\n3,x\n"]):
        f = tmp_path / f"p{i}.csv"
        f.write_text(text)
        files.append(f)
    t = tmp_path / "truth.csv"
    t.write_text(truth if truth is not None else "entity_id,party,rec_id\nE,0,1\nE,1,3\n")
    return files, t


@pytest.mark.parametrize(
    ("data", "truth", "kwargs", "needle"),
    [
        (["name\nx\n", "rec_id,name\n3,x\n"], None, {}, r"p0.csv: missing column\(s\) rec_id"),
        (None, None, {"required_columns": ["dob"]}, r"missing column\(s\) dob"),
        (["rec_id,name\n1,x\n1,y\n", "rec_id,name\n3,x\n"], None, {}, "row 3: duplicate rec_id"),
        (["rec_id,name\n1,x,extra\n", "rec_id,name\n3,x\n"], None, {}, "row 2: 3 fields"),
        (["", "rec_id,name\n3,x\n"], None, {}, "empty file"),
        (None, "entity_id,rec_id\nE,1\n", {}, r"truth.csv: missing column\(s\) party"),
        (None, "entity_id,party,rec_id\nE,0,99\n", {}, "truth.csv row 2: rec_id is not in p0.csv"),
        (None, "entity_id,party,rec_id\nE,5,1\n", {}, "row 2: party is neither"),
        (None, "entity_id,party,rec_id\nE,0,1\nF,0,1\n", {}, "row 3: record listed twice"),
        (None, "entity_id,party,rec_id\n,0,1\n", {}, "row 2: empty entity_id"),
    ],
)
def test_errors_name_the_problem(tmp_path, data, truth, kwargs, needle):
    files, t = _write(tmp_path, data, truth)
    with pytest.raises(DatasetError, match=needle):
        load(files, t, **kwargs)


def test_value_never_in_message(tmp_path):
    files, t = _write(tmp_path, truth="entity_id,party,rec_id\nE,0,secretvalue\n")
    with pytest.raises(DatasetError) as err:
        load(files, t)
    assert "secretvalue" not in str(err.value)


def test_missing_files(tmp_path):
    files, t = _write(tmp_path)
    with pytest.raises(DatasetError, match="cannot read data file"):
        load([files[0], tmp_path / "nope.csv"], t)
    with pytest.raises(DatasetError, match="cannot read truth file"):
        load(files, tmp_path / "nope.csv")
    with pytest.raises(DatasetError, match="at least 2"):
        load(files[:1], t)
    with pytest.raises(DatasetError, match="does not exist"):
        load_folder(tmp_path / "nothing")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "only.csv").write_text("rec_id\n1\n")
    with pytest.raises(DatasetError, match="found 1 party CSV"):
        load_folder(empty)
    with pytest.raises(DatasetError, match="party file .*nope.csv does not exist"):
        load_folder(empty, party_files=["only.csv", "nope.csv"])
    (empty / "other.csv").write_text("rec_id\n1\n")
    with pytest.raises(DatasetError, match="truth file .*truth.csv does not exist"):
        load_folder(empty)


def test_folder_of_any_csv_names_with_named_truth_columns(tmp_path):
    """A user's own folder: arbitrary file names, a truth file with its own column names."""
    (tmp_path / "hospital_b.csv").write_text("pid,name\nb1,x\nb2,y\n")
    (tmp_path / "hospital_a.csv").write_text("pid,name\na1,x\na2,z\n")
    (tmp_path / "links.csv").write_text(
        "person,source,record\nP1,hospital_a,a1\nP1,hospital_b,b1\n"
    )
    kwargs: dict[str, Any] = {
        "truth_file": "links.csv",
        "id_column": "pid",
        "truth_columns": ("person", "source", "record"),
    }
    ext = load_folder(tmp_path, **kwargs)  # files found: every CSV but the truth file, by name
    assert [p.name for p in ext.data_files] == ["hospital_a.csv", "hospital_b.csv"]
    assert ext.truth.complete_entities().size == 1
    ordered = load_folder(tmp_path, party_files=["hospital_b.csv", "hospital_a.csv"], **kwargs)
    assert [p.name for p in ordered.data_files] == ["hospital_b.csv", "hospital_a.csv"]
    assert ordered.truth.record_ids[0] == ("b1", "b2")
    with pytest.raises(DatasetError, match="listed more than once"):
        load_folder(tmp_path, party_files=["hospital_a.csv", "hospital_a.csv"], **kwargs)
