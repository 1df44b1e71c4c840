"""Recall cost of the segment filter on realistic corrupted records (encoder + synthetic generator).

Evidence for the default s_m (``params.default_segment_threshold``: s_t - 0.1): for P = 3, 5, 7 the
filter at s_m = s_t - 0.1 loses (almost) no true match found without filtering, while s_m = s_t
does lose some. The numbers are printed (pytest -s) and recorded in docs/engine.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from party.encoding.encoder import Encoder
from party.encoding.records import EncodedRecords
from party.protocol.driver import run_in_process
from party.protocol.params import ProtocolParameters, default_segment_threshold
from party.synthetic.generator import generate
from party.synthetic.simulation import load_schema_for, simulation_secret
from party.synthetic.truth import GroundTruth

S_T = 0.8


def true_positives(
    tables: list[EncodedRecords], truth: GroundTruth, params: ProtocolParameters
) -> tuple[int, int]:
    p = len(tables)
    run = run_in_process(tables, params)
    lookups = [truth.lookup(j) for j in range(p)]
    entity_of: dict[str, list[int]] = {}
    for j, rows in enumerate(run.matches):
        for r in rows:
            entity_of.setdefault(r.linkage_id, [-1] * p)[j] = lookups[j][r.record_id]
    tp = sum(1 for ents in entity_of.values() if ents[0] >= 0 and len(set(ents)) == 1)
    return tp, len(entity_of)


@pytest.mark.parametrize("parties", [3, 5, 7])
def test_segment_threshold_below_s_t_costs_almost_no_recall(parties: int) -> None:
    ds = generate(parties, 500, overlap=0.8, corruption=0.4, seed=parties)
    schema, _, _ = load_schema_for(None, parties)
    secret = simulation_secret(1)
    tables = [Encoder(schema, secret).encode_rows(t.rows(), id_column="rec_id") for t in ds.tables]
    names = tuple(f"p{i}" for i in range(parties))

    def params(s_m: float) -> ProtocolParameters:
        return ProtocolParameters(names, schema.output_bits, S_T, s_m, target="all")

    complete = ds.truth.complete_entities().size
    tp_none, _ = true_positives(tables, ds.truth, params(0.0))
    tp_default, _ = true_positives(tables, ds.truth, params(default_segment_threshold(S_T)))
    tp_equal, _ = true_positives(tables, ds.truth, params(S_T))
    print(
        f"P={parties}: {complete} complete entities; true matches found: s_m=0 {tp_none}, "
        f"s_m=s_t-0.1 {tp_default}, s_m=s_t {tp_equal}"
    )
    assert tp_none >= 0.6 * complete  # the setting is meaningful: most true sets are matched
    assert tp_equal <= tp_default <= tp_none  # filtering never adds matches (subset property)
    assert tp_none - tp_default <= max(1, tp_none // 200)  # s_t - 0.1 loses at most 0.5%


def test_default_segment_threshold() -> None:
    assert default_segment_threshold(0.8) == pytest.approx(0.7)
    assert default_segment_threshold(0.05) == 0.0
    assert np.isclose(default_segment_threshold(1.0), 0.9)
