"""The benchmarks API: viewers read runs, levels, comparisons and exports; only admins start
sweeps (the denied cases below); bad input answers 422 naming the field and the rule, the
same rule the page and the service give."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.test import Client

from benchmarks.models import BenchmarkRun
from jobs.models import Job, JobState
from jobs.services import job_run
from lanes.models import Lane


def post(client: Client, body: Any) -> Any:
    return client.post("/api/benchmarks", body, content_type="application/json")


def test_viewers_read_runs_levels_comparisons_and_exports(viewer_client: Client, finished_runs: tuple) -> None:
    a, b = finished_runs
    listed = viewer_client.get("/api/benchmarks").json()
    assert [(run["job"], run["revision"], run["levels_done"]) for run in listed] == [(b.job_id, 2, 1),
                                                                                   (a.job_id, 1, 1)]
    assert viewer_client.get("/api/benchmarks?lane=other").json() == []
    detail = viewer_client.get(f"/api/benchmarks/{a.job_id}").json()
    (level,) = detail["levels"]
    assert detail["revision"] == 1 and level["label"] == "C=1"
    assert level["stats"]["median_ttft_ms"] == pytest.approx(500.0)
    compared = viewer_client.get(f"/api/benchmarks/compare?a={a.job_id}&b={b.job_id}").json()
    (row,) = compared["rows"]
    ttft = next(figure for figure in row["figures"] if figure["name"] == "median_ttft_ms")
    assert ttft["delta"] == pytest.approx(-250.0) and ttft["relative"] == pytest.approx(-0.5)
    exported = viewer_client.get(f"/api/benchmarks/{b.job_id}/export").json()
    assert exported["lane_revision"] == 2 and exported["results"][0]["mean_ttft_ms"] == pytest.approx(250.0)
    response = viewer_client.get(f"/api/benchmarks/{b.job_id}/export?format=csv")
    assert response["Content-Type"].startswith("text/csv")
    (csv_row,) = csv.DictReader(io.StringIO(response.content.decode()))
    assert float(csv_row["median_ttft_ms"]) == pytest.approx(250.0)


def test_missing_runs_and_bad_query_parameters(viewer_client: Client, finished_runs: tuple) -> None:
    a, _ = finished_runs
    assert viewer_client.get("/api/benchmarks/999999").status_code == 404
    assert viewer_client.get(f"/api/benchmarks/compare?a={a.job_id}&b=999999").status_code == 404
    assert viewer_client.get(f"/api/benchmarks/{2**70}").status_code == 404
    response = viewer_client.get(f"/api/benchmarks/{a.job_id}/export?format=xml")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"][-1] == "format"
    response = viewer_client.get(f"/api/benchmarks/compare?a={a.job_id}")
    assert response.status_code == 422 and response.json()["detail"][0]["loc"][-1] == "b"


@pytest.mark.parametrize("path", ["/api/benchmarks", "/api/benchmarks/compare?a=1&b=2", "/api/benchmarks/1",
                                  "/api/benchmarks/1/export"])
def test_outsiders_and_anonymous_users_are_denied_reading(outsider_client: Client, client: Client,
                                                          finished_runs: tuple, path: str) -> None:
    assert outsider_client.get(path).status_code == 403
    assert client.get(path).status_code == 401


def test_only_admins_start_a_sweep(viewer_client: Client, lead_client: Client, outsider_client: Client,
                                   client: Client, finished_runs: tuple) -> None:
    body = {"lane": "qwen", "concurrency": [1]}
    for denied in (viewer_client, lead_client, outsider_client):
        response = post(denied, body)
        assert response.status_code == 403 and "may not" in response.json()["detail"]
    assert post(client, body).status_code == 401
    assert BenchmarkRun.objects.count() == 2


@pytest.mark.parametrize(("body", "field", "rule"), [
    ({"concurrency": [1]}, "lane", "pick a lane"),
    ({"lane": "nowhere", "concurrency": [1]}, "lane", "no lane of that name"),
    ({"lane": "qwen"}, "concurrency", "give the concurrency levels"),
    ({"lane": "qwen", "concurrency": [0]}, "concurrency", "between 1 and 4,096"),
    ({"lane": "qwen", "concurrency": "4"}, "concurrency", "non-empty list"),
    ({"lane": "qwen", "concurrency": [1], "request_rates": [2.0]}, "request_rates", "not both"),
    ({"lane": "qwen", "concurrency": [1], "cache_mode": "warm"}, "cache_mode", "cold, cache_hit"),
    ({"lane": "qwen", "concurrency": [1], "output_tokens": 2.5}, "output_tokens", "whole number"),
    ({"lane": "qwen", "concurrency": [1], "targets": ["elsewhere"]}, "targets", "direct, gateway"),
    ({"lane": "qwen", "concurrency": [1], "bogus": 1}, "bogus", "unknown parameter"),
])
def test_bad_input_is_refused_naming_the_field_and_rule(admin_client: Client, finished_runs: tuple,
                                                        body: dict[str, Any], field: str, rule: str) -> None:
    response = post(admin_client, body)
    assert response.status_code == 422, response.content
    messages = {entry["loc"][-1]: entry["msg"] for entry in response.json()["detail"]}
    assert rule in messages[field], messages
    assert BenchmarkRun.objects.count() == 2


def test_a_body_that_is_not_an_object_is_a_4xx(admin_client: Client, finished_runs: tuple) -> None:
    for body in ("[1, 2]", "not json", '"qwen"'):
        response = admin_client.post("/api/benchmarks", body, content_type="application/json")
        assert 400 <= response.status_code < 500, (body, response.status_code)


def test_an_admin_starts_a_sweep_through_the_api_and_reads_it_back(
        admin_client: Client, bench_lane: Lane, dispatched: list[int]) -> None:
    response = post(admin_client, {"lane": bench_lane.name, "concurrency": [1, 2], "prompt_tokens": 64,
                                   "output_tokens": 8, "label": "from the api"})
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert response.json()["kind"] == "benchmark" and dispatched == [job_id]
    job_run(job_id=job_id)
    assert Job.objects.get(pk=job_id).state == JobState.SUCCEEDED
    detail = admin_client.get(f"/api/benchmarks/{job_id}").json()
    assert detail["label"] == "from the api" and detail["revision"] == 1 and detail["levels_planned"] == 2
    assert [(level["concurrency"], level["stats"]["completed"]) for level in detail["levels"]] == [(1, 1), (2, 2)]
    assert detail["params"]["prompt_tokens"] == 64 and detail["params"]["cache_mode"] == "cold"
    listed = admin_client.get("/api/benchmarks").json()
    assert listed[0]["job"] == job_id and listed[0]["state"] == "succeeded" and listed[0]["levels_done"] == 2
