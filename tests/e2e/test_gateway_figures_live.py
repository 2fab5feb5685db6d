"""Browser: the gateway figures page's traffic chart starts from the request log's last
hour and follows each scrape tick without a reload: the tick's minutes update the chart's
points in place, a new minute is appended, and the slowest request is drawn."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from gateway.models import ApiKey, RequestLog
from metrics.charts import gateway_traffic
from metrics.services import scrape_tick
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
CHART = "Chart.getChart(document.getElementById('traffic')).data"


def log_request(key: ApiKey, at: datetime, request_id: str, *, status: int, latency_ms: float) -> None:
    RequestLog.objects.create(created_at=at, request_id=request_id, key=key, endpoint="chat.completions",
                              lane="qwen", route_reason="explicit", status=status, prompt_tokens=10,
                              completion_tokens=20, ttft_ms=50.0, latency_ms=latency_ms)


def tick(at: datetime) -> None:
    """A scrape tick at `at`, from another thread as beat's worker would (Playwright's loop
    runs in this one)."""
    def run() -> None:
        try:
            scrape_tick(now=at)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def chart_series(page: Any) -> list[tuple[int, int, float]]:
    return [tuple(point) for point in page.evaluate(
        f"{CHART}.labels.map((_, i) => {CHART}.datasets.map((ds) => ds.data[i]))")]


def expected_series(now: datetime) -> list[tuple[int, int, float]]:
    return [(p["requests"], p["errors"], p["max_latency_ms"]) for p in gateway_traffic(now=now)]


def test_the_traffic_chart_follows_each_tick(asgi_server: Any, page: Any, admin_user: Any) -> None:
    key = ApiKey.objects.create(name="agents", prefix="sk-spark-ab", secret_hash="y" * 64)
    # Minutes fixed by the test, not the clock: the tick below is computed at `tick_at`.
    minute = timezone.now().replace(second=0, microsecond=0)
    earlier, tick_at = minute - timedelta(minutes=1), minute + timedelta(seconds=30)
    log_request(key, earlier - timedelta(minutes=5), "req-old", status=200, latency_ms=90.0)
    log_request(key, earlier + timedelta(seconds=5), "req-0", status=200, latency_ms=80.0)

    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/monitor/gateway/")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    assert chart_series(page) == [(1, 0, 90.0), (1, 0, 80.0)]

    # One more request in the tick's earlier minute (updated in place), a slow failing one
    # in its current minute (appended).
    log_request(key, earlier + timedelta(seconds=20), "req-1", status=200, latency_ms=400.0)
    log_request(key, minute + timedelta(seconds=10), "req-2", status=502, latency_ms=5000.0)
    tick(tick_at)
    page.wait_for_selector("#traffic[data-ticks='1']")
    assert chart_series(page) == [(1, 0, 90.0), (2, 0, 400.0), (1, 1, 5000.0)] == expected_series(tick_at)
    assert page.evaluate(f"{CHART}.datasets[2].label") == "slowest request (ms)"
    assert page.inner_text("#gateway-live [data-figure='rpm']") == "0.6/min"  # 3 requests in 5 minutes
    assert page.evaluate("window.__notReloaded") is True
