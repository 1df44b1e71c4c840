"""The production blocking digests equal the independent known answers (tests/data/kat_blocking.json,
written by scripts/gen_kat_blocking.py, which imports nothing from the project)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from party.encoding.blocking import ALL_PAIRS_KEY, all_pairs_digest
from party.encoding.hashing import (
    BLOCKING_DIGEST_SCHEME,
    blocking_prf_key,
    cbc_mac_digests,
    lsh_band_digests,
    value_blocks,
)

KAT = json.loads(
    (Path(__file__).resolve().parents[2] / "data" / "kat_blocking.json").read_text("utf-8")
)
SECRET = bytes.fromhex(KAT["secret_hex"])


def test_scheme_and_keys():
    assert KAT["scheme"] == BLOCKING_DIGEST_SCHEME
    for name, hexkey in KAT["keys"].items():
        assert blocking_prf_key(SECRET, name).hex() == hexkey


def test_part_digests_one_record_at_a_time_and_all_at_once():
    for vec in KAT["parts"]:
        key = blocking_prf_key(SECRET, vec["name"])
        got = cbc_mac_digests(key, [value_blocks([p]) for p in vec["parts"]])
        assert got.tolist() == [int(vec["digest"])], vec
    # swapped parts and a separator moved between parts give different digests
    digests = [v["digest"] for v in KAT["parts"]]
    assert len(set(digests)) == len(digests)
    want = next(v for v in KAT["parts"] if v["name"] == ALL_PAIRS_KEY)
    assert all_pairs_digest(SECRET) == int(want["digest"])


def test_lsh_band_digests_in_one_call():
    for name in {v["name"] for v in KAT["lsh"]}:
        vecs = [v for v in KAT["lsh"] if v["name"] == name]
        bands = max(v["band"] for v in vecs) + 1
        values = np.zeros((len(vecs), bands), dtype=np.uint64)
        for i, v in enumerate(vecs):
            values[i, v["band"]] = np.uint64(int(v["value"]))
        got = lsh_band_digests(blocking_prf_key(SECRET, name), values)
        for i, v in enumerate(vecs):
            assert int(got[i, v["band"]]) == int(v["digest"]), v


def test_generator_reproduces_the_file():
    script = Path(__file__).resolve().parents[3] / "scripts" / "gen_kat_blocking.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
