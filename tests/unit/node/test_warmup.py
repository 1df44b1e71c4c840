"""The node's start-up warm-up reaches the loops a real run uses: the group solver needs rows that match."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from party.node import warmup
from party.protocol.driver import run_in_process
from party.protocol.params import ProtocolParameters


@pytest.mark.parametrize("writable", [True, False])
def test_linked_tables_make_groups_of_two_and_three(writable: bool) -> None:
    params = ProtocolParameters(
        parties=("w0", "w1", "w2"),
        filter_bits=96,
        match_threshold=0.8,
        segment_threshold=0.7,
        target="any",
    )
    tables = warmup._linked_tables(np.random.default_rng(0), 96, writable)
    assert all(t.filters.flags.writeable is writable for t in tables)
    run = run_in_process(tables, params)
    sizes = {r.group_size for rows in run.matches for r in rows}  # type: ignore[union-attr]
    assert sizes == {2, 3}


def test_warm_up_writes_nothing_outside_a_temporary_folder(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert warmup.warm_up() > 0
    assert list(tmp_path.iterdir()) == []
