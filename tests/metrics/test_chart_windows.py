"""Chart annotations and custom windows, through the endpoints that feed the charts: a lane's
series carries its launches, stops, restarts (the guardian's too), degraded/recovered and
alerts in the window — not those outside it, not another lane's; the gateway's traffic
carries every lane's. A custom window's rules (both ends, from < to, a bounded span, not in
the future) are a 422 naming the parameter; the tier follows the span."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.audit import audit_record
from jobs.models import Job
from lanes.lane_states import lane_set_observed_state
from lanes.models import Lane
from lanes.restart_policy import RESTART_ACTION
from metrics.charts import chart_series
from metrics.models import Alert, AlertState, SampleHour, SampleMinute
from metrics.storage import samples_store

pytestmark = pytest.mark.django_db


def _lane(name: str) -> Lane:
    return Lane.objects.create(name=name, model_id=f"org/{name}", image="x@sha256:" + "0" * 64, max_model_len=4096,
                               observed_state="serving", desired_state="serving")


def _job(lane: Lane, kind: str, at: datetime) -> Job:
    job = Job.objects.create(kind=kind, state="succeeded", lane=lane)
    Job.objects.filter(pk=job.pk).update(created_at=at)
    return job


def _aged(action_filter: dict[str, Any], at: datetime) -> None:
    from core.models import AuditEvent

    AuditEvent.objects.filter(**action_filter).update(created_at=at)


@pytest.fixture
def history(db: None) -> dict[str, Any]:
    """qwen: a launch 10 min ago, a stop 2 h ago (outside 15 min), degraded 8 min ago and
    recovered 6 min ago, a guardian restart 4 min ago (with its launch job), an alert opened
    5 min ago and resolved 3 min ago; other: a launch and an alert 5 min ago."""
    now = timezone.now()
    qwen, other = _lane("qwen"), _lane("other")
    launch = _job(qwen, "launch", now - timedelta(minutes=10))
    _job(qwen, "stop", now - timedelta(hours=2))
    _job(other, "launch", now - timedelta(minutes=5))
    _job(qwen, "status", now - timedelta(minutes=9))  # not an annotation
    lane_set_observed_state(lane=qwen, state="degraded", reason="RDMA fell back to TCP", source="watchdog")
    _aged({"action": "lane.state", "diff__observed_state": ["serving", "degraded"]}, now - timedelta(minutes=8))
    lane_set_observed_state(lane=qwen, state="serving", reason="RDMA back", source="watchdog")
    _aged({"action": "lane.state", "diff__observed_state": ["degraded", "serving"]}, now - timedelta(minutes=6))
    relaunch = _job(qwen, "launch", now - timedelta(minutes=4))
    audit_record(actor=None, system_name="the guardian", action=RESTART_ACTION, obj=qwen,
                 after={"job": relaunch.pk, "restart": 1, "after": "engine exited"})
    _aged({"action": RESTART_ACTION}, now - timedelta(minutes=4))
    Alert.objects.create(rule="ttft_p95", kind="lane", target="qwen", state=AlertState.RESOLVED, message="TTFT p95 high",
                         opened_at=now - timedelta(minutes=5), resolved_at=now - timedelta(minutes=3))
    Alert.objects.create(rule="ttft_p95", kind="lane", target="other", state=AlertState.OPEN, message="other slow",
                         opened_at=now - timedelta(minutes=5))
    samples_store(at=now - timedelta(seconds=5), lanes={"qwen": {"gen_tps": 12.0}}, nodes={})
    return {"now": now, "launch": launch, "relaunch": relaunch}


def test_a_lanes_series_carries_its_events_in_the_window_only(role_clients: Any, history: dict[str, Any]) -> None:
    body = role_clients["viewer"].get("/api/metrics/series/lane/qwen?range=15m").json()
    assert [(e["type"], e["label"]) for e in body["events"]] == [
        ("launch", f"launch job #{history['launch'].pk} (succeeded)"),
        ("degraded", "degraded: RDMA fell back to TCP"),
        ("recovered", "recovered (serving after degraded)"),
        ("alert", "alert: TTFT p95 high"),
        ("guardian_restart", "guardian restart 1: engine exited"),  # its launch job is not marked twice
        ("resolved", "resolved: TTFT p95 high"),
    ]
    assert body["events"][0]["href"] == f"/jobs/{history['launch'].pk}/"
    assert body["events"][4]["href"] == f"/jobs/{history['relaunch'].pk}/"
    assert body["bucket_s"] == 0 and body["points"][0]["v"] == {"gen_tps": 12.0}
    six_hours = role_clients["viewer"].get("/api/metrics/series/lane/qwen?range=6h").json()
    assert "stop" in [e["type"] for e in six_hours["events"]]  # 2 h ago: inside 6 h, outside 15 min
    assert sorted(e["type"] for e in role_clients["viewer"].get("/api/metrics/series/lane/other").json()["events"]) == [
        "alert", "launch"]
    assert role_clients["viewer"].get("/api/metrics/series/node/host-qwen").json()["events"] == []


def test_a_custom_window_picks_its_events_and_its_tier(role_clients: Any, history: dict[str, Any]) -> None:
    now = history["now"]
    window = {"from": (now - timedelta(minutes=7)).isoformat(), "to": (now - timedelta(minutes=4, seconds=30)).isoformat()}
    body = role_clients["viewer"].get("/api/metrics/series/lane/qwen", window).json()
    assert body["range"] == "custom" and body["bucket_s"] == 0
    assert [e["type"] for e in body["events"]] == ["recovered", "alert"]
    assert body["points"] == []  # the one sample is 5 s old: after `to`
    naive = (now - timedelta(minutes=20)).astimezone(UTC).replace(tzinfo=None).isoformat()  # no offset: UTC
    assert role_clients["viewer"].get("/api/metrics/series/lane/qwen", {"from": naive, "to": now.isoformat()}).json()[
        "events"][0]["type"] == "launch"
    SampleMinute.objects.create(kind="lane", target="qwen", ts=now - timedelta(hours=10), values={"gen_tps": 3.0})
    SampleHour.objects.create(kind="lane", target="qwen", ts=now - timedelta(days=3), values={"gen_tps": 4.0})
    for span, bucket, points in ((timedelta(hours=12), 60, [3.0]), (timedelta(days=5), 3600, [4.0])):
        body = role_clients["viewer"].get("/api/metrics/series/lane/qwen",
                                          {"from": (now - span).isoformat(), "to": now.isoformat()}).json()
        assert body["bucket_s"] == bucket and [p["v"]["gen_tps"] for p in body["points"]] == points
    assert chart_series("lane", "qwen", "7d", now=now)["bucket_s"] == 3600


@pytest.mark.parametrize(("query", "field", "words"), [
    ({"from": "2026-12-01T10:00:00Z"}, "to", "`to` is missing"),
    ({"to": "2026-12-01T10:00:00Z"}, "from", "`from` is missing"),
    ({"from": "yesterday", "to": "2026-12-01T10:00:00Z"}, "from", "not a date and time"),
    ({"from": "2026-12-01T10:00:00Z", "to": "2026-12-01T10:00:00Z"}, "from", "`from` must be before `to`"),
    ({"from": "2026-12-01T11:00:00Z", "to": "2026-12-01T10:00:00+00:00"}, "from", "`from` must be before `to`"),
    ({"from": "2026-10-01T10:00:00Z", "to": "2026-11-20T10:00:00Z"}, "to", "at most 31 days"),
    ({"from": "2026-12-01T10:00:00Z", "to": "2999-01-01T00:00:00Z"}, "to", "`to` is in the future"),
])
def test_a_bad_window_is_a_422_naming_the_parameter(role_clients: Any, history: dict[str, Any], query: dict[str, str],
                                                    field: str, words: str) -> None:
    response = role_clients["viewer"].get("/api/metrics/series/lane/qwen", query)
    assert response.status_code == 422  # as a bad `range` is: one status for a bad query parameter
    detail = response.json()["detail"]
    assert detail[0]["loc"] == ["query", field] and words in detail[0]["msg"], detail


def test_the_gateway_traffic_carries_every_lanes_events_and_is_admins_only(
    role_clients: Any, history: dict[str, Any]
) -> None:
    body = role_clients["admin"].get("/api/gateway/traffic").json()
    assert body["range"] == "1h" and body["bucket_s"] == 60
    labels = [e["label"] for e in body["events"]]
    assert f"qwen: launch job #{history['launch'].pk} (succeeded)" in labels
    assert "other: launch job" in " ".join(labels) and "lane other: alert: other slow" in labels
    assert not any("stop job" in label for label in labels)  # 2 h ago
    now = history["now"]
    day = role_clients["admin"].get("/api/gateway/traffic", {"from": (now - timedelta(hours=8)).isoformat(),
                                                             "to": now.isoformat()}).json()
    assert day["range"] == "custom" and day["bucket_s"] == 3600 and "stop" in [e["type"] for e in day["events"]]
    long = role_clients["admin"].get("/api/gateway/traffic", {"from": (now - timedelta(days=8)).isoformat(),
                                                              "to": now.isoformat()})
    assert long.status_code == 422 and "at most 7 days" in long.json()["detail"][0]["msg"]
    assert role_clients["viewer"].get("/api/gateway/traffic").status_code == 403
    assert role_clients["outsider"].get("/api/metrics/series/lane/qwen?range=15m").status_code == 403
    assert role_clients["anonymous"].get("/api/gateway/traffic").status_code == 401
