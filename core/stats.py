"""Percentiles of raw samples, one function per rule: pure functions, no Django.

Each figure keeps one rule, the same wherever it is shown or measured:
- nearest rank (`percentile_nearest_rank`): the smallest sample with at least a share q of
  the samples at or below it, so always an observed value; numpy's
  `quantile(..., method="inverted_cdf")`. The gateway's live latency and TTFT figures (from
  its request log), and the portal's own timings in perf/ (ticks, queries, pages, encoder
  passes, event-loop lag, delays).
- linear (`percentile_linear`): linear interpolation between the two closest ranks at
  (n - 1) q; numpy's default `quantile(..., method="linear")`, which `vllm bench serve`
  uses. Requests timed by their client, as a benchmark times them: every figure of the
  benchmarks app (TTFT, TPOT, ITL, E2EL, decode speed, the client's loop lag) and the same
  figures in perf/ (what the gateway adds, sparksim against its timing model).
q is a share from 0 to 1 (0.95 for p95). No values give None: no percentile, not 0.
A histogram's quantile is another thing (metrics.parsing.histogram_quantile).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist


def _ordered(values: Iterable[float], q: float) -> list[float]:
    if not 0.0 <= q <= 1.0:  # NaN fails this too
        raise ValueError(f"q must be a share from 0 to 1 (0.95 for p95), got {q!r}")
    return sorted(values)


def percentile_nearest_rank(values: Iterable[float], q: float) -> float | None:
    """The value at rank ceil(q n) (1-based; q = 0 gives the smallest): numpy's inverted_cdf."""
    ordered = _ordered(values, q)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def percentile_linear(values: Iterable[float], q: float) -> float | None:
    """Interpolated at rank (n - 1) q (0-based) between its two neighbours: numpy's linear."""
    ordered = _ordered(values, q)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """The Wilson score interval of a share (successes of trials) at `confidence` (0.95:
    a 95% interval); None without a trial. Used for the router's shadow agreement and its
    judged win rate, and for the rule that stops a shadow run."""
    if trials <= 0:
        return None
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be a share between 0 and 1 (0.95), got {confidence!r}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    centre = (p + z * z / (2 * trials)) / (1 + z * z / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / (1 + z * z / trials)
    return max(0.0, centre - half), min(1.0, centre + half)
