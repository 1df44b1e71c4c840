"""PartyEngine.ring_step_chunk / ring_step_close: a ring step passed on chunk by chunk equals the
kept step (ring_step_feed, ring_step_end, ring_out_chunks), row for row."""

from __future__ import annotations

import numpy as np
import pytest

from party.protocol.engine import PartyEngine
from party.protocol.errors import RingError, StateError
from party.protocol.ring import RingMessage
from tests.unit.protocol.helpers import engines_after_compare
from tests.unit.protocol.test_any_target import params, subset_tables


def _seeded(seed: int):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return lambda n: rng.bytes(n)


def _pieces(msg: RingMessage, cuts: list[int]) -> list[RingMessage]:
    """``msg`` cut at row positions ``cuts`` (empty pieces included where cuts repeat)."""
    bounds = [0, *cuts, len(msg)]
    return [
        RingMessage(msg.hop, msg.candidates[a:b], msg.c_masked[a:b], msg.x_masked[a:b])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]


def _rows(parts: list[RingMessage]) -> np.ndarray:
    if not parts:
        return np.zeros((0, 0), dtype=np.uint64)
    return np.concatenate([np.column_stack([m.candidates, m.c_masked, m.x_masked]) for m in parts])


def _engines(target: str) -> list[PartyEngine]:
    return engines_after_compare(
        subset_tables(4, 3, 40, 0.05),
        params(3, target=target, match_threshold=0.6),
        random_bytes=_seeded(7),
    )


@pytest.mark.parametrize("target", ["any", "all"])
def test_piped_step_equals_the_kept_step(target: str) -> None:
    out = []
    for piped in (False, True):
        engines = _engines(target)
        start = engines[0].ring_start()
        m = len(start)
        assert m > 20
        # uneven chunks: an empty one, a single row, the rest
        parts = _pieces(start, [0, 1, m // 3, m // 3, m - 1])
        if piped:
            got = [engines[1].ring_step_chunk(part) for part in parts]
            rows = engines[1].ring_step_close()
            assert all(g.hop == 1 for g in got) and len(got) == len(parts)
        else:
            for part in parts:
                engines[1].ring_step_feed(part)
            rows = engines[1].ring_step_end()
            got = list(engines[1].ring_out_chunks())
        table = _rows(got)
        assert rows == table.shape[0] > 0
        out.append(table)
    np.testing.assert_array_equal(out[0], out[1])


def test_piped_step_refuses_a_mix_a_repeat_and_an_unknown_pseudonym() -> None:
    engines = _engines("any")
    start = engines[0].ring_start()
    parts = _pieces(start, [len(start) // 2])
    bad = parts[1].candidates.copy()
    col = int(np.flatnonzero(bad[-1])[-1])
    bad[-1, col] = np.uint64(12345)
    order = np.lexsort(bad.T[::-1])
    forged = RingMessage(0, bad[order], parts[1].c_masked[order], parts[1].x_masked[order])
    first = engines[1].ring_step_chunk(parts[0])
    with pytest.raises(StateError, match="either kept"):
        engines[1].ring_step_feed(parts[1])
    with pytest.raises(RingError, match="unknown pseudonym"):
        engines[1].ring_step_chunk(forged)
    second = engines[1].ring_step_chunk(parts[1])  # the refused chunk changed nothing
    assert engines[1].ring_step_close() == len(first) + len(second)
    with pytest.raises(StateError, match="already ran"):
        engines[1].ring_step_chunk(parts[1])
    with pytest.raises(StateError, match="already ran"):
        engines[1].ring_step_close()
    fresh = _engines("any")
    fresh[0].ring_start()
    with pytest.raises(StateError, match="no ring message"):
        fresh[1].ring_step_close()
    with pytest.raises(StateError, match="initiator"):
        fresh[0].ring_step_chunk(parts[0])
