"""Wilson intervals against published values and edge cases."""

import pytest

from party.audit.stats import Rate, wilson_interval


def test_wilson_matches_published_example():
    # Newcombe (1998), example 81/263: 0.2553 to 0.3662.
    low, high = wilson_interval(81, 263)
    assert low == pytest.approx(0.2553, abs=5e-4)
    assert high == pytest.approx(0.3662, abs=5e-4)


def test_wilson_edges():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0.25 < high < 0.35
    low, high = wilson_interval(10, 10)
    assert high == pytest.approx(1.0) and 0.65 < low < 0.75
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_rate_dict():
    r = Rate(3, 4)
    d = r.to_dict()
    assert d["value"] == 0.75 and d["count"] == 3 and d["total"] == 4
    assert "3/4" in str(r)
