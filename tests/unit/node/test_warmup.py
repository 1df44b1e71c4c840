"""The node's start-up warm-up reaches the loops a real run uses: matching rows (the sorts, the
one-to-one step and the group solver), each party count's and each read-only variant."""

from __future__ import annotations

import json
import logging
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from party.node import warmup
from party.protocol.driver import run_in_process
from party.protocol.params import ProtocolParameters

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _params(parties: int, target: str, one_to_one: bool = False) -> ProtocolParameters:
    return ProtocolParameters(
        parties=tuple(f"w{j}" for j in range(parties)),
        filter_bits=96,
        match_threshold=0.8,
        segment_threshold=0.7,
        one_to_one=one_to_one,
        target=target,
    )


@pytest.mark.parametrize("parties", [2, 3, 4])
@pytest.mark.parametrize("writable", [True, False])
def test_linked_tables_make_groups_of_two_and_of_every_party(parties: int, writable: bool) -> None:
    tables = warmup._linked_tables(np.random.default_rng(0), 96, writable, parties)
    assert all(t.filters.flags.writeable is writable for t in tables)
    run = run_in_process(tables, _params(parties, "any"))
    sizes = {r.group_size for rows in run.matches for r in rows}  # type: ignore[union-attr]
    assert sizes == {2, parties}


@pytest.mark.parametrize("parties", [2, 3, 4])
@pytest.mark.parametrize("blocking", ["one", "two", "row"])
def test_linked_tables_match_the_rows_at_every_party_one_to_one(
    parties: int, blocking: str
) -> None:
    tables = warmup._linked_tables(np.random.default_rng(0), 96, True, parties, blocking)
    run = run_in_process(tables, _params(parties, "all", one_to_one=True))
    # the 8 rows every party holds (with P = 2 also the 8 each holds with the next), once each,
    # whichever blocks they share
    assert [len(rows) for rows in run.matches] == [8 if parties > 2 else 16] * parties


def test_two_blocking_keys_put_every_record_in_two_small_blocks() -> None:
    table = warmup._linked_tables(np.random.default_rng(0), 96, True, 4, "two")[0]
    digests = table.block_digests
    assert digests.shape == (len(table.record_ids), 2)
    assert set(digests[:, 0].tolist()).isdisjoint(digests[:, 1].tolist())
    assert max(np.unique(digests, return_counts=True)[1]) <= 7  # 7^4 sets: the fast path


def test_warm_up_writes_nothing_outside_a_temporary_folder(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger=warmup.__name__):
        assert warmup.warm_up() > 0
    assert list(tmp_path.iterdir()) == []
    assert not caplog.records  # every linked run found matches


_SIGNATURES = """
import json
from dataclasses import replace
import numpy as np
from numba.core.registry import CPUDispatcher
from party.node import warmup
from party.protocol.driver import run_in_process
from party.protocol.params import ProtocolParameters
from party.mpc.driver import run_mpc3_in_process
warmup.warm_up()
from party.mpc import _numba_gates as g
from party.protocol import _numba_blocks as b, _numba_kernel as k
import sys
loops = {"fa_and": g.fa_and, "fa_finish": g.fa_finish, "and_word_major": g.and_word_major,
         "greedy_keep_dense": k.greedy_keep_dense, "merge_ring_rows": k.merge_ring_rows,
         "plan_blocks": k.plan_blocks, "batch_blocks": k.batch_blocks,
         "values_in_two_or_more": b.values_in_two_or_more, "sort_ties": b.sort_ties,
         "sort_high_ties": b.sort_high_ties, "first_of_each_key": b.first_of_each_key,
         "first_keys_in_order": b.first_keys_in_order, "gather_rows": b.gather_rows,
         "merge_unique_runs": b.merge_unique_runs, "key_range_counts": b.key_range_counts,
         "key_range_fill": b.key_range_fill}
def arg(t):
    if hasattr(t, "count"):
        return {"tuple": t.count}
    return {"readonly": not getattr(t, "mutable", True)}
def every_loop():
    return {f"{m}.{n}": f for m, mod in list(sys.modules.items()) if m.startswith("party.")
            for n, f in vars(mod).items() if isinstance(f, CPUDispatcher)}
def variants():
    return {name: len(f.signatures) for name, f in every_loop().items()}
before = variants()
# five parties (a party count the warm-up never ran; filters of 100 and 200 bits, 2 and 4 words)
params = ProtocolParameters(parties=tuple(f"w{j}" for j in range(5)), filter_bits=100,
                            match_threshold=0.8, segment_threshold=0.7, target="all",
                            one_to_one=True)
rng = np.random.default_rng(5)
run_in_process(warmup._linked_tables(rng, 100, True, 5, blocking="two"), params)
run_in_process(warmup._linked_tables(rng, 100, False, 5), replace(params, target="any"))
mpc3 = replace(params, filter_bits=200, segment_threshold=0.0, mode="mpc3")
run_mpc3_in_process(warmup._linked_tables(rng, 200, True, 5, "row"), mpc3)
after = variants()
print(json.dumps({
    "loops": {n: [[arg(t) for t in s] for s in f.signatures] for n, f in loops.items()},
    "compiled_at_five": sorted(n for n, c in after.items() if c > before.get(n, 0)),
}))
"""


def test_a_fresh_process_warm_up_reaches_the_variants_first_runs_compiled(
    tmp_path: pathlib.Path,
) -> None:
    """In a process of its own (numba's dispatchers start empty), the warm-up alone reaches each
    loop a fresh checkout's first mpc3 / target-all / target-any runs compiled before
    (``scripts/first_run_compiles.py``), with the read-only flags they pass; runs of five parties
    (a party count the warm-up never ran) then compile no loop: no loop takes a tuple of one
    array per party."""
    done = subprocess.run(
        [sys.executable, "-c", _SIGNATURES],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    sigs = out["loops"]
    assert all(sigs.values()), [name for name, s in sigs.items() if not s]
    # the popcount's first full-adder layer: the second share is the received, read-only one
    assert any(s[1]["readonly"] for s in sigs["fa_and"])
    assert any(s[1]["readonly"] and s[4]["readonly"] for s in sigs["fa_finish"])
    # four parties: the AND tree's second layer ANDs two received (read-only) shares
    assert any(s[1]["readonly"] and s[5]["readonly"] for s in sigs["and_word_major"])
    # the loops over one array per party: one variant, no tuple argument
    for name in ("merge_ring_rows", "plan_blocks", "batch_blocks", "values_in_two_or_more"):
        assert len(sigs[name]) == 1, name
        assert not any("tuple" in a for a in sigs[name][0]), name
    assert out["compiled_at_five"] == []
