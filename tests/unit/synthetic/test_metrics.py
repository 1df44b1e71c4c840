"""Quality metrics on hand-made cases, and reading matches.csv."""

import pytest

from party.synthetic import (
    MatchEntry,
    MetricsError,
    evaluate,
    evaluate_files,
    evaluate_index_sets,
    truth_from_labels,
)

# Three parties; entities A, B, C at all parties, D only at parties 0 and 1, E only at party 2.
TRUTH = truth_from_labels(
    [["a0", "b0", "c0", "d0"], ["a1", "b1", "c1", "d1"], ["a2", "b2", "c2", "e2"]],
    [["A", "B", "C", "D"], ["A", "B", "C", "D"], ["A", "B", "C", "E"]],
)


def _m(*rows):
    return [MatchEntry(lid, 0.9, rid) for lid, rid in rows]


def test_perfect():
    q = evaluate(
        [
            _m(("1", "a0"), ("2", "b0"), ("3", "c0")),
            _m(("1", "a1"), ("2", "b1"), ("3", "c1")),
            _m(("1", "a2"), ("2", "b2"), ("3", "c2")),
        ],
        TRUTH,
    )
    assert (q.matched_sets, q.correct_sets, q.true_sets) == (3, 3, 3)
    assert q.precision == q.recall == q.f1 == 1.0


def test_mixed_set_is_wrong_and_missed_entity_lowers_recall():
    # Set 1 correct (A); set 2 mixes B and C; C never found; D+E set wrong.
    q = evaluate(
        [
            _m(("1", "a0"), ("2", "b0"), ("9", "d0")),
            _m(("1", "a1"), ("2", "b1"), ("9", "d1")),
            _m(("1", "a2"), ("2", "c2"), ("9", "e2")),
        ],
        TRUTH,
    )
    assert (q.matched_sets, q.correct_sets, q.found_entities) == (3, 1, 1)
    assert q.precision == pytest.approx(1 / 3)
    assert q.recall == pytest.approx(1 / 3)
    assert q.f1 == pytest.approx(1 / 3)


def test_incomplete_set_is_wrong():
    q = evaluate([_m(("1", "a0")), _m(("1", "a1")), []], TRUTH)
    assert (q.matched_sets, q.correct_sets) == (1, 0)
    assert q.precision == 0.0 and q.recall == 0.0 and q.f1 == 0.0


def test_duplicate_correct_sets_count_once_for_recall():
    truth = truth_from_labels([["x", "y"], ["z"]], [["A", "A"], ["A"]])
    q = evaluate([_m(("1", "x"), ("2", "y")), _m(("1", "z"), ("2", "z"))], truth)
    assert (q.matched_sets, q.correct_sets, q.found_entities, q.true_sets) == (2, 2, 1, 1)
    assert q.precision == 1.0 and q.recall == 1.0


def test_nothing_matched():
    q = evaluate([[], [], []], TRUTH)
    assert q.precision == 1.0 and q.recall == 0.0 and q.f1 == 0.0


def test_mappings_and_index_sets():
    rows = [[{"linkage_id": "L", "record_id": f"a{p}"}] for p in range(3)]
    assert evaluate(rows, TRUTH).correct_sets == 1
    q = evaluate_index_sets([(0, 0, 0), (1, 2, 1)], TRUTH)
    assert (q.matched_sets, q.correct_sets) == (2, 1)


def test_errors():
    with pytest.raises(MetricsError, match="2 parties"):
        evaluate([[], []], TRUTH)
    with pytest.raises(MetricsError, match="party 1's matches is not in"):
        evaluate([_m(("1", "a0")), _m(("1", "zzz")), []], TRUTH)


def test_read_files(tmp_path):
    paths = []
    for p in range(3):
        path = tmp_path / f"m{p}.csv"
        path.write_text(f"linkage_id,similarity,record_id\nL1,0.95,a{p}\nL2,0.85,b{p}\n")
        paths.append(path)
    q = evaluate_files(paths, TRUTH)
    assert (q.correct_sets, q.recall) == (2, pytest.approx(2 / 3))
    bad = tmp_path / "bad.csv"
    bad.write_text("linkage_id,record_id\nL1,a0\n")
    with pytest.raises(MetricsError, match="missing column"):
        evaluate_files([bad, paths[1], paths[2]], TRUTH)
    bad.write_text("linkage_id,similarity,record_id\nL1,high,a0\n")
    with pytest.raises(MetricsError, match="row 2: similarity"):
        evaluate_files([bad, paths[1], paths[2]], TRUTH)
    with pytest.raises(MetricsError, match="cannot read"):
        evaluate_files([tmp_path / "nope.csv", paths[1], paths[2]], TRUTH)
