"""Browser: every page fits a phone's width. At 390 px no page scrolls sideways: a wide table
scrolls inside its own box, long names and commands wrap. Visited as admin (who sees every
page), with rows in every list and an object behind every detail page, the way a phone user
would find them; then the sign-in page, signed out."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from benchmarks.models import BenchmarkLevel, BenchmarkRun
from benchmarks.stats import RequestRecord, level_stats
from gateway.models import RequestLog, Team
from jobs.models import FabricResult, Job, JobKind, JobLogLine, JobState
from lanes.models import Lane, LaneNode, Node
from metrics.models import Alert, AlertState
from routing.models import Prototype, RouterVersion
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


@pytest.fixture
def rows(db: None) -> dict[str, int]:
    for i, name in enumerate(("spark1", "spark2"), 1):
        Node.objects.create(name=name, address=f"127.0.0.{10 + i}", transport="local", state="online",
                            labels=["rack-a", "a-rather-long-label-for-a-phone"])
    lane = Lane.objects.create(name="deepseek-r1-distill", model_id="deepseek-ai/DeepSeek-R1-Distill-Qwen-32B-long-name",
                               image="nvcr.io/nvidia/vllm@sha256:" + "a" * 64, max_model_len=131072,
                               observed_state="serving", revision=1)
    for rank, node in enumerate(("spark1", "spark2")):
        LaneNode.objects.create(lane=lane, node=Node.objects.get(name=node), rank=rank)
    job = Job.objects.create(kind=JobKind.STATUS, lane=lane, state=JobState.SUCCEEDED, params={"nodes": ["spark1"]},
                             started_at=timezone.now(), finished_at=timezone.now(), last_seq=1)
    JobLogLine.objects.create(job=job, seq=1, created_at=timezone.now(),
                              text="docker run --rm --gpus all --ipc host -e VLLM_HOST_IP=127.0.0.11 " + "x" * 200)
    log = RequestLog.objects.create(request_id="req-" + "f" * 32, endpoint="chat.completions",
                                    requested_model="deepseek-r1-distill", lane=lane.name, status=200,
                                    latency_ms=3103.0, ttft_ms=278.0, prompt_tokens=1234, completion_tokens=567)
    Alert.objects.create(rule="kv_high", kind="lane", target=lane.name, state=AlertState.OPEN,
                         message="lane deepseek-r1-distill: KV cache 97% (above 90%) for 120 s", value=97.0,
                         opened_at=timezone.now())
    return {"job": job.pk, "request": log.pk, **_more_rows(lane)}


def _more_rows(lane: Lane) -> dict[str, int]:
    """A benchmark run, a team, a router prototype and version, a fabric result: each has a page."""
    bench = Job.objects.create(kind=JobKind.BENCHMARK, lane=lane, state=JobState.SUCCEEDED, params={"concurrency": [1]})
    run = BenchmarkRun.objects.create(job=bench, lane=lane, lane_name=lane.name, revision_number=1,
                                      label="a rather long label for a phone screen", levels_planned=1,
                                      params={"concurrency": [1], "targets": ["direct"], "cache_mode": "cold",
                                              "prompt_tokens": 100, "output_tokens": 3})
    record = RequestRecord(sent_at=0.0, chunk_times=[0.5, 0.6, 0.7], prompt_tokens=100, output_tokens=3)
    BenchmarkLevel.objects.create(run=run, position=0, target="direct", concurrency=1,
                                  stats=level_stats([record], started_at=0.0, ended_at=0.7))
    team = Team.objects.create(name="agents-and-a-long-team-name")
    prototype = Prototype.objects.create(text="Review every file of the storage package together, " * 4,
                                         label="codebase_review")
    RouterVersion.objects.create(number=1, status="draft", default_lane=lane.name)
    result = FabricResult.objects.create(kind=JobKind.LATENCY_MATRIX, node_set="spark1,spark2", verdict="ok",
                                         headline=2.1, headline_unit="us",
                                         summary={"nodes": ["spark1", "spark2"],
                                                  "cells": {"ib_write_lat": {"spark1>spark2": 2.1, "spark2>spark1": 2.2}}})
    return {"bench": bench.pk, "team": team.pk, "prototype": prototype.pk, "fabric": result.pk}


def pages(rows: dict[str, int]) -> list[str]:
    lane, node = "deepseek-r1-distill", "spark1"
    return [
        "/", "/lanes/", "/lanes/new/", f"/lanes/{lane}/", f"/lanes/{lane}/edit/",
        "/nodes/", "/nodes/new/", f"/nodes/{node}/", f"/nodes/{node}/edit/", "/jobs/", f"/jobs/{rows['job']}/",
        "/users/", "/gateway/", "/gateway/mirror/", "/routing/", "/routing/eval/", "/routing/playground/",
        "/routing/versions/", "/routing/shadow/", "/benchmarks/", "/benchmarks/compare/",
        f"/monitor/lanes/{lane}/", f"/monitor/nodes/{node}/", "/monitor/gateway/", "/monitor/usage/",
        "/monitor/requests/", f"/monitor/requests/{rows['request']}/", "/monitor/alerts/", "/api/docs", "/account/tokens/",
        f"/benchmarks/{rows['bench']}/", "/teams/", f"/teams/{rows['team']}/", f"/routing/prototypes/{rows['prototype']}/",
        "/routing/versions/1/", "/routing/versions/1/evaluate", "/routing/versions/1/publish", "/routing/outcomes/",
        "/routing/replay/", f"/jobs/fabric/results/{rows['fabric']}/",
    ]


def overflow(page: Any) -> int:
    """How far the page scrolls sideways (0: it fits)."""
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def widest(page: Any) -> str:
    """The element reaching furthest right (what to fix), as tag#id.class."""
    return str(page.evaluate("""() => {
      let best = null, right = 0;
      for (const el of document.querySelectorAll("main *")) {
        const r = el.getBoundingClientRect().right;
        if (r > right) { right = r; best = el; }
      }
      return best ? `${best.tagName.toLowerCase()}#${best.id}.${[...best.classList].join(".")} ${Math.round(right)}px` : "";
    }"""))


def test_every_page_fits_a_phone(asgi_server: Any, page: Any, admin_user: Any, rows: dict[str, int]) -> None:
    page.set_viewport_size(PHONE)
    browser_login(page, asgi_server.url, admin_user.username)
    wide = {}
    for path in pages(rows):
        response = page.goto(f"{asgi_server.url}{path}")
        assert response is not None and response.status < 500, path
        page.wait_for_load_state("load")
        if (extra := overflow(page)) > 0:
            wide[path] = (PHONE["width"] + extra, widest(page))
    page.context.clear_cookies()  # signed out: the sign-in page
    page.goto(f"{asgi_server.url}/accounts/login/")
    if (extra := overflow(page)) > 0:
        wide["/accounts/login/"] = (PHONE["width"] + extra, widest(page))
    assert wide == {}, f"pages wider than {PHONE['width']} px (scroll width, widest element): {wide}"
