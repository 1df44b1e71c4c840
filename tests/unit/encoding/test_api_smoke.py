"""The public encoder API end to end for the default scheme: schema -> CSV -> records -> file."""

from pathlib import Path

import numpy as np

from party.encoding import bits
from party.encoding.encoder import Encoder
from party.encoding.schema import load_schema
from party.encoding.store import load_encodings, save_encodings

ROOT = Path(__file__).resolve().parents[3]
SECRET = b"0123456789abcdef0123456789abcdef"


def test_example_schema_encodes_csv_and_round_trips(tmp_path):
    schema = load_schema(ROOT / "examples" / "schema.json")
    csv_path = tmp_path / "people.csv"
    csv_path.write_text(
        "id,given_name,surname,dob,postcode\n"
        "a1,Anna,Müller,1987-05-03,AB1 2CD\n"
        "a2,Jürgen,Straße,1990-01-01,XY9 8ZZ\n"
        "a3,Anna,Mueller,1987-05-03,AB1 2CD\n",
        encoding="utf-8",
    )
    enc = Encoder(schema, SECRET)
    records, report = enc.encode_csv(csv_path, id_column="id")
    assert records.record_ids == ("a1", "a2", "a3")
    assert records.filters.shape == (3, bits.words_for(schema.output_bits))
    assert report.encoded == 3 and report.rows_read == 3 and report.skipped == {}
    assert 0.2 < report.fill_mean < 0.7
    assert records.block_digests.shape == (3, 2)
    # same surname soundex (M460) and same year+postcode prefix for a1/a3
    assert records.block_digests[0, 0] == records.block_digests[2, 0]
    assert records.block_digests[0, 1] == records.block_digests[2, 1]
    assert records.block_digests[0, 0] != records.block_digests[1, 0]
    # the same record encoded through encode_rows gives the same filter
    again = enc.encode_rows(
        [{"given_name": "Anna", "surname": "Müller", "dob": "1987-05-03", "postcode": "AB1 2CD"}]
    )
    assert again.record_ids == ("1",)
    assert np.array_equal(again.filters[0], records.filters[0])
    out = tmp_path / "enc.bin"
    save_encodings(out, records, schema.digest())
    loaded, digest = load_encodings(out)
    assert digest == schema.digest()
    assert loaded.record_ids == records.record_ids
    assert np.array_equal(loaded.filters, records.filters)
    assert np.array_equal(loaded.block_digests, records.block_digests)
    segs = records.segments(4)
    assert len(segs) == 4 and all(s.shape == (3, 4) for s in segs)
