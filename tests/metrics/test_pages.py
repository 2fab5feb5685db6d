"""Pages, JSON and the token-protected /metrics: who may see what, bad input, CSV export."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from gateway.models import ApiKey, RequestLog
from lanes.models import Lane, Node
from metrics import views
from metrics.exposition import render_metrics
from metrics.models import Alert, ScrapeTarget, UsageHour
from metrics.rules import RULE_LABELS
from metrics.storage import samples_store, usage_rollup

pytestmark = pytest.mark.django_db
TOKEN = "prom-secret-token-0123456789"


@pytest.fixture
def lane_and_node(db: None) -> None:
    node = Node.objects.create(name="spark1", address="127.0.0.11", transport="local", state="online")
    lane = Lane.objects.create(name="qwen", model_id="org/qwen", image="x@sha256:" + "0" * 64, max_model_len=4096,
                               observed_state="serving")
    lane.members.create(node=node, rank=0)
    ScrapeTarget.objects.create(kind="lane", target="qwen", ok=True, figures={"gen_tps": 42.5, "kv_pct": 12.0})
    ScrapeTarget.objects.create(kind="node", target="spark1", ok=False, error="refused", consecutive_failures=4)


@pytest.fixture
def traffic(db: None) -> ApiKey:
    key = ApiKey.objects.create(name="agents", prefix="sk-spark-ab", secret_hash="y" * 64)
    now = timezone.now()
    for i, (status, latency) in enumerate([(200, 80.0), (200, 400.0), (502, 1200.0)]):
        RequestLog.objects.create(created_at=now - timedelta(seconds=10 + i), request_id=f"req-{i}", key=key,
                                  endpoint="chat.completions", lane="qwen", route_reason="explicit", status=status,
                                  prompt_tokens=10, completion_tokens=20, ttft_ms=50.0, latency_ms=latency)
    usage_rollup(now=now)
    return key


def test_prometheus_metrics_need_the_bearer_token(client: Client, lane_and_node, traffic):
    with override_settings(METRICS_TOKEN=TOKEN):
        assert client.get("/metrics").status_code == 401
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.content.decode())}
    requests = {(s.labels["lane"], s.labels["status"]): s.value for s in families["spark_gateway_requests"].samples
                if s.name == "spark_gateway_requests_total"}
    assert requests == {("qwen", "200"): 2.0, ("qwen", "502"): 1.0}
    buckets = {s.labels["le"]: s.value for s in families["spark_gateway_request_duration_seconds"].samples
               if s.name.endswith("_bucket")}
    assert buckets["0.1"] == 1.0 and buckets["0.5"] == 2.0 and buckets["+Inf"] == 3.0
    lane_state = {s.labels["state"]: s.value for s in families["spark_lane_state"].samples}
    assert lane_state["serving"] == 1.0 and lane_state["stopped"] == 0.0
    up = {s.labels["target"]: s.value for s in families["spark_scrape_up"].samples}
    assert up == {"qwen": 1.0, "spark1": 0.0}
    assert families["spark_lane_generation_tokens_per_second"].samples[0].value == 42.5


def test_prometheus_metrics_are_off_without_a_token(client: Client):
    with override_settings(METRICS_TOKEN=""):
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404


@pytest.mark.parametrize("path", ["/monitor/lanes/qwen/", "/monitor/nodes/spark1/", "/monitor/alerts/"])
def test_viewers_read_charts_and_alerts_outsiders_are_refused(role_clients, lane_and_node, path):
    assert role_clients["viewer"].get(path).status_code == 200
    assert role_clients["outsider"].get(path).status_code == 403
    assert role_clients["anonymous"].get(path).status_code == 302


@pytest.mark.parametrize("path", ["/monitor/gateway/", "/monitor/requests/", "/monitor/requests.csv"])
def test_gateway_figures_are_for_admins(role_clients, traffic, path):
    """As the README's roles table says (the operate row): not a team lead's, not a viewer's.
    (The usage page is every member's, of their teams' keys: tests/metrics/test_usage_charts.py.)"""
    assert role_clients["admin"].get(path).status_code == 200
    assert role_clients["lead"].get(path).status_code == 403
    assert role_clients["viewer"].get(path).status_code == 403
    assert role_clients["outsider"].get(path).status_code == 403


def test_the_gateway_page_shows_ttft_percentiles_and_the_span_it_covers(role_clients, traffic):
    page = role_clients["admin"].get("/monitor/gateway/?range=1h").content.decode()
    summary = page[page.index('id="gateway-span"'):page.index("</table>", page.index('id="gateway-summary"'))]
    assert "UTC (whole hours from the hourly rollup, the first partial hour from the request log)" in summary
    ttft = re.search(r'<th>TTFT p50 / p95</th><td id="summary-ttft">(\d+) / (\d+) ms <span[^>]*data-basis="exact">\(n = (\d+), exact\)', summary)
    assert ttft and 0 < int(ttft.group(1)) <= 50  # the three requests' 50 ms first tokens
    assert int(ttft.group(3)) >= 1
    assert "Mean TTFT" not in page
    week = role_clients["admin"].get("/monitor/gateway/?range=7d").content.decode()
    assert "(whole UTC days, today included, from the daily rollup)" in week


def test_chart_series_json_and_its_denied_and_bad_range_cases(role_clients, lane_and_node):
    """The chart's points through the /api/ NinjaAPI: its auth, role check and error shape."""
    samples_store(at=timezone.now() - timedelta(seconds=5), lanes={"qwen": {"gen_tps": 12.0}}, nodes={})
    body = role_clients["viewer"].get("/api/metrics/series/lane/qwen?range=15m").json()
    assert body["range"] == "15m" and body["points"][0]["v"] == {"gen_tps": 12.0}
    bad = role_clients["viewer"].get("/api/metrics/series/lane/qwen?range=1y")
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "range"]
    unknown = role_clients["viewer"].get("/api/metrics/series/moon/qwen")
    assert unknown.status_code == 404 and "lane, node" in unknown.json()["detail"]
    denied = role_clients["outsider"].get("/api/metrics/series/lane/qwen")
    assert denied.status_code == 403 and "may not" in denied.json()["detail"]
    assert role_clients["anonymous"].get("/api/metrics/series/lane/qwen").status_code == 401
    assert role_clients["viewer"].get("/monitor/series/lane/qwen?range=15m").status_code == 404  # moved to /api/


def test_the_chart_ranges_the_api_accepts_are_the_selectors(role_clients):
    from typing import get_args

    from metrics.charts import CHART_RANGES
    from metrics.schemas import ChartRangeKey

    assert list(get_args(ChartRangeKey)) == list(CHART_RANGES)
    script = (Path(__file__).resolve().parents[2] / "static/metrics/charts.js").read_text()
    assert "`/api/metrics/series/${kind}/" in script


def test_the_dashboard_shows_lane_and_node_cards(role_clients, lane_and_node):
    page = role_clients["viewer"].get("/").content.decode()
    assert 'data-lane="qwen"' in page and 'data-node="spark1"' in page
    assert "scrape failed: refused" in page
    assert '"gen_tps": 42.5' in page  # the initial figures the cards start from


def test_usage_csv_export(role_clients, traffic):
    response = role_clients["admin"].get("/monitor/usage.csv?by=lane&period=day&days=7")
    assert response.streaming
    lines = b"".join(response.streaming_content).decode().strip().splitlines()
    assert lines[0] == "period,lane,requests,errors,prompt_tokens,completion_tokens"
    assert lines[1].endswith(",qwen,3,1,30,60")
    assert response["Content-Disposition"] == 'attachment; filename="usage-by-lane-per-day.csv"'
    by_key = b"".join(role_clients["admin"].get("/monitor/usage.csv?by=key").streaming_content).decode()
    assert ",agents,3,1,30,60" in by_key
    assert UsageHour.objects.count() == 2  # 200 and 502


def test_usage_bad_input_names_the_field(role_clients, traffic):
    response = role_clients["admin"].get("/monitor/usage/?days=0")
    assert response.status_code == 400 and "days:" in response.content.decode()


def test_request_log_filters_paginates_and_details(role_clients, traffic, monkeypatch):
    admin = role_clients["admin"]
    page = admin.get("/monitor/requests/?status=502").content.decode()
    assert "req-2" in page and "req-0" not in page
    errors = admin.get("/monitor/requests/?status=error").content.decode()  # the gateway page's word
    assert "req-2" in errors and "req-0" not in errors and "req-1" not in errors
    ok = admin.get("/monitor/requests/?status=ok").content.decode()
    assert "req-0" in ok and "req-1" in ok and "req-2" not in ok
    assert "req-1" in admin.get(f"/monitor/requests/?key={traffic.pk}&lane=qwen&route=explicit").content.decode()
    bad = admin.get("/monitor/requests/?status=abc&since=yesterday")
    assert bad.status_code == 400
    text = bad.content.decode()
    assert "status:" in text and "since:" in text and "must be ok, error or an HTTP status" in text
    row = RequestLog.objects.get(request_id="req-2")
    detail = admin.get(f"/monitor/requests/{row.pk}/").content.decode()
    assert "502" in detail and "agents" in detail
    monkeypatch.setattr(views, "PAGE_SIZE", 2)  # newest ids first, two a page
    first = admin.get("/monitor/requests/").content.decode()
    assert "req-2" in first and "req-1" in first and "req-0" not in first and 'id="older"' in first
    second = admin.get(f"/monitor/requests/?before={RequestLog.objects.get(request_id='req-1').pk}").content.decode()
    assert "req-0" in second and "req-1" not in second and 'id="older"' not in second


def test_the_request_log_shows_what_the_gateways_page_showed(role_clients, traffic):
    """The columns of the former /gateway/requests/: stream, replica, route score, the token
    estimate and the upstream time."""
    RequestLog.objects.create(request_id="req-streamed", key=traffic, endpoint="chat.completions", lane="qwen",
                              replica=1, route_reason="router", route_score=0.8765, stream=True, status=200,
                              prompt_tokens=7, completion_tokens=9, usage_source="estimate", latency_ms=310.0,
                              upstream_ms=296.0)
    page = role_clients["admin"].get("/monitor/requests/").content.decode()
    row = page[page.index("req-streamed"):page.index("</tr>", page.index("req-streamed"))]
    assert "stream</span>" in row and 'title="replica">#1' in row and "router (0.88)" in row
    assert "(estimate)" in row and "<td>296 ms</td>" in row


def test_only_admins_acknowledge_an_alert_from_the_page(role_clients, admin_user):
    alert = Alert.objects.create(rule="ttft_high", kind="lane", target="qwen", state="open", message="slow",
                                 opened_at=datetime(2026, 11, 30, tzinfo=UTC))
    assert role_clients["viewer"].post(f"/monitor/alerts/{alert.pk}/ack").status_code == 403
    assert role_clients["outsider"].post(f"/monitor/alerts/{alert.pk}/ack").status_code == 403
    assert role_clients["admin"].post(f"/monitor/alerts/{alert.pk}/ack").status_code == 302
    alert.refresh_from_db()
    assert alert.acknowledged_by == admin_user
    header = role_clients["viewer"].get("/monitor/alerts/").content.decode()
    assert 'id="alert-badge" data-count="1"' in header


def test_the_sample_grafana_dashboard_uses_only_metrics_the_portal_exports(lane_and_node, traffic):
    dashboard = json.loads((Path(__file__).resolve().parents[2] / "docs/grafana/spark-lanes-portal.json").read_text())
    used = {name for panel in dashboard["panels"] for target in panel["targets"]
            for name in re.findall(r"spark_[a-z0-9_]+", target["expr"])}
    exported = {sample.name for family in text_string_to_metric_families(render_metrics().decode())
                for sample in family.samples}
    exported |= {f.name for f in text_string_to_metric_families(render_metrics().decode())}
    assert used and used <= exported, used - exported


def test_the_gateway_tabs_lead_to_its_figures_request_log_and_usage(role_clients):
    """The figures, the searchable request log and the usage pages were reachable only from
    a link on the dashboard: the Gateway section's tabs did not name them. One Requests tab:
    the gateway's own "Recent requests" page is the request log now."""
    for path in ("/gateway/", "/gateway/mirror/", "/monitor/gateway/", "/monitor/requests/", "/monitor/usage/"):
        page = role_clients["admin"].get(path).content.decode()
        for link in ('href="/monitor/gateway/"', 'href="/monitor/requests/"', 'href="/monitor/usage/"'):
            assert link in page, (path, link)
        tabs = page[page.index('id="gateway-tabs"'):page.index("</ul>", page.index('id="gateway-tabs"'))]
        assert tabs.count("/monitor/requests/") == 1 and ">Requests</a>" in tabs and "/gateway/requests/" not in tabs


@override_settings(METRICS_ALERT_TTFT_P95_MS=2500, METRICS_ALERT_KV_PCT=90, METRICS_ALERT_KV_FOR_S=120)
def test_the_alerts_page_shows_every_rule_with_its_threshold_and_names_rules_by_label(role_clients):
    Alert.objects.create(rule="ttft_high", kind="lane", target="qwen", state="open", message="slow",
                         opened_at=datetime(2026, 11, 30, tzinfo=UTC))
    page = role_clients["viewer"].get("/monitor/alerts/").content.decode()
    assert "TTFT p95 above 2500 ms" in page and "KV-cache use above 90% for 120 s" in page
    assert page.count('<tr data-rule="') == len(RULE_LABELS) == 11  # every rule: lane_stalled, lane_shedding, the budgets'
    assert "token budget used up" in page
    assert "<td>Slow first token</td>" in page and "<td>ttft_high</td>" not in page


def test_acknowledging_goes_back_only_to_a_page_of_this_site(role_clients):
    alert = Alert.objects.create(rule="ttft_high", kind="lane", target="qwen", state="open", message="slow",
                                 opened_at=datetime(2026, 11, 30, tzinfo=UTC))
    admin = role_clients["admin"]
    assert admin.post(f"/monitor/alerts/{alert.pk}/ack", {"next": "/"})["Location"] == "/"
    for elsewhere in ("/\\evil.example/", "//evil.example/", "https://evil.example/"):
        response = admin.post(f"/monitor/alerts/{alert.pk}/ack", {"next": elsewhere})
        assert response["Location"] == "/monitor/alerts/", elsewhere


def test_each_tick_carries_the_gateways_last_minutes_for_its_traffic_chart(traffic, role_clients):
    """The gateway page's traffic chart was drawn once and never followed the scrapes, and
    showed no latency: the tick's gateway figures now carry the current minutes, slowest
    request included, and the page starts its chart from the last hour's same points (the
    browser following the ticks: tests/e2e/test_gateway_figures_live.py)."""
    from metrics.charts import gateway_traffic
    from metrics.selectors import gateway_live

    now = timezone.now()
    points = gateway_live(now=now)["traffic"]
    assert sum(point["requests"] for point in points) == 3 and sum(point["errors"] for point in points) == 1
    assert max(point["max_latency_ms"] for point in points) == 1200.0
    page = role_clients["admin"].get("/monitor/gateway/").content.decode()
    start = page.index('<script id="traffic-data" type="application/json">')
    rendered = json.loads(page[page.index(">", start) + 1:page.index("</script>", start)])
    assert rendered["points"] == gateway_traffic() == points  # every row is in the last two minutes


def test_a_non_streamed_request_says_why_it_has_no_ttft(role_clients, traffic):
    """TTFT "—" for every non-streamed request read as a missing figure: the log says the
    request was not streamed (a streamed one without a first token keeps "—")."""
    plain = RequestLog.objects.create(request_id="req-plain", endpoint="chat.completions", lane="qwen", status=200,
                                      stream=False, ttft_ms=None, latency_ms=900.0)
    listing = role_clients["admin"].get("/monitor/requests/").content.decode()
    assert 'data-ttft="not-streamed"' in listing
    detail = role_clients["admin"].get(f"/monitor/requests/{plain.pk}/").content.decode()
    assert "— not streamed" in detail
