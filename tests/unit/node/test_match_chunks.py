"""Result files written from resolved chunks (columns) equal, byte for byte, those written row by row."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

from party.node.results import write_match_chunks, write_matches
from party.protocol.any_driver import GroupRow
from party.protocol.classify import MatchRow, ResolvedMatches

RUN = "0123456789abcdef" * 2
# ids a CSV writer must quote (comma, quote, CR, LF), and ones it must not (space, unicode, tab)
PLAIN = ["rec-1", "r 2", "ümlaut", "tab\there", "x" * 40, "0", "L00000001"]
QUOTED = ["a,b", 'say "hi"', "line\nbreak", "cr\rhere", '"', ","]
SIMS = [0.8, 1.0, 1 / 3, 0.8123456789012345, 0.9999999999999999, 0.0, 5e-324]


def _chunks(
    rng: np.random.Generator, tricky: bool, groups: bool, ascii_only: bool = False, first: int = 1
) -> list[ResolvedMatches]:
    ids = [i for i in PLAIN if i.isascii()] if ascii_only else PLAIN
    ids = ids + (QUOTED if tricky else [])
    out = []
    next_id = first
    for _ in range(int(rng.integers(1, 5))):
        k = int(rng.integers(0, 60))
        lids = np.arange(next_id, next_id + k, dtype=np.uint64)
        next_id += k
        sims = np.array(SIMS)[rng.integers(0, len(SIMS), size=k)]
        rids = [ids[i] for i in rng.integers(0, len(ids), size=k)]
        if groups:
            sizes = rng.integers(2, 4, size=k).astype(np.uint64)
            names = [("party-a", "party-b"), ("party-a", "party-b", "party-c")]
            names += [("b,c", "x")] if tricky else []
            parties = [names[i] for i in rng.integers(0, len(names), size=k)]
            out.append(ResolvedMatches(lids, sims, rids, sizes, parties))
        else:
            out.append(ResolvedMatches(lids, sims, rids))
    return out


def _rows(chunks: list[ResolvedMatches], groups: bool) -> list[MatchRow | GroupRow]:
    rows: list[MatchRow | GroupRow] = []
    for c in chunks:
        for i, row in enumerate(c.match_rows()):
            if groups:
                assert c.group_sizes is not None and c.group_parties is not None
                rows.append(
                    GroupRow(
                        row.linkage_id,
                        row.similarity,
                        row.record_id,
                        int(c.group_sizes[i]),
                        c.group_parties[i],
                    )
                )
            else:
                rows.append(row)
    return rows


@pytest.mark.parametrize("ascii_only", [False, True])
@pytest.mark.parametrize("groups", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_chunks_write_the_same_bytes_as_rows(
    tmp_path: pathlib.Path, groups: bool, seed: int, ascii_only: bool
):
    rng = np.random.default_rng(seed)
    # odd seeds: fields the writer must quote; ASCII-only fields take the numpy-joined path
    # linkage ids from 0, across 10^8 (labels wider than 8 digits), up to 2^64 - 1
    first = [0, 10**8 - 30, 2**64 - 200][seed % 3]
    chunks = _chunks(rng, bool(seed % 2), groups, ascii_only, first)
    a, n_a = write_matches(tmp_path / "a", RUN, _rows(chunks, groups), groups)
    b, n_b = write_match_chunks(tmp_path / "b", RUN, chunks, groups)
    assert n_a == n_b == sum(len(c) for c in chunks)
    assert b.read_bytes() == a.read_bytes()


def test_no_chunks_write_the_header_only(tmp_path: pathlib.Path) -> None:
    path, n = write_match_chunks(tmp_path, RUN, [])
    assert n == 0 and path.read_bytes() == b"linkage_id,similarity,record_id\r\n"
