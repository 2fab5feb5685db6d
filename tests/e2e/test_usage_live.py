"""Browser: a team member's usage page draws their team's traffic on its charts and follows
each scrape tick without a reload (the rollup moved on: a new request shows)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from gateway.models import ApiKey, RequestLog
from gateway.team_services import team_create
from metrics.services import scrape_tick
from metrics.storage import usage_rollup
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
REQUESTS = "Chart.getChart(document.querySelector(\"canvas[data-measure='requests']\")).data"


def log_request(key: ApiKey, request_id: str) -> None:
    RequestLog.objects.create(request_id=request_id, key=key, endpoint="chat.completions", lane="qwen", status=200,
                              prompt_tokens=10, completion_tokens=20, latency_ms=100.0)


def in_thread(work: Any) -> None:
    """As beat's worker would (Playwright's loop runs in this thread)."""
    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def test_new_traffic_shows_on_an_open_usage_page(asgi_server: Any, page: Any, admin_user: Any, lead_user: Any) -> None:
    team = team_create(actor=admin_user, name="agents", allowed_lanes=[], members=[lead_user.username])
    mine = ApiKey.objects.create(name="coder", prefix="sk-spark-c1", secret_hash="c" * 64, team=team)
    other = ApiKey.objects.create(name="cron", prefix="sk-spark-c2", secret_hash="d" * 64)
    log_request(mine, "req-0")
    log_request(other, "req-x")
    usage_rollup(now=timezone.now())

    browser_login(page, asgi_server.url, lead_user.username)
    page.goto(f"{asgi_server.url}/monitor/usage/?bucket=hour&days=1&chart=key")
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    assert page.evaluate(f"{REQUESTS}.datasets.map((ds) => ds.label)") == ["coder"]  # not the other team's key
    assert page.evaluate(f"{REQUESTS}.datasets[0].data.at(-1)") == 1

    log_request(mine, "req-1")
    log_request(mine, "req-2")
    in_thread(lambda: usage_rollup(now=timezone.now()))
    in_thread(lambda: scrape_tick(now=timezone.now()))
    page.wait_for_selector("#usage-charts[data-ticks='1']")
    assert page.evaluate(f"{REQUESTS}.datasets[0].data.at(-1)") == 3
    assert page.inner_text("#usage-top tbody tr td:nth-child(2)") == "3"
    assert page.evaluate("window.__notReloaded") is True
