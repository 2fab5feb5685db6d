"""Benchmark pages and exports: who may read and who may start, with the denied cases; the
start form's errors name the field; exports carry vllm bench serve's keys."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun


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
    assert response.status_code == 400 and b"<b>output_tokens</b>: must be between 1 and 65536" in response.content
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
