"""Subset-entity generator and the pairwise / exact-group metrics of target "any"."""

from __future__ import annotations

import numpy as np
import pytest

from party.synthetic.generator import GenerationError
from party.synthetic.metrics import MetricsError
from party.synthetic.metrics_any import evaluate_groups
from party.synthetic.subsets import generate_subsets
from party.synthetic.truth import truth_from_labels


def test_subsets_fill_every_party_and_span_one_to_p_parties() -> None:
    ds = generate_subsets(4, 300, single=0.3, corruption=0.4, seed=3, households=0.2)
    assert [len(t) for t in ds.tables] == [300] * 4
    by_count = ds.parameters["entities_by_party_count"]
    assert isinstance(by_count, list)
    assert by_count[0] == 0 and all(c > 0 for c in by_count[1:])
    # an entity's record at each of its parties; corrupted copies never cover all of its parties
    ents: dict[int, list[int]] = {}
    for p, codes in enumerate(ds.truth.entity_ids):
        for i, e in enumerate(codes.tolist()):
            ents.setdefault(e, []).append(int(ds.corrupted[p][i]))
    assert all(len(v) == 1 or sum(v) < len(v) for v in ents.values())
    assert any(sum(v) for v in ents.values() if len(v) >= 2)
    assert not any(sum(v) for v in ents.values() if len(v) == 1)
    again = generate_subsets(4, 300, single=0.3, corruption=0.4, seed=3, households=0.2)
    assert again.tables[2].columns == ds.tables[2].columns


@pytest.mark.parametrize("kw", [dict(single=1.5), dict(corruption=-0.1), dict(max_errors=0)])
def test_subsets_bad_parameters_are_named(kw: dict[str, float]) -> None:
    with pytest.raises(GenerationError, match=next(iter(kw))):
        generate_subsets(3, 10, **kw)  # type: ignore[arg-type]


def test_pairwise_and_exact_group_scores_known_answer() -> None:
    # entity x at parties 0,1,2; y at 0,1; z at 2 only
    truth = truth_from_labels(
        [["a0", "a1"], ["b0", "b1"], ["c0", "c1"]], [["x", "y"], ["x", "y"], ["x", "z"]]
    )
    # groups: {a0,b0} (x, missing c0: pair ok, group not exact), {a1,b1} (y exact), {c0,c1} wrong
    groups = [[(0, "a0"), (1, "b0")], [(0, "a1"), (1, "b1")], [(2, "c0"), (2, "c1")]]
    q = evaluate_groups(groups, truth)
    # true pairs: x has 3, y has 1 -> 4; predicted 3, correct 2
    assert (q.pairwise.predicted, q.pairwise.correct, q.pairwise.true) == (3, 2, 4)
    assert q.pairwise.precision == pytest.approx(2 / 3) and q.pairwise.recall == 0.5
    assert q.pairwise.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert (q.groups.predicted, q.groups.correct, q.groups.true) == (3, 1, 2)
    assert evaluate_groups(groups, truth, min_parties=3).groups.true == 1
    empty = evaluate_groups([], truth)
    assert (empty.pairwise.precision, empty.pairwise.recall, empty.pairwise.f1) == (1.0, 0.0, 0.0)
    with pytest.raises(MetricsError, match="party 1"):
        evaluate_groups([[(1, "nope")]], truth)
    assert np.isclose(
        evaluate_groups([[(0, "a0"), (1, "b0"), (2, "c0")]], truth).groups.recall, 0.5
    )


def test_any_simulation_writes_group_columns_and_equals_the_oracle(tmp_path: object) -> None:
    import csv
    from pathlib import Path

    from party.synthetic.simulation import SimulationConfig, matches_path
    from party.synthetic.simulation_any import MATCHES_ANY_HEADER, AnyTarget, run_any_simulation

    out = Path(str(tmp_path))
    cfg = SimulationConfig(parties=3, records=150, corruption=0.4, seed=5, segment_threshold=0.0)
    cfg.out_dir = out
    r = run_any_simulation(cfg, AnyTarget(min_parties=2, solver="weakest-link", single=0.3))
    assert r.oracle_equal is True
    assert r.quality.pairwise.correct > 0 and r.quality.groups.correct > 0
    with matches_path(out, 1).open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == MATCHES_ANY_HEADER
    for _lid, sim, rid, size, parties in rows[1:]:
        assert rid.startswith("p1r") and "party-b" in parties.split(";")
        assert int(size) == len(parties.split(";")) >= 2 and 0.8 <= float(sim) <= 1.0
