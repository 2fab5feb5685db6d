"""Hostile input on every entry point added since the first sweep (issue 11), driven as an
admin: the benchmarks API and pages, lane replicas and replica actions, the router pages,
the metrics pages (request-log filters, usage CSV, alert acknowledgement), metrics' API
(chart series), the gateway's request log API and totals, and the older job and fabric
entries these reach.

Each row is one request: huge, negative and non-finite numbers, NUL and control characters,
Unicode digits ("²".isdigit() is true, int("²") raises), wrong types, unknown values,
over-long text. Each must answer the documented 4xx (never 5xx) with an error naming the
field, and leave every saved row as it was. Page actions that answer with a redirect and a
message (the pages' pattern) must name the field in that message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings

from benchmarks.models import BenchmarkLevel, BenchmarkRun
from core.consumers import CLOSE_INVALID_PAYLOAD, CLOSE_NOT_FOUND, CLOSE_UNSUPPORTED_DATA
from core.models import AuditEvent
from gateway.models import ApiKey, RequestLog
from jobs.models import Job
from lanes.models import Lane, LaneNode, LaneReplica, LaneRevision, Node
from metrics.models import Alert
from routing.models import Prototype, RouterVersion
from tests.lanes.rule_cases import lane_data
from tests.portal.test_input_rules import _socket

NAN, INF = float("nan"), float("inf")
HUGE = 10**30
JSON = "application/json"
FORM = "form"


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    url: str
    body: Any = None
    kind: str = JSON  # JSON body, or FORM (urlencoded POST)
    status: tuple[int, ...] = (422,)
    names: str = ""  # a word the error must contain: the field (or parameter) it is about
    extra: dict[str, Any] = field(default_factory=dict)


def api(id: str, method: str, url: str, body: Any = None, status: tuple[int, ...] = (422,), names: str = "") -> Case:
    return Case(id, method, url, body, JSON, status, names)


def page(id: str, url: str, data: dict[str, Any] | None = None, status: tuple[int, ...] = (400,), names: str = "",
         method: str = "POST") -> Case:
    return Case(id, method, url, data, FORM, status, names)


BENCH = {"lane": "qwen", "concurrency": [1]}
BENCH_FORM = {"lane": "qwen", "concurrency": "1"}

CASES: list[Case] = [
    # ---- /api/benchmarks: every parameter through the one service
    api("bench-warmup-nan", "POST", "/api/benchmarks", {**BENCH, "warmup": NAN}, names="warmup"),
    api("bench-warmup-inf", "POST", "/api/benchmarks", {**BENCH, "warmup": INF}, names="warmup"),
    api("bench-prompt-1e400", "POST", "/api/benchmarks", {**BENCH, "prompt_tokens": 10**400}, names="prompt_tokens"),
    api("bench-concurrency-nan", "POST", "/api/benchmarks", {**BENCH, "concurrency": [NAN]}, names="concurrency"),
    api("bench-concurrency-inf", "POST", "/api/benchmarks", {**BENCH, "concurrency": [INF]}, names="concurrency"),
    api("bench-concurrency-2**63", "POST", "/api/benchmarks", {**BENCH, "concurrency": [2**63]}, names="concurrency"),
    api("bench-concurrency-int", "POST", "/api/benchmarks", {**BENCH, "concurrency": 4}, names="concurrency"),
    api("bench-rates-neg", "POST", "/api/benchmarks", {"lane": "qwen", "request_rates": [-1], "duration_s": 5},
        names="request_rates"),
    api("bench-label-nul", "POST", "/api/benchmarks", {**BENCH, "label": "a\x00b"}, names="label"),
    api("bench-label-bell", "POST", "/api/benchmarks", {**BENCH, "label": "a\x07b"}, names="label"),
    api("bench-label-long", "POST", "/api/benchmarks", {**BENCH, "label": "x" * 5000}, names="label"),
    api("bench-lane-nul", "POST", "/api/benchmarks", {**BENCH, "lane": "q\x00wen"}, names="lane"),
    api("bench-lane-list", "POST", "/api/benchmarks", {**BENCH, "lane": ["qwen"]}, names="lane"),
    api("bench-cache-mode-list", "POST", "/api/benchmarks", {**BENCH, "cache_mode": ["cold"]}, names="cache_mode"),
    api("bench-targets-unknown", "POST", "/api/benchmarks", {**BENCH, "targets": ["direct", "moon"]}, names="targets"),
    api("bench-time-limit-1e400", "POST", "/api/benchmarks", {**BENCH, "time_limit_s": 10**400}, names="time_limit_s"),
    api("bench-time-limit-nan", "POST", "/api/benchmarks", {**BENCH, "time_limit_s": NAN}, names="time_limit_s"),
    api("bench-reason-nul", "POST", "/api/benchmarks", {**BENCH, "reason": "a\x00"}, names="reason"),
    api("bench-unknown-param", "POST", "/api/benchmarks", {**BENCH, "bogus": 1}, names="bogus"),
    api("bench-body-not-object", "POST", "/api/benchmarks", [1, 2]),
    api("bench-list-limit-0", "GET", "/api/benchmarks?limit=0", names="limit"),
    api("bench-list-offset-huge", "GET", f"/api/benchmarks?offset={HUGE}", names="offset"),
    api("bench-list-lane-long", "GET", "/api/benchmarks?lane=" + "x" * 100, names="lane"),
    api("bench-compare-huge", "GET", f"/api/benchmarks/compare?a={HUGE}&b=1", names="a"),
    api("bench-compare-2**63", "GET", f"/api/benchmarks/compare?a={2**63}&b=1", names="a"),
    api("bench-compare-text", "GET", "/api/benchmarks/compare?a=abc&b=1", names="a"),
    api("bench-compare-missing", "GET", "/api/benchmarks/compare?a=1", names="b"),
    api("bench-get-huge", "GET", f"/api/benchmarks/{HUGE}", status=(404,)),
    api("bench-export-format", "GET", "/api/benchmarks/{run}/export?format=xml", names="format"),
    api("bench-export-huge", "GET", f"/api/benchmarks/{2**63}/export", status=(404,)),
    # ---- lane actions and job parameters (replicas)
    api("action-replica-huge", "POST", "/api/jobs/lanes/qwen/status", {"params": {"replica": HUGE}}, names="replica"),
    api("action-replica-nan", "POST", "/api/jobs/lanes/qwen/status", {"params": {"replica": NAN}}, names="replica"),
    api("action-replica-text", "POST", "/api/jobs/lanes/qwen/status", {"params": {"replica": "1"}}, names="replica"),
    api("action-replica-absent", "POST", "/api/jobs/lanes/qwen/status", {"params": {"replica": 5}}, names="replica"),
    api("action-reason-nul", "POST", "/api/jobs/lanes/qwen/stop", {"params": {"reason": "a\x00"}}, names="reason"),
    api("action-time-limit-1e400", "POST", "/api/jobs/lanes/qwen/status", {"params": {"time_limit_s": 10**400}},
        names="time_limit_s"),
    # Two replicas: the time limit is computed from wait_timeout_s, which must be checked first.
    api("action-wait-text", "POST", "/api/jobs/lanes/qwen/launch", {"params": {"wait_timeout_s": "abc"}},
        names="wait_timeout_s"),
    api("action-wait-1e400", "POST", "/api/jobs/lanes/qwen/restart", {"params": {"wait_timeout_s": 10**400}},
        names="wait_timeout_s"),
    api("action-unknown", "POST", "/api/jobs/lanes/qwen/explode", {"params": {}}, names="action"),
    api("action-param-key-nul", "POST", "/api/jobs/lanes/qwen/status", {"params": {"a\x00": 1}}, names="unknown"),
    api("fabric-collective-list", "POST", "/api/jobs/fabric/nccl-test",
        {"nodes": ["spark1", "spark2"], "params": {"collective": ["all_reduce"]}}, names="collective"),
    api("fabric-node-nul", "POST", "/api/jobs/fabric/nccl-test", {"nodes": ["spark1", "a\x00"]}, names="nodes"),
    api("fabric-busbw-nan", "POST", "/api/jobs/fabric/nccl-test",
        {"nodes": ["spark1", "spark2"], "params": {"min_busbw_gbps": NAN}}, names="min_busbw_gbps"),
    # ---- lane replicas through PATCH /api/lanes
    api("replica-port-0", "PATCH", "/api/lanes/qwen", {"replicas": [{"nodes": ["spark1"], "api_port": 0}]},
        names="api_port"),
    api("replica-port-2**63", "PATCH", "/api/lanes/qwen", {"replicas": [{"nodes": ["spark1"], "api_port": 2**63}]},
        names="api_port"),
    api("replica-node-nul", "PATCH", "/api/lanes/qwen", {"replicas": [{"nodes": ["a\x00"]}]}, names="nodes"),
    api("replica-no-nodes", "PATCH", "/api/lanes/qwen", {"replicas": [{"nodes": []}]}, names="nodes"),
    api("replica-none", "PATCH", "/api/lanes/qwen", {"replicas": []}, names="replicas"),
    api("replica-too-many", "PATCH", "/api/lanes/qwen", {"replicas": [{"nodes": [f"n{i}"]} for i in range(40)]},
        names="replicas"),
    api("replica-node-twice", "PATCH", "/api/lanes/qwen",
        {"replicas": [{"nodes": ["spark1"]}, {"nodes": ["spark1"], "api_port": 8001}]}, names="replica"),
    api("replica-nodes-not-list", "PATCH", "/api/lanes/qwen", {"replicas": [{"nodes": "spark1"}]}, names="nodes"),
    api("lane-kv-9e400", "PATCH", "/api/lanes/qwen", {"kv_cache_memory_bytes": "9" * 400 + "G"},
        names="kv_cache_memory_bytes"),
    api("lane-degraded-huge", "PATCH", "/api/lanes/qwen", {"degraded_context_limit": HUGE},
        names="degraded_context_limit"),
    api("lane-spec-nan", "PATCH", "/api/lanes/qwen", {"speculative_config": {"n": NAN}}, names="speculative_config"),
    api("lane-fallback-nul", "PATCH", "/api/lanes/qwen", {"fallback": "a\x00"}, names="fallback"),
    api("lane-secret-name-nul", "PATCH", "/api/lanes/qwen", {"secret_env": {"A\x00": "b"}}, names="secret_env"),
    api("watchdog-enabled-text", "PATCH", "/api/fabric/watchdogs/qwen", {"enabled": "maybe"}, names="enabled"),
    # A misspelt field is refused naming it, not dropped (a PATCH answered 200 having changed nothing).
    api("lane-unknown-field", "PATCH", "/api/lanes/qwen", {"max_model_lenn": 4096}, names="max_model_lenn"),
    api("replica-unknown-field", "PATCH", "/api/lanes/qwen", {"replicas": [{"nodes": ["spark1"], "port": 9}]},
        names="port"),
    api("node-unknown-field", "PATCH", "/api/nodes/spark1", {"memory": 64}, names="memory"),
    api("watchdog-unknown-field", "PATCH", "/api/fabric/watchdogs/qwen", {"threshold": 3}, names="threshold"),
    api("key-unknown-field", "POST", "/api/gateway/keys", {"name": "k2", "rpm": 5}, names="rpm"),
    api("action-unknown-field", "POST", "/api/jobs/lanes/qwen/status", {"parameters": {"replica": 0}},
        names="parameters"),
    # ---- the gateway's request log and totals
    api("requests-status-superscript", "GET", "/api/gateway/requests?status=%C2%B2", names="status"),
    api("requests-status-word", "GET", "/api/gateway/requests?status=teapot", names="status"),
    api("requests-status-huge", "GET", f"/api/gateway/requests?status={HUGE}", names="status"),
    api("requests-key-huge", "GET", f"/api/gateway/requests?key={HUGE}", names="key"),
    api("requests-limit-0", "GET", "/api/gateway/requests?limit=0", names="limit"),
    api("requests-route-unknown", "GET", "/api/gateway/requests?route=moon", names="route"),
    api("requests-since-word", "GET", "/api/gateway/requests?since=yesterday", names="since"),
    api("requests-until-before-since", "GET", "/api/gateway/requests?since=2026-01-02T00:00Z&until=2026-01-01T00:00Z",
        names="until"),
    api("requests-before-2**63", "GET", f"/api/gateway/requests?before={2**63}", names="before"),
    api("totals-hours-neg", "GET", "/api/gateway/totals/key?hours=-1", names="hours"),
    api("totals-by-unknown", "GET", "/api/gateway/totals/moon", status=(404,)),
    # ---- metrics' API
    api("series-range", "GET", "/api/metrics/series/lane/qwen?range=1y", names="range"),
    api("series-kind", "GET", "/api/metrics/series/moon/qwen?range=15m", status=(404,)),
    api("series-name-long", "GET", "/api/metrics/series/lane/" + "x" * 100, names="name"),
    api("job-log-search-limit-huge", "GET", f"/api/jobs/{{job}}/log/search?q=a&limit={HUGE}", names="limit"),
    api("fabric-results-limit-huge", "GET", f"/api/fabric/results?limit={HUGE}", names="limit"),
    api("fabric-results-kind", "GET", "/api/fabric/results?kind=moon", names="kind"),
    # ---- benchmark pages
    page("bench-form-warmup-nan", "/benchmarks/start/", {**BENCH_FORM, "warmup": "nan"}, names="warmup"),
    page("bench-form-warmup-inf", "/benchmarks/start/", {**BENCH_FORM, "warmup": "inf"}, names="warmup"),
    page("bench-form-timeout-1e999", "/benchmarks/start/", {**BENCH_FORM, "timeout_s": "1e999"}, names="timeout_s"),
    page("bench-form-concurrency-nan", "/benchmarks/start/", {**BENCH_FORM, "concurrency": "nan"},
         names="concurrency"),
    page("bench-form-lane-nul", "/benchmarks/start/", {**BENCH_FORM, "lane": "q\x00"}, names="lane"),
    page("bench-form-label-bell", "/benchmarks/start/", {**BENCH_FORM, "label": "a\x07"}, names="label"),
    page("bench-compare-huge", f"/benchmarks/compare/?a={HUGE}&b=1", method="GET", status=(404,)),
    page("bench-compare-text", "/benchmarks/compare/?a=abc&b=1", method="GET", names="a and b"),
    page("bench-run-huge", f"/benchmarks/{HUGE}/", method="GET", status=(404,)),
    page("bench-export-huge", f"/benchmarks/{2**63}/export.csv", method="GET", status=(404,)),
    # ---- replica actions on the lane page
    page("replica-form-superscript", "/jobs/lanes/qwen/status/", {"replica": "²"}, status=(302,), names="replica"),
    page("replica-form-huge", "/jobs/lanes/qwen/status/", {"replica": str(HUGE)}, status=(302,), names="replica"),
    page("replica-form-absent", "/jobs/lanes/qwen/status/", {"replica": "7"}, status=(302,), names="replica"),
    page("replica-form-text", "/jobs/lanes/qwen/status/", {"replica": "one"}, status=(302,), names="replica"),
    page("fabric-form-node-nul", "/jobs/fabric/", {"action": "nccl-test", "nodes": ["spark1", "a\x00"]},
         status=(302,), names="nodes"),
    page("lane-form-port-superscript", "/lanes/new/", {**lane_data(name="lane2"), "nodes": "spark1",
                                                        "replicas": "spark1 port=²"}, status=(200,), names="port="),
    page("lane-form-len-superscript", "/lanes/new/", {**lane_data(name="lane2", max_model_len="²"), "nodes": "spark1"},
         status=(200,), names="max_model_len"),
    page("lane-form-len-5000-digits", "/lanes/new/", {**lane_data(name="lane2", max_model_len="9" * 5000),
                                                       "nodes": "spark1"}, status=(200,), names="max_model_len"),
    # ---- router pages
    page("router-source-text", "/routing/versions/", {"source": "abc"}, status=(404,)),
    page("router-source-superscript", "/routing/versions/", {"source": "²"}, status=(404,)),
    page("router-source-huge", "/routing/versions/", {"source": str(HUGE)}, status=(404,)),
    page("router-shadow-superscript", "/routing/shadow/", {"version": "²"}, status=(404,)),
    page("router-shadow-word", "/routing/shadow/", {"version": "off"}, status=(404,)),
    page("router-version-huge", f"/routing/versions/{HUGE}/", method="GET", status=(404,)),
    page("playground-lane-nul", "/routing/playground/send", {"prompt": "hi", "lane": "q\x00"}, names="lane"),
    page("prototypes-import-nul", "/routing/prototypes/import",
         {"format": "json", "file": SimpleUploadedFile("p.json", json.dumps([{"text": "a\x00b", "label": "chat"}]).encode())},
         status=(302,), names="`text` contains a NUL"),
    page("eval-import-nul", "/routing/eval/import",
         {"format": "csv", "file": SimpleUploadedFile("e.csv", b"text,label\n\"a\x00b\",chat\n")},
         status=(302,), names="`text` contains a NUL"),
    page("prototypes-import-not-utf8", "/routing/prototypes/import",
         {"format": "csv", "file": SimpleUploadedFile("p.csv", b"text,label\n\xff\xfe,chat\n")},
         status=(302,), names="not UTF-8"),
    page("prototypes-import-nan", "/routing/prototypes/import",
         {"format": "json", "file": SimpleUploadedFile("p.json", b'[{"text": "hi", "label": "chat", "enabled": NaN}]')},
         status=(302,), names="enabled"),
    page("router-evaluate-huge", f"/routing/versions/{2**63}/evaluate?share=nan", method="GET", status=(404,)),
    # ---- gateway and metrics pages
    # /gateway/requests/ redirects here: its hostile filters are the request log's.
    page("monitor-requests-key-superscript", "/monitor/requests/?key=%C2%B2", method="GET", names="key"),
    page("monitor-requests-status-superscript", "/monitor/requests/?status=%C2%B2", method="GET", names="status"),
    page("monitor-requests-status-word", "/monitor/requests/?status=teapot", method="GET", names="status"),
    page("monitor-requests-key-huge", f"/monitor/requests/?key={HUGE}", method="GET", names="key"),
    page("monitor-requests-before-huge", f"/monitor/requests/?before={2**63}", method="GET", names="before"),
    page("monitor-requests-status", "/monitor/requests/?status=9999", method="GET", names="status"),
    page("monitor-requests-since", "/monitor/requests/?since=yesterday", method="GET", names="since"),
    page("monitor-requests-range", "/monitor/requests/?since=2026-01-02&until=2026-01-01", method="GET",
         names="until"),
    page("monitor-requests-route", "/monitor/requests/?route=moon", method="GET", names="route"),
    page("monitor-request-huge", f"/monitor/requests/{HUGE}/", method="GET", status=(404,)),
    page("usage-days-huge", f"/monitor/usage/?days={HUGE}", method="GET", names="days"),
    page("usage-csv-period", "/monitor/usage.csv?period=century", method="GET", names="period"),
    page("usage-csv-by", "/monitor/usage.csv?by=moon&days=0", method="GET", names="by"),
    page("alert-ack-huge", f"/monitor/alerts/{HUGE}/ack", {}, status=(404,)),
    page("key-revoke-huge", f"/gateway/keys/{HUGE}/revoke", {}, status=(404,)),
    page("user-action-huge", f"/users/{HUGE}/role/", {"role": "viewer"}, status=(404,)),
]


SNAPSHOT_MODELS = (Node, Lane, LaneReplica, LaneNode, LaneRevision, Job, BenchmarkRun, BenchmarkLevel, Alert, ApiKey,
                   RequestLog, RouterVersion, Prototype, AuditEvent)


def snapshot() -> dict[str, list[dict[str, Any]]]:
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in SNAPSHOT_MODELS}


def send(client: Client, case: Case, world: dict[str, Any]) -> Any:
    url = case.url.replace("{run}", str(world["run"])).replace("{job}", str(world["job"]))
    if case.method == "GET":
        return client.get(url)
    if case.kind == FORM:
        return client.post(url, case.body or {})
    return client.generic(case.method, url, data=json.dumps(case.body, allow_nan=True), content_type=JSON)


def error_text(response: Any) -> str:
    """What the client is told: the body (JSON or page) and any message the page queued."""
    told = [str(message) for message in get_messages(response.wsgi_request)]
    if not response.streaming:
        told.append(response.content.decode(errors="replace"))
    return "\n".join(told)


@pytest.fixture
def admin(admin_client: Client) -> Iterator[Client]:
    admin_client.raise_request_exception = False  # a 500 is a status to assert, not an exception
    yield admin_client


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_input_is_refused_naming_the_field_and_changes_nothing(
    world: dict[str, Any], admin: Client, case: Case
) -> None:
    before = snapshot()
    response = send(admin, case, world)
    assert response.status_code in case.status, (response.status_code, error_text(response)[:2000])
    if case.names:
        assert case.names in error_text(response), error_text(response)[:2000]
    assert snapshot() == before


@pytest.mark.parametrize("target", ["/x\ny", "/\\evil.example", "//evil.example", "https://evil.example/", "/\x07"])
def test_an_alert_acknowledgement_returns_only_to_a_path_of_this_site(
    world: dict[str, Any], admin: Client, target: str
) -> None:
    alert = Alert.objects.get()
    response = admin.post(f"/monitor/alerts/{alert.pk}/ack", {"next": target})
    assert response.status_code == 302 and response["Location"] == "/monitor/alerts/"
    assert Alert.objects.get().acknowledged_at is not None
    assert admin.post(f"/monitor/alerts/{alert.pk}/ack", {"next": "/lanes/qwen/"})["Location"] == "/lanes/qwen/"


# ---------------------------------------------------------------- sockets


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("frame, code", [({"text_data": "not json {"}, CLOSE_INVALID_PAYLOAD),
                                         ({"text_data": "NaN"}, CLOSE_INVALID_PAYLOAD),
                                         ({"text_data": "\x00"}, CLOSE_INVALID_PAYLOAD),
                                         ({"bytes_data": b"\x00\xff"}, CLOSE_UNSUPPORTED_DATA)])
async def test_the_header_socket_closes_with_a_code_on_a_bad_frame(
    viewer_user: User, frame: dict[str, Any], code: int
) -> None:
    ws = await _socket(viewer_user, "/ws/header/")
    connected, _ = await ws.connect(timeout=30)
    assert connected
    await ws.receive_json_from(timeout=30)  # the open-alert count
    await ws.send_to(**frame)
    assert (await ws.receive_output(timeout=30)) == {"type": "websocket.close", "code": code}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/header/x/", "/ws/jobs/abc/", "/ws/benchmarks/1/", "/ws/%00/", "/ws/" + "x" * 5000])
async def test_an_unknown_socket_path_is_refused_with_4404(viewer_user: User, path: str) -> None:
    ws = await _socket(viewer_user, path)
    connected, code = await ws.connect(timeout=30)
    assert not connected and code == CLOSE_NOT_FOUND


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("message", [{"after_seq": 10**30}, {"after_seq": 2**63}, {"after_seq": -1}, {"after_seq": True},
                                     {"after_seq": 1.5}, {"after_seq": "1"}, [1, 2], "after_seq", None])
async def test_the_job_log_socket_answers_a_bad_resume_with_an_error_naming_after_seq(
    viewer_user: User, message: Any
) -> None:
    job = await database_sync_to_async(Job.objects.create)(kind="status", params={"nodes": []})
    ws = await _socket(viewer_user, f"/ws/jobs/{job.pk}/")
    connected, _ = await ws.connect(timeout=30)
    assert connected
    await ws.send_json_to(message)
    answer = await _answer(ws)
    if isinstance(message, dict) and message["after_seq"] in (10**30, 2**63):
        # Past every line: nothing to replay, and the socket stays usable.
        assert answer == {"event": "job.resumed", "data": {"job": job.pk, "last_seq": message["after_seq"]}}
    else:
        assert answer == {"event": "error", "data": {"after_seq": "must be a whole number >= 0"}}
    await ws.send_json_to({"after_seq": 0})
    assert (await _answer(ws))["event"] == "job.resumed"
    await ws.disconnect()


async def _answer(ws: Any) -> dict[str, Any]:
    """The next message that answers the client (a resume is followed by the job's current
    state, sent as a snapshot: core.consumers.PortalConsumer.send_current)."""
    while True:
        message = await ws.receive_json_from(timeout=30)
        if not message.get("snapshot"):
            return message


# ---------------------------------------------------------------- 10 MB bodies


@pytest.mark.parametrize("url, content_type", [
    ("/api/benchmarks", JSON), ("/api/lanes/qwen", JSON), ("/benchmarks/start/", "application/x-www-form-urlencoded"),
    ("/routing/playground/send", "application/x-www-form-urlencoded"),
    ("/monitor/alerts/{alert}/ack", "application/x-www-form-urlencoded"),
])
def test_a_10_mb_body_is_413_on_every_entry_and_logged_without_a_traceback(
    world: dict[str, Any], admin: Client, caplog: pytest.LogCaptureFixture, url: str, content_type: str
) -> None:
    before = snapshot()
    body = "label=" + "x" * (10 * 2**20) if content_type != JSON else json.dumps({"label": "x" * (10 * 2**20)})
    method = "PATCH" if url == "/api/lanes/qwen" else "POST"
    url = url.replace("{alert}", str(Alert.objects.get().pk))
    with caplog.at_level("INFO"):
        response = admin.generic(method, url, data=body, content_type=content_type)
    assert response.status_code == 413 and b"larger than the limit" in response.content
    assert snapshot() == before
    assert not [record for record in caplog.records if record.exc_info or record.exc_text], \
        [record.getMessage() for record in caplog.records]


@pytest.mark.parametrize("authorization", ["", "Bearer", "Bearer \x00", "Bearer " + "x" * 100_000, "Basic Zm9vOmJhcg==",
                                           "Bearer s3cret\n", "bearer s3cret", "Bearer s3cr\u00e9t"])
def test_the_portal_metrics_refuse_a_bad_bearer_with_401(world: dict[str, Any], authorization: str) -> None:
    client = Client(raise_request_exception=False)
    with override_settings(METRICS_TOKEN="s3cret"):
        response = client.get("/metrics", HTTP_AUTHORIZATION=authorization)
        assert response.status_code == 401 and response["WWW-Authenticate"] == 'Bearer realm="metrics"'
        good = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret")
    assert good.status_code == 200 and good["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
