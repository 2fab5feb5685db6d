"""Browser: the lane and gateway charts draw a marker per event of their window (a launch,
with its label as the tooltip), a new event (the lane degrading) appears on the open page
without a reload, and a custom from/to window is validated (the page shows the API's
message naming the field), kept in the URL and restored from it."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import pytest
from django.db import connection
from django.utils import timezone

from core.broadcast import DASHBOARD_GROUP, broadcast
from gateway.models import ApiKey, RequestLog
from jobs.models import Job
from lanes.lane_states import lane_set_observed_state
from lanes.models import Lane
from metrics.storage import samples_store
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _in_thread(work: Any) -> None:
    """As a worker would (Playwright's loop runs in this thread: the broadcast needs its own)."""
    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


@pytest.fixture
def qwen_history(db: None) -> dict[str, Any]:
    now = timezone.now()
    lane = Lane.objects.create(name="qwen", model_id="org/qwen", image="x@sha256:" + "0" * 64, max_model_len=4096,
                               observed_state="serving", desired_state="serving")
    for minutes in (12, 9, 6, 3, 1):
        samples_store(at=now - timedelta(minutes=minutes), lanes={"qwen": {"gen_tps": 10.0 + minutes}}, nodes={})
    job = Job.objects.create(kind="launch", state="succeeded", lane=lane)
    Job.objects.filter(pk=job.pk).update(created_at=now - timedelta(minutes=7, seconds=30))
    return {"lane": lane, "job": job, "now": now}


def _markers(page: Any, where: str) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        f"{where} .chart-marker",
        "els => els.map(m => { const r = m.getBoundingClientRect(), c = m.parentNode.parentNode.querySelector('canvas')"
        ".getBoundingClientRect(); return {type: m.dataset.type, title: m.title, x: r.left + r.width / 2,"
        " left: c.left, right: c.right, height: r.height}; })",
    )


def test_a_launch_is_marked_and_a_new_event_appears_live(asgi_server: Any, page: Any, viewer_user: Any,
                                                         qwen_history: dict[str, Any]) -> None:
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/monitor/lanes/qwen/")
    page.wait_for_selector("#live-status[data-state=open]")
    page.wait_for_selector("#charts[data-loaded='15m']")
    page.evaluate("window.__notReloaded = true")
    launches = _markers(page, "#charts")
    assert len(launches) == 6 and {m["type"] for m in launches} == {"launch"}  # one per chart
    job = qwen_history["job"]
    assert all(f"launch job #{job.pk} (succeeded)" in m["title"] for m in launches)
    # Drawn inside the chart, between the points of 9 and 6 minutes ago (7.5 minutes ago).
    assert all(m["left"] < m["x"] < m["right"] and m["height"] > 50 for m in launches)
    page.click("#charts .chart-marker")
    assert f"launch job #{job.pk}" in page.inner_text("[data-marker-detail]")
    assert page.get_attribute("[data-marker-detail] a", "href") == f"/jobs/{job.pk}/"

    _in_thread(lambda: lane_set_observed_state(lane=qwen_history["lane"], state="degraded",
                                               reason="RDMA fell back to TCP", source="watchdog"))
    page.wait_for_selector("#charts .chart-marker[data-type='degraded']")
    degraded = [m for m in _markers(page, "#charts") if m["type"] == "degraded"]
    assert len(degraded) == 6 and "degraded: RDMA fell back to TCP" in degraded[0]["title"]
    assert page.evaluate("window.__notReloaded") is True


def test_a_custom_window_is_checked_kept_in_the_url_and_restored(asgi_server: Any, page: Any, viewer_user: Any,
                                                                qwen_history: dict[str, Any]) -> None:
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/monitor/lanes/qwen/")
    page.wait_for_selector("#charts[data-loaded='15m']")
    now: datetime = qwen_history["now"]
    local = lambda at: at.strftime("%Y-%m-%dT%H:%M")  # noqa: E731 - the inputs' format, UTC

    page.fill("#range-from", local(now - timedelta(minutes=2)))
    page.fill("#range-to", local(now - timedelta(minutes=20)))
    page.click("[data-range-custom]")
    page.wait_for_selector("#range-error:not([hidden])")
    assert "`from` must be before `to`" in page.inner_text("#range-error")
    assert "is-invalid" in (page.get_attribute("#range-from", "class") or "")
    assert page.evaluate("location.search") == ""  # a refused window is not kept

    page.fill("#range-from", local(now - timedelta(minutes=20)))
    page.fill("#range-to", local(now + timedelta(days=1)))
    page.click("[data-range-custom]")
    page.wait_for_function("document.getElementById('range-error').textContent.includes('in the future')")
    assert "is-invalid" in (page.get_attribute("#range-to", "class") or "")

    page.fill("#range-to", local(now + timedelta(minutes=1)))
    page.click("[data-range-custom]")
    page.wait_for_selector("#charts[data-loaded='custom']")
    assert page.is_hidden("#range-error")
    query = parse_qs(page.evaluate("location.search")[1:])  # page.url follows replaceState a little later
    assert query == {"from": [local(now - timedelta(minutes=20))], "to": [local(now + timedelta(minutes=1))]}
    assert {m["type"] for m in _markers(page, "#charts")} == {"launch"}

    page.reload()  # the shared link: the same window
    page.wait_for_selector("#charts[data-loaded='custom']")
    assert page.input_value("#range-from") == local(now - timedelta(minutes=20))
    assert len(_markers(page, "#charts")) == 6
    page.click("#ranges button[data-range='6h']")
    page.wait_for_selector("#charts[data-loaded='6h']")
    assert parse_qs(page.evaluate("location.search")[1:]) == {"range": ["6h"]}


def test_a_chosen_window_is_kept_in_the_url_when_a_live_refetch_overtakes_it(
        asgi_server: Any, page: Any, viewer_user: Any, qwen_history: dict[str, Any]) -> None:
    """A live event refetches the window (remembering nothing itself): if it overtakes the
    request of a range the user just chose, that range is still put in the URL."""
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/monitor/lanes/qwen/")
    page.wait_for_selector("#live-status[data-state=open]")
    page.wait_for_selector("#charts[data-loaded='15m']")
    held: list[Any] = []

    def hold_the_first(route: Any) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route("**/api/metrics/series/lane/qwen?range=6h", hold_the_first)
    page.click("#ranges button[data-range='6h']")
    page.wait_for_function("document.querySelector(\"#ranges button[data-range='6h']\").classList.contains('active')")
    _in_thread(lambda: lane_set_observed_state(lane=qwen_history["lane"], state="degraded",
                                               reason="RDMA fell back to TCP", source="watchdog"))
    page.wait_for_selector("#charts[data-loaded='6h']")  # the event's refetch, the click's still held
    assert len(held) == 1
    assert parse_qs(page.evaluate("location.search")[1:]) == {"range": ["6h"]}
    held[0].continue_()


def test_a_refetch_that_lacks_the_latest_tick_keeps_it_and_none_is_drawn_twice(
        asgi_server: Any, page: Any, viewer_user: Any, qwen_history: dict[str, Any]) -> None:
    """A live event refetches the history while ticks arrive: a history read before the last
    tick was stored gets that tick put back, and one that holds it does not draw it twice."""
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/monitor/lanes/qwen/")
    page.wait_for_selector("#live-status[data-state=open]")
    page.wait_for_selector("#charts[data-loaded='15m'][data-events='1']")
    labels = "Chart.getChart(document.querySelector('#charts canvas')).data.labels.length"
    loaded = int(page.evaluate(labels))
    held: list[Any] = []

    def read_now_answer_later(route: Any) -> None:  # the first refetch only
        if held:
            route.continue_()
        else:
            held.append((route, route.fetch()))

    page.route("**/api/metrics/series/lane/qwen?range=15m", read_now_answer_later)
    lane = qwen_history["lane"]
    _in_thread(lambda: lane_set_observed_state(lane=lane, state="degraded", reason="slow", source="watchdog"))
    while not held:  # the event's refetch, read before the tick below
        page.wait_for_timeout(50)

    def scraped() -> None:  # as a scrape does: the sample stored, then the tick broadcast
        at = timezone.now()
        samples_store(at=at, lanes={"qwen": {"gen_tps": 99.0}}, nodes={})
        broadcast(DASHBOARD_GROUP, "metrics.tick", {"at": at.isoformat(), "lanes": {"qwen": {
            "state": "degraded", "scraped": True, "ok": True, "error": "", "figures": {"gen_tps": 99.0}}}, "nodes": {}})

    _in_thread(scraped)
    page.wait_for_selector("#charts[data-ticks='1']")
    assert int(page.evaluate(labels)) == loaded + 1
    route, answer = held[0]
    route.fulfill(response=answer)
    page.wait_for_selector("#charts[data-events='2']")  # drawn: the degraded marker
    assert int(page.evaluate(labels)) == loaded + 1  # the tick put back onto the older history
    assert page.evaluate("Chart.getChart(document.querySelector('#charts canvas')).data.datasets[0].data.at(-1)") == 99

    _in_thread(lambda: lane_set_observed_state(lane=lane, state="serving", reason="", source="watchdog"))
    page.wait_for_selector("#charts[data-events='3']")  # a history that holds the tick
    assert int(page.evaluate(labels)) == loaded + 1


def test_what_is_typed_in_the_window_inputs_outlives_a_live_refetch(
        asgi_server: Any, page: Any, viewer_user: Any, qwen_history: dict[str, Any]) -> None:
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/monitor/lanes/qwen/")
    page.wait_for_selector("#live-status[data-state=open]")
    page.wait_for_selector("#charts[data-loaded='15m'][data-events='1']")
    typed = [(qwen_history["now"] - timedelta(minutes=m)).strftime("%Y-%m-%dT%H:%M") for m in (40, 30)]
    page.fill("#range-from", typed[0])
    page.fill("#range-to", typed[1])
    _in_thread(lambda: lane_set_observed_state(lane=qwen_history["lane"], state="degraded", reason="slow",
                                               source="watchdog"))
    page.wait_for_selector("#charts[data-events='2']")  # the event's refetch drawn
    assert [page.input_value("#range-from"), page.input_value("#range-to")] == typed
    page.click("#ranges button[data-range='6h']")  # a preset: the inputs show its window again
    page.wait_for_selector("#charts[data-loaded='6h']")
    assert page.input_value("#range-from") < typed[0] and page.input_value("#range-to") > typed[1]


def test_the_gateway_chart_marks_every_lanes_events(asgi_server: Any, page: Any, admin_user: Any,
                                                    qwen_history: dict[str, Any]) -> None:
    key = ApiKey.objects.create(name="agents", prefix="sk-spark-ab", secret_hash="y" * 64)
    now = qwen_history["now"]
    for i, minutes in enumerate((20, 10, 5, 1)):
        RequestLog.objects.create(created_at=now - timedelta(minutes=minutes), request_id=f"req-{i}", key=key,
                                  endpoint="chat.completions", lane="qwen", route_reason="explicit", status=200,
                                  prompt_tokens=10, completion_tokens=20, ttft_ms=50.0, latency_ms=100.0)
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/monitor/gateway/")
    page.wait_for_selector("#traffic[data-loaded='1h']")
    markers = _markers(page, ".card")
    assert [m["type"] for m in markers] == ["launch"]
    assert f"qwen: launch job #{qwen_history['job'].pk}" in markers[0]["title"]
    assert markers[0]["left"] < markers[0]["x"] < markers[0]["right"]

    page.fill("#range-from", (now - timedelta(days=9)).strftime("%Y-%m-%dT%H:%M"))
    page.fill("#range-to", now.strftime("%Y-%m-%dT%H:%M"))
    page.click("[data-range-custom]")
    page.wait_for_selector("#range-error:not([hidden])")
    assert "at most 7 days" in page.inner_text("#range-error")
