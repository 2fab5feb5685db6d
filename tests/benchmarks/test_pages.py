"""Benchmark pages and exports: who may read and who may start, with the denied cases; the
start form's errors name the field; exports carry vllm bench serve's keys."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun
from benchmarks.selectors import CSV_COLUMNS


def test_viewers_read_every_page_and_export(viewer_client: Client, finished_runs: tuple) -> None:
    a, b = finished_runs
    assert viewer_client.get("/benchmarks/").status_code == 200
    page = viewer_client.get(f"/benchmarks/{a.job_id}/")
    assert page.status_code == 200 and b'id="bench-progress"' in page.content
    assert b"start-form" not in viewer_client.get("/benchmarks/").content  # no start form for viewers
    compare = viewer_client.get(f"/benchmarks/compare/?a={a.job_id}&b={b.job_id}")
    assert compare.status_code == 200
    # TTFT p50 went from 500 ms to 250 ms: the delta and the change are on the page.
    assert b"-250.00" in compare.content and b"-50%" in compare.content
    exported = json.loads(viewer_client.get(f"/benchmarks/{a.job_id}/export.json").content)
    (result,) = exported["results"]
    assert exported["lane_revision"] == 1
    assert result["mean_ttft_ms"] == pytest.approx(500.0) and "p99_itl_ms" in result and "output_throughput" in result
    rows = list(csv.DictReader(io.StringIO(viewer_client.get(f"/benchmarks/{b.job_id}/export.csv").content.decode())))
    assert float(rows[0]["median_ttft_ms"]) == pytest.approx(250.0)


def test_a_missing_run_is_404_on_every_page_and_in_the_api_alike(viewer_client: Client,
                                                                  finished_runs: tuple) -> None:
    a, _ = finished_runs
    # No such job; past the bigint column (the path converter takes any digits); no run ever.
    for missing in (999_999, 2**70, 0):
        for path in (f"/benchmarks/{missing}/", f"/benchmarks/{missing}/export.json",
                     f"/benchmarks/{missing}/export.csv", f"/benchmarks/compare/?a={a.job_id}&b={missing}",
                     f"/api/benchmarks/{missing}", f"/api/benchmarks/{missing}/export?format=csv"):
            assert viewer_client.get(path).status_code == 404, path
    assert viewer_client.get(f"/benchmarks/compare/?a=-1&b={a.job_id}").status_code == 404


def test_the_page_and_the_api_export_the_same_csv(viewer_client: Client, finished_runs: tuple) -> None:
    _, b = finished_runs
    page = viewer_client.get(f"/benchmarks/{b.job_id}/export.csv")
    api = viewer_client.get(f"/api/benchmarks/{b.job_id}/export?format=csv")
    assert page.status_code == api.status_code == 200 and page.content == api.content
    for response in (page, api):
        assert response["Content-Type"] == "text/csv; charset=utf-8"
        assert response["Content-Disposition"] == f'attachment; filename="benchmark-{b.job_id}.csv"'
    header, level, end = page.content.decode().split("\r\n")
    assert header.split(",") == list(CSV_COLUMNS) and level.startswith("direct,") and end == ""


@pytest.mark.parametrize("path", ["/benchmarks/", "/benchmarks/compare/?a=1&b=2", "/benchmarks/1/",
                                  "/benchmarks/1/export.json", "/benchmarks/1/export.csv"])
def test_outsiders_are_denied_and_anonymous_users_sent_to_login(outsider_client: Client, client: Client,
                                                                 finished_runs: tuple, path: str) -> None:
    assert outsider_client.get(path).status_code == 403
    response = client.get(path)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_only_admins_start_a_sweep(viewer_client: Client, lead_client: Client, outsider_client: Client,
                                   finished_runs: tuple) -> None:
    for denied in (viewer_client, lead_client, outsider_client):
        assert denied.post("/benchmarks/start/", {"lane": "qwen", "concurrency": "1"}).status_code == 403
    assert BenchmarkRun.objects.count() == 2


def test_the_start_form_names_the_bad_field(admin_client: Client, finished_runs: tuple) -> None:
    response = admin_client.post("/benchmarks/start/", {"lane": "qwen", "concurrency": "1, two",
                                                        "output_tokens": "0"})
    assert response.status_code == 400
    assert b"<b>concurrency</b>: must be numbers separated by commas" in response.content
    response = admin_client.post("/benchmarks/start/", {"lane": "qwen", "concurrency": "1,2", "output_tokens": "0",
                                                        "target_direct": "on"})
    assert response.status_code == 400 and b"<b>output_tokens</b>: must be between 1 and 65,536" in response.content
    assert BenchmarkRun.objects.count() == 2


def test_an_admin_starts_a_sweep_on_the_lanes_current_revision(admin_client: Client, finished_runs: tuple,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               django_capture_on_commit_callbacks: Any) -> None:
    queued: list[int] = []
    monkeypatch.setattr("jobs.services.dispatch_job", lambda job_id, time_limit_s: queued.append(job_id))
    monkeypatch.setattr("jobs.services.publish_job_state", lambda job: None)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post("/benchmarks/start/", {
            "lane": "qwen", "concurrency": "1,2,4", "prompt_tokens": "256", "output_tokens": "32",
            "target_direct": "on", "target_gateway": "on", "cache_mode": "cache_hit", "label": "capture 64"})
    assert response.status_code == 302
    run = BenchmarkRun.objects.get(label="capture 64")
    assert response["Location"] == f"/benchmarks/{run.job_id}/"
    assert queued == [run.job_id] and run.revision_number == 2 and run.levels_planned == 6
    assert run.params["targets"] == ["direct", "gateway"] and run.params["cache_mode"] == "cache_hit"


def _failed_level(run: BenchmarkRun, target: str) -> None:
    from benchmarks.models import BenchmarkLevel
    from benchmarks.stats import RequestRecord, level_stats

    BenchmarkLevel.objects.create(run=run, position=1, target=target, concurrency=1, stats=level_stats(
        [RequestRecord(sent_at=0.0, error="HTTP 503: no lane")], started_at=0.0, ended_at=1.0))


def test_a_level_where_nothing_succeeded_has_no_figures_to_compare_or_subtract(
        viewer_client: Client, finished_runs: tuple) -> None:
    """Seen live on a stopped lane: every request failed, and the gateway's added TTFT and
    the comparison were computed from the zeros of a level that measured nothing."""
    from benchmarks.selectors import compare_runs, run_payload

    a, b = finished_runs
    BenchmarkRun.objects.filter(pk=a.pk).update(params={**a.params, "targets": ["direct", "gateway"]})
    _failed_level(a, "gateway")  # direct C=1 measured, gateway C=1 failed entirely
    assert run_payload(a)["gateway_added"] == []
    b.levels.update(stats=b.levels.get().stats | {"completed": 0, "failed": 1, "total": 1})
    (row,) = [row for row in compare_runs(a, b) if row["target"] == "direct"]
    figures = {figure["name"]: figure for figure in row["figures"]}
    assert figures["median_ttft_ms"]["a"] == pytest.approx(500.0)
    assert figures["median_ttft_ms"]["b"] is None and figures["median_ttft_ms"]["delta"] is None
    assert figures["failed"]["b"] == 1 and figures["failed"]["delta"] == 1


def test_the_run_page_is_never_cached(viewer_client: Client, finished_runs: tuple) -> None:
    """The back button showed a run as it was at its first render (running, no level),
    and a finished run sends no event that would ever correct it."""
    a, _ = finished_runs
    response = viewer_client.get(f"/benchmarks/{a.job_id}/")
    assert "no-cache" in response["Cache-Control"] and "no-store" in response["Cache-Control"]


def test_the_start_form_offers_a_serving_lane_and_says_which_do_not_serve(
        admin_client: Client, finished_runs: tuple) -> None:
    from lanes.models import Lane

    stopped = Lane.objects.get(name="qwen")
    serving = Lane.objects.create(name="zeta", model_id="org/zeta", image="img@sha256:" + "0" * 64,
                                  max_model_len=32768, observed_state="serving", desired_state="serving")
    page = admin_client.get("/benchmarks/").content.decode()
    assert f'<option value="{stopped.name}" data-state="stopped">qwen (stopped)</option>' in page
    assert f'<option value="{serving.name}" data-state="serving" selected>zeta</option>' in page


def test_the_figures_read_as_words_with_units_and_counts_as_whole_numbers(
        viewer_client: Client, finished_runs: tuple) -> None:
    """Not "median_ttft_ms (ms)" nor a count of "1.00": the compare table and the run page's
    headers read "TTFT p50 (ms)", counts are whole numbers (the key stays in a tooltip)."""
    a, b = finished_runs
    page = viewer_client.get(f"/benchmarks/compare/?a={a.job_id}&b={b.job_id}").content.decode()
    assert '<td title="median_ttft_ms">TTFT p50 (ms)</td>' in page and "median_ttft_ms (ms)" not in page
    completed = page[page.index('<td title="completed">completed</td>'):]
    cells = re.findall(r"<td>([^<]*)</td>", completed[:completed.index("</tr>")])
    assert cells[:2] and all("." not in cell for cell in cells[:3]), cells
    run = viewer_client.get(f"/benchmarks/{a.job_id}/").content.decode()
    assert '<th title="median_ttft_ms">TTFT p50 (ms)</th>' in run


def test_the_compare_page_without_runs_named_offers_a_picker_and_bad_numbers_are_400(
        viewer_client: Client, finished_runs: tuple) -> None:
    """/benchmarks/compare/ opened bare was a blank 400: it picks two runs (the two newest
    selected); a value that is no run number is 400 naming a and b."""
    a, b = finished_runs
    bare = viewer_client.get("/benchmarks/compare/")
    page = bare.content.decode()
    assert bare.status_code == 200 and 'id="compare-pick"' in page
    assert f'<option value="{a.job_id}"' in page and f'<option value="{b.job_id}"' in page
    bad = viewer_client.get("/benchmarks/compare/?a=x&b=1")
    assert bad.status_code == 400 and "a and b must be run numbers." in bad.content.decode()


@pytest.mark.django_db
def test_the_compare_page_before_any_run_says_so(viewer_client: Client) -> None:
    page = viewer_client.get("/benchmarks/compare/")
    assert page.status_code == 200 and 'id="compare-none"' in page.content.decode()


def test_the_start_form_replays_a_request_log_window_with_goodput_bounds(
        admin_client: Client, finished_runs: tuple, monkeypatch: pytest.MonkeyPatch,
        django_capture_on_commit_callbacks: Any) -> None:
    """The form's replay box: the window in the portal's time zone, the lane that served it and
    the speed; the sweep's levels (the form pre-fills them) are left out; goodput's bounds and
    the slice width pass through."""
    from datetime import datetime, timedelta

    from django.utils import timezone

    from gateway.models import RequestLog
    monkeypatch.setattr("jobs.services.dispatch_job", lambda job_id, time_limit_s: None)
    monkeypatch.setattr("jobs.services.publish_job_state", lambda job: None)
    zone = timezone.get_current_timezone()
    logged = datetime(2026, 12, 1, 9, 30, tzinfo=zone)
    RequestLog.objects.create(request_id="peak-1", endpoint="chat.completions", lane="qwen", status=200,
                              prompt_tokens=40, completion_tokens=4, latency_ms=5.0, received_at=logged,
                              created_at=logged + timedelta(seconds=1))
    page = admin_client.get("/benchmarks/").content.decode()
    assert 'name="replay_since"' in page and 'name="slo_ttft_ms"' in page
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post("/benchmarks/start/", {
            "lane": "qwen", "concurrency": "1,2,4", "target_direct": "on", "label": "tuesday peak",
            "replay_since": "2026-12-01T09:00", "replay_until": "2026-12-01T10:30:15", "replay_lane": "qwen",
            "replay_speed": "2", "slo_ttft_ms": "500", "slo_tpot_ms": "50", "slice_s": "300"})
    body = response.content.decode()
    assert response.status_code == 302, body[body.find("start-errors"):][:600]
    run = BenchmarkRun.objects.get(label="tuesday peak")
    assert run.params["replay"] == {"since": datetime(2026, 12, 1, 9, 0, tzinfo=zone).isoformat(),
                                    "until": datetime(2026, 12, 1, 10, 30, 15, tzinfo=zone).isoformat(),
                                    "lane": "qwen", "speed": 2.0}
    assert "concurrency" not in run.params or run.params["concurrency"] is None
    assert (run.params["slo_ttft_ms"], run.params["slo_tpot_ms"], run.params["slice_s"]) == (500, 50, 300)


def test_a_bad_replay_window_is_refused_on_the_form_naming_the_rule(admin_client: Client, finished_runs: tuple) -> None:
    before = BenchmarkRun.objects.count()
    for fields, message in (
        ({"replay_since": "yesterday", "replay_until": "2026-12-01T10:00"}, b"from must be a date and time"),
        ({"replay_since": "2026-12-01T09:00"}, b"to must be a date and time (empty)"),
        ({"replay_since": "2026-12-01T09:00", "replay_until": "2026-12-03T09:00"}, b"at most a day later"),
        ({"replay_since": "2026-12-01T09:00", "replay_until": "2026-12-01T10:00", "replay_speed": "fast"},
         b"speed must be a number"),
    ):
        response = admin_client.post("/benchmarks/start/", {"lane": "qwen", "target_direct": "on", **fields})
        assert response.status_code == 400 and b"<b>replay</b>: " in response.content and message in response.content, fields
        assert b'id="replay-box" open' in response.content  # the box stays open with what was typed
    assert BenchmarkRun.objects.count() == before
