"""Browser: with traffic flowing through the gateway to a sparksim lane, the dashboard's
cards and sparkline and the lane's charts change at each scrape without a reload; a lane
slowed by sparksim's fault switch shows a higher TTFT p95 after one scrape, and its alert
appears on the dashboard and in the header, then clears once the slow requests have left
the percentile window."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from gateway.models import RequestLog
from gateway.services import api_key_create
from metrics.models import ScrapeTarget
from metrics.services import scrape_tick
from sparksim.standalone import EngineHandle
from tests.conftest import browser_login, wait_for
from tests.metrics.conftest import QWEN, make_lane_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
LANE_CARD = ".lane-card[data-lane='qwen']"


@pytest.fixture
def qwen_engine(engine_factory: Callable[..., EngineHandle]) -> EngineHandle:
    return engine_factory(QWEN, "--max-model-len", "32768")


def in_worker_thread(work: Any) -> None:
    """As beat's worker would (Playwright's loop runs in this thread)."""
    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def tick() -> None:
    in_worker_thread(scrape_tick)


def let_the_window_pass(lane: str) -> None:
    """As if the percentile window (60 s) had passed since the last scrape, without waiting
    for it: the lane's last reading and the snapshots its window keeps age by the window's
    length, so the next scrape's window starts at the last reading."""
    state = ScrapeTarget.objects.get(kind="lane", target=lane)
    for snapshot in [state.reading, *state.reading["window"]]:
        snapshot["at"] -= settings.METRICS_PERCENTILE_WINDOW_S + 1
    state.save(update_fields=["reading"])


def send_traffic(base_url: str, secret: str, n: int = 4) -> None:
    for _ in range(n):
        response = httpx.post(f"{base_url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                              timeout=60, json={"model": "qwen", "max_tokens": 16,
                                                "messages": [{"role": "user", "content": "how hot is a spark? " * 20}]})
        assert response.status_code == 200, response.text


def number(text: str) -> float:
    match = re.search(r"[\d.]+", text)
    assert match, f"no number in {text!r}"
    return float(match.group())


def sparkline_points(page: Any) -> int:
    return int(page.evaluate(f"Chart.getChart(document.querySelector(\"{LANE_CARD} canvas\")).data.labels.length"))


def test_dashboard_and_charts_follow_the_scrapes_and_a_slow_lane_raises_an_alert(
    asgi_server, page, admin_user, qwen_engine
):
    make_lane_for("qwen", "127.0.0.1", qwen_engine.port, served=QWEN)
    secret = api_key_create(actor=admin_user, name="agents").secret
    tick()
    browser_login(page, asgi_server.url, admin_user.username)
    page.wait_for_selector(LANE_CARD)
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    assert page.inner_text(f"{LANE_CARD} [data-figure='gen_tps']") == "—"
    before = sparkline_points(page)

    send_traffic(asgi_server.url, secret)
    wait_for(lambda: RequestLog.objects.count() >= 4, what="the gateway's request log batch")
    tick()
    page.wait_for_function(f"document.querySelector(\"{LANE_CARD} [data-figure='gen_tps']\").textContent !== '—'")
    assert number(page.inner_text(f"{LANE_CARD} [data-figure='gen_tps']")) > 0
    assert sparkline_points(page) == before + 1
    normal_ttft = number(page.inner_text(f"{LANE_CARD} [data-figure='ttft_p95_ms']"))
    page.wait_for_function("document.querySelector(\"#gateway-strip [data-figure='rpm']\").textContent !== '0.0/min'")

    httpx.post(f"{qwen_engine.url}/_sim/faults", json={"slow_prefill_factor": 400}).raise_for_status()
    slow_threshold = normal_ttft * 5
    with override_settings(METRICS_ALERT_TTFT_P95_MS=slow_threshold):
        send_traffic(asgi_server.url, secret, n=2)
        tick()  # one scrape interval after the lane slowed down
        page.wait_for_function(
            f"parseFloat(document.querySelector(\"{LANE_CARD} [data-figure='ttft_p95_ms']\").textContent) > {slow_threshold}"
        )
        page.wait_for_selector("#open-alerts li:has-text('TTFT p95')")
        assert page.is_visible("#alerts-card")
        assert page.inner_text("#alert-badge") == "1 alert"

        httpx.post(f"{qwen_engine.url}/_sim/faults", json={"clear": True}).raise_for_status()
        # The slow first tokens count in the p95 for a window (60 s) after they happened.
        let_the_window_pass("qwen")
        send_traffic(asgi_server.url, secret, n=2)
        tick()
        page.wait_for_function(
            f"parseFloat(document.querySelector(\"{LANE_CARD} [data-figure='ttft_p95_ms']\").textContent) < {slow_threshold}"
        )
        page.wait_for_selector("#open-alerts li", state="detached")
        assert page.is_hidden("#alerts-card")
        assert page.inner_text("#alert-badge") == "no alerts"
    assert page.evaluate("window.__notReloaded") is True

    page.goto(f"{asgi_server.url}/monitor/lanes/qwen/")
    page.wait_for_selector("#charts[data-loaded='15m']")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    first_chart = "Chart.getChart(document.querySelector('#charts canvas')).data"
    loaded = int(page.evaluate(f"{first_chart}.labels.length"))
    assert loaded >= 4  # the ticks so far, from the stored samples
    send_traffic(asgi_server.url, secret, n=2)
    tick()
    page.wait_for_selector("#charts[data-ticks='1']")
    assert int(page.evaluate(f"{first_chart}.labels.length")) == loaded + 1
    assert page.evaluate(f"{first_chart}.datasets[0].data.at(-1)") > 0  # generation tok/s of the new tick
    assert page.evaluate("window.__notReloaded") is True


def test_every_page_header_follows_the_open_alerts_without_a_reload(asgi_server, page, viewer_user):
    from datetime import UTC, datetime, timedelta

    from metrics.alerts import alerts_evaluate
    from metrics.rules import TargetView

    def evaluate(kv_pct: float, at: datetime) -> None:
        target = TargetView(kind="lane", name="qwen", figures={"kv_pct": kv_pct}, consecutive_failures=0,
                            lane_state="serving", lane_desired="serving")
        with override_settings(METRICS_ALERT_KV_PCT=90, METRICS_ALERT_KV_FOR_S=0):
            in_worker_thread(lambda: alerts_evaluate(targets=[target], now=at))

    browser_login(page, asgi_server.url, viewer_user.username)
    t0 = datetime.now(UTC)
    for path in ("/routing/", "/benchmarks/"):  # pages with no socket of their own
        page.goto(f"{asgi_server.url}{path}")
        page.wait_for_selector("#alert-badge[data-live='1']")  # the header's socket is connected
        page.evaluate("window.__notReloaded = true")
        assert page.inner_text("#alert-badge") == "no alerts"
        evaluate(97, t0)
        page.wait_for_function("document.querySelector('#alert-badge').textContent === '1 alert'")
        evaluate(10, t0 + timedelta(seconds=5))
        page.wait_for_function("document.querySelector('#alert-badge').textContent === 'no alerts'")
        assert page.evaluate("window.__notReloaded") is True
        assert not page.is_visible("#live-status")  # the quiet header socket leaves the indicator alone
        t0 += timedelta(seconds=10)
