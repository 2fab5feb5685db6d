"""Browser: a lane card's TTFT p95 is an estimate from vLLM's buckets, and says so as the
gateway's figures do: its sample count ("n = 1"), the bucket it lies in (its resolution), and
"≥" past the last finite bucket (the issue's 'percentiles above the maximum', engine side;
the estimate's clamp itself: tests/metrics/test_parsing.py's property test)."""

from __future__ import annotations

from typing import Any

import pytest

from metrics.models import ScrapeTarget
from metrics.parsing import TTFT, EngineReading, lane_figures
from tests.conftest import browser_login
from tests.metrics.conftest import make_lane_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def figures_of(samples: list[float], bounds: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)) -> dict[str, float]:
    """The figures lane_figures stores for a window that saw `samples` (seconds)."""
    start = EngineReading(at=0.0, histograms={TTFT: {bound: 0.0 for bound in (*bounds, float("inf"))}})
    counts = {bound: float(sum(1 for s in samples if s <= bound)) for bound in bounds}
    now = EngineReading(at=10.0, histograms={TTFT: counts | {float("inf"): float(len(samples))}})
    return lane_figures(start, now)


def test_a_lane_card_states_the_estimates_sample_count_resolution_and_open_end(
    asgi_server: Any, page: Any, viewer_user: Any,
) -> None:
    one = figures_of([0.278])
    assert one["ttft_n"] == 1 and (one["ttft_p95_lo_ms"], one["ttft_p95_hi_ms"]) == (250.0, 500.0)
    slow = figures_of([3.0, 4.0])  # both past the last finite bound (1 s)
    assert slow["ttft_p95_ms"] == 1000.0 and "ttft_p95_hi_ms" not in slow
    for name, figures in (("qwen", one), ("slow", slow)):
        make_lane_for(name, "127.0.0.1", 8000, node=None)
        ScrapeTarget.objects.create(kind="lane", target=name, ok=True, figures=figures)
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/")
    card = page.locator(".lane-card[data-lane='qwen'] [data-figure='ttft_p95_ms']")
    assert card.inner_text() == f"{one['ttft_p95_ms']:.0f} ms (n = 1; bucket 250–500 ms)"
    open_card = page.locator(".lane-card[data-lane='slow'] [data-figure='ttft_p95_ms']")
    assert open_card.inner_text() == "≥ 1000 ms (n = 2; past the last bucket, 1000 ms)"
