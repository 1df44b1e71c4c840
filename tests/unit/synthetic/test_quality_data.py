"""Households in the generator, blocking recall per pass, and the shared data options of the scripts."""

import argparse

import numpy as np
import pytest

from party.encoding.records import EncodedRecords
from party.synthetic import GenerationError, generate
from party.synthetic.blocking_recall import blocking_recall
from party.synthetic.generator import HOUSEHOLD_SHARED
from party.synthetic.simulation import add_data_arguments, count_parties, data_config
from party.synthetic.truth import truth_from_labels


def test_households_share_surname_and_whole_address():
    plain = generate(2, 400, seed=4)
    assert plain.parameters["households"] == 0.0
    same = generate(2, 400, seed=4, households=0.0)
    assert same.tables[0].columns == plain.tables[0].columns  # no households: data unchanged
    ds = generate(2, 400, seed=4, households=0.5)
    t = ds.tables[0]
    homes: dict[tuple[str, ...], set[str]] = {}
    for i in range(len(t)):
        key = tuple(t.columns[c][i] for c in HOUSEHOLD_SHARED)
        homes.setdefault(key, set()).add(t.columns["given_name"][i] + t.columns["dob"][i])
    shared_rows = sum(len(v) for v in homes.values() if len(v) > 1)
    plain_homes = {
        tuple(plain.tables[0].columns[c][i] for c in HOUSEHOLD_SHARED) for i in range(400)
    }
    # many people live with others, who differ in given name or date of birth
    assert shared_rows > 60
    assert len(homes) < len(plain_homes)
    assert generate(2, 400, seed=4, households=0.5).tables[0].columns == t.columns  # deterministic
    with pytest.raises(GenerationError, match="households must be in"):
        generate(2, 10, households=1.5)


def _table(digests: list[list[int]], prefix: str) -> EncodedRecords:
    n = len(digests)
    return EncodedRecords(
        tuple(f"{prefix}{i}" for i in range(n)),
        np.zeros((n, 1), dtype=np.uint64),
        64,
        np.asarray(digests, dtype=np.uint64).reshape(n, -1),
    )


def test_blocking_recall_known_answer():
    """Two passes, three parties; entity e0 shares pass 0, e1 pass 1, e2 no pass, e3 is at two
    parties only (no true set); a zero digest (no value) never matches, even with other zeros."""
    a = _table([[5, 7], [6, 8], [1, 9], [0, 0], [5, 2]], "a")
    b = _table([[5, 3], [4, 8], [1, 1], [0, 0]], "b")
    c = _table([[5, 4], [2, 8], [3, 9], [9, 9]], "c")
    labels: list[list[str | None]] = [
        ["e0", "e1", "e2", "e3", None],
        ["e0", "e1", "e2", "e3"],
        ["e0", "e1", "e2", None],
    ]
    truth = truth_from_labels([t.record_ids for t in (a, b, c)], labels)
    r = blocking_recall([a, b, c], truth)
    assert (r.true_sets, r.true_sets_kept, r.lost) == (3, 2, 1)
    assert r.lost_fraction == pytest.approx(1 / 3)
    p0, p1 = r.passes
    assert p0.true_sets_kept == 1 and p1.true_sets_kept == 1
    # pass 0: common blocks {5}: a has 2 records there, b 1, c 1 -> 2 candidate sets
    assert (p0.common_blocks, p0.candidate_sets, p0.records_in_common_blocks) == (1, 2, (2, 1, 1))
    # pass 1: common blocks {8}: 1 x 1 x 1 (9 is at a and c only)
    assert (p1.common_blocks, p1.candidate_sets, p1.records_in_common_blocks) == (1, 1, (1, 1, 1))
    assert r.candidate_sets == 3
    # pairs, pass 0: a-b share {5, 1}: 2*1 + 1*1; a-c {5}: 2*1; b-c {5}: 1*1 -> 6
    # pass 1: a-b {8}: 1; a-c {8, 9}: 1*1 + 1*2 (c holds 9 twice); b-c {8}: 1 -> 5
    assert (p0.candidate_pairs, p1.candidate_pairs, r.candidate_pairs) == (6, 5, 11)
    # each kept set is kept by one pass only: dropping either pass loses one set
    assert (p0.true_sets_only_here, p1.true_sets_only_here) == (1, 1)
    # e2: a-b share 1 (pass 0), a-c share 9 (pass 1), b-c nothing: connected through a
    assert r.true_sets_pair_connected == 3
    passes = r.as_dict()["passes"]
    assert isinstance(passes, list) and passes[0]["candidate_sets"] == 2


def test_data_options_map_to_the_simulation_config(tmp_path):
    ap = argparse.ArgumentParser()
    add_data_arguments(ap)
    defaults = data_config(ap.parse_args([]))
    assert defaults["one_to_one"] is True and defaults["data_dir"] is None
    assert count_parties(ap.parse_args([])) == 3
    for name in ("x.csv", "y.csv", "z.csv", "links.csv"):
        (tmp_path / name).write_text("rec_id\n1\n")
    args = ap.parse_args(
        [
            "--data",
            str(tmp_path),
            "--truth",
            "links.csv",
            "--truth-columns",
            "who",
            "src",
            "rid",
            "--no-one-to-one",
            "--households",
            "0.25",
        ]
    )
    cfg = data_config(args)
    assert cfg["truth_columns"] == ("who", "src", "rid") and cfg["one_to_one"] is False
    assert cfg["households"] == 0.25 and cfg["party_files"] is None
    assert count_parties(args) == 3  # x, y, z: every CSV but the truth file
    args = ap.parse_args(["--data", str(tmp_path), "--party-files", "z.csv", "x.csv"])
    assert count_parties(args) == 2 and data_config(args)["party_files"] == ("z.csv", "x.csv")


def test_true_set_dice_known_answer():
    """Full-filter P-way Dice of each true set: P * |AND| / sum of popcounts (0 for empty)."""
    from party.encoding.bits import pack_rows
    from party.synthetic.blocking_recall import true_set_dice

    def table(rows: list[list[int]], prefix: str) -> EncodedRecords:
        bits = np.zeros((len(rows), 8), dtype=np.uint8)
        for i, ones in enumerate(rows):
            bits[i, ones] = 1
        return EncodedRecords(
            tuple(f"{prefix}{i}" for i in range(len(rows))),
            pack_rows(bits),
            8,
            np.ones((len(rows), 1), dtype=np.uint64),
        )

    a = table([[0, 1, 2, 3], [], [5]], "a")
    b = table([[0, 1, 2, 7], [], [6, 7]], "b")
    labels: list[list[str | None]] = [["x", "y", "z"], ["x", "y", "z"]]
    truth = truth_from_labels([a.record_ids, b.record_ids], labels)
    d = true_set_dice([a, b], truth)
    assert d.tolist() == [2 * 3 / 8, 0.0, 0.0]  # a tie at 0 between an empty and a disjoint pair
