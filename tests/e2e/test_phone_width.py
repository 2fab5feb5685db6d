"""Browser: every page fits a phone's width. At 390 px no page scrolls sideways: a wide table
scrolls inside its own box, long names and commands wrap. Visited as admin (who sees every
page), with rows in every list, the way a phone user would find them."""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone

from gateway.models import RequestLog
from jobs.models import Job, JobKind, JobLogLine, JobState
from lanes.models import Lane, LaneNode, Node
from metrics.models import Alert, AlertState
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
    return {"job": job.pk, "request": log.pk}


def pages(rows: dict[str, int]) -> list[str]:
    lane, node = "deepseek-r1-distill", "spark1"
    return [
        "/", "/lanes/", "/lanes/new/", f"/lanes/{lane}/", f"/lanes/{lane}/edit/",
        "/nodes/", "/nodes/new/", f"/nodes/{node}/", f"/nodes/{node}/edit/", "/jobs/", f"/jobs/{rows['job']}/",
        "/users/", "/gateway/", "/gateway/mirror/", "/routing/", "/routing/eval/", "/routing/playground/",
        "/routing/versions/", "/routing/shadow/", "/benchmarks/", "/benchmarks/compare/",
        f"/monitor/lanes/{lane}/", f"/monitor/nodes/{node}/", "/monitor/gateway/", "/monitor/usage/",
        "/monitor/requests/", f"/monitor/requests/{rows['request']}/", "/monitor/alerts/", "/api/docs", "/account/tokens/",
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
    assert wide == {}, f"pages wider than {PHONE['width']} px (scroll width, widest element): {wide}"
