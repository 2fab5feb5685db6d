"""The two percentile rules against numpy, the reference each one names, on random samples
(hypothesis, ties included) and on the edges: one value, q = 0, q = 1, no values, a bad q."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from core.stats import percentile_linear, percentile_nearest_rank

Percentile = Callable[[Iterable[float], float], float | None]

# Small integers as well as wide floats, so ties and equal neighbours are drawn often.
SAMPLES = st.lists(st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.integers(0, 5).map(float)),
                   min_size=1, max_size=80)
SHARES = st.one_of(st.floats(0.0, 1.0), st.integers(0, 100).map(lambda n: n / 100), st.sampled_from([0.0, 1.0]))


@hypothesis_settings(max_examples=500, deadline=None)
@given(values=SAMPLES, q=SHARES)
def test_nearest_rank_is_numpys_inverted_cdf(values: list[float], q: float) -> None:
    # A rank, not an interpolation: exactly one of the samples, the one numpy picks.
    assert percentile_nearest_rank(values, q) == float(numpy.quantile(values, q, method="inverted_cdf"))


@hypothesis_settings(max_examples=500, deadline=None)
@given(values=SAMPLES, q=SHARES)
def test_linear_is_numpys_default_rule(values: list[float], q: float) -> None:
    # numpy interpolates from the nearer neighbour: the two agree to rounding.
    expected = float(numpy.quantile(values, q, method="linear"))
    assert percentile_linear(values, q) == pytest.approx(expected, rel=1e-12, abs=1e-9)


def test_the_rules_differ_where_a_figure_would_notice() -> None:
    # p50 of four values: linear halfway between the middle two, nearest rank the lower one.
    assert percentile_linear([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert percentile_nearest_rank([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    # p95 of 1..20: rank 19 of 20 (nearest) against 19.05 interpolated.
    twenty = [float(n) for n in range(20, 0, -1)]  # unsorted on purpose
    assert percentile_nearest_rank(twenty, 0.95) == 19.0
    assert percentile_linear(twenty, 0.95) == pytest.approx(19.05)


@pytest.mark.parametrize("percentile", [percentile_nearest_rank, percentile_linear])
def test_edges(percentile: Percentile) -> None:
    assert percentile([7.5], 0.0) == percentile([7.5], 0.99) == percentile([7.5], 1.0) == 7.5
    assert percentile([3.0, 1.0, 2.0], 0.0) == 1.0
    assert percentile([3.0, 1.0, 2.0], 1.0) == 3.0
    assert percentile([], 0.5) is None
    assert percentile(iter([2.0, 1.0]), 1.0) == 2.0  # any iterable, read once


@pytest.mark.parametrize("percentile", [percentile_nearest_rank, percentile_linear])
@pytest.mark.parametrize("q", [95, -0.01, 1.01, float("nan")])
def test_a_share_outside_0_to_1_is_refused_by_name(percentile: Percentile, q: float) -> None:
    # 95 for p95 is the mistake this catches: a percent where a share is wanted.
    with pytest.raises(ValueError, match=r"q must be a share from 0 to 1 \(0.95 for p95\)"):
        percentile([1.0, 2.0], q)
