"""scripts/false_pairs.py: every pair inside an output group counted true or false against the truth,
the false pairs' differing fields counted; a folder that is not a results folder is refused."""

from pathlib import Path

import pytest

from tests.scripts import load_script

HEADER = "rec_id,given_name,surname,sex,dob,street_address,suburb,postcode,state\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_counts_false_pairs_and_their_differing_fields(tmp_path: Path, capsys) -> None:
    _write(
        tmp_path / "data" / "truth.csv",
        "entity_id,party,rec_id\ne1,0,a1\ne2,0,a2\ne1,1,b1\ne3,1,b2\ne1,2,c1\n",
    )
    _write(
        tmp_path / "data" / "party-0.csv",
        HEADER + "a1,ann,lee,f,1990,1 x st,y,3000,vic\na2,bob,ray,m,1980,2 x st,y,3000,vic\n",
    )
    _write(
        tmp_path / "data" / "party-1.csv",
        HEADER + "b1,ann,lee,f,1990,1 x st,y,3000,vic\nb2,bob,roy,m,1981,9 z rd,y,3000,vic\n",
    )
    _write(tmp_path / "data" / "party-2.csv", HEADER + "c1,ann,lee,f,1990,1 x st,y,3000,vic\n")
    head = "linkage_id,similarity,record_id,group_size,parties\n"
    # group L0: a1, b1, c1 (one entity: 3 true pairs); group L1: a2, b2 (two people: 1 false)
    _write(
        tmp_path / "results" / "party-0" / "matches.csv", head + "L0,1.0,a1,3,x\nL1,0.85,a2,2,x\n"
    )
    _write(
        tmp_path / "results" / "party-1" / "matches.csv", head + "L0,1.0,b1,3,x\nL1,0.85,b2,2,x\n"
    )
    _write(tmp_path / "results" / "party-2" / "matches.csv", head + "L0,1.0,c1,3,x\n")
    assert load_script("false_pairs").main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "pairs in groups: 4, true 3, false 1" in out
    assert "false pairs by group size: [(2, 1)]" in out
    assert "false pairs by number of differing fields: [(3, 1)]" in out
    assert "surname,dob,street_address" in out
    assert "'postcode': 1" in out and "'given name + sex + postcode': 1" in out
    assert "ann" not in out and "bob" not in out  # counts only, no record value


def test_a_folder_that_is_not_a_results_folder_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_script("false_pairs").main([str(tmp_path)])
    assert exit_info.value.code == 2
    assert "is not a simulate.py results folder" in capsys.readouterr().err
