"""Browser + the real Celery worker and beat: a hang on a serving engine (/health still 200)
turns its lane `stalled` on an open page without a reload; the gateway sends it nothing more;
when the hang clears the lane is `serving` again. The detection time is printed (measured,
not asserted: perf/guardian_detection.py has the figures)."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import httpx
import pytest

from gateway.services import api_key_create
from jobs.models import Job, JobKind, JobState
from jobs.services import lane_job_create
from lanes.models import Lane
from sparksim.cluster import cluster_down
from tests.conftest import browser_login, free_port, wait_for
from tests.jobs.conftest import call_in_thread, create_lane, make_sim_cluster
from tests.portal.processes import CeleryProcesses

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
WINDOW_S = 6


def engine_generation_requests(base_url: str) -> int:
    return len([r for r in httpx.get(f"{base_url}/_sim/requests").json() if r["path"].startswith("/v1/")])


def stuck_request(portal_url: str, secret: str) -> None:
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(
            f"{portal_url}/v1/completions",
            headers={"authorization": f"Bearer {secret}"},
            json={"model": "qwen", "prompt": "hello", "max_tokens": 8},
            timeout=60,
        )


def card_follows(page, progress_at_load: str) -> None:
    """The Guardian card follows too: the hung replica's last progress ages and the node's
    MemAvailable is read, without a reload."""
    page.wait_for_function(
        "t => document.querySelector('#lane-guardian .last-progress').textContent !== t", arg=progress_at_load,
        timeout=30_000,
    )
    page.wait_for_function(
        "() => document.querySelector('#lane-guardian .node-memory[data-node=spark3]').textContent"
        ".includes('GiB available')",
        timeout=30_000,
    )


def test_a_hung_engine_shows_stalled_on_an_open_page_and_gets_no_more_requests(
    asgi_server, page, admin_user, viewer_user, tmp_path: Path
):
    cluster = make_sim_cluster(tmp_path / "sim", ["spark3"], "local", tmp_path)
    procs = CeleryProcesses(
        tmp_path,
        PORTAL_GUARDIAN_INTERVAL_S="1",
        PORTAL_GUARDIAN_PROGRESS_WINDOW_S=str(WINDOW_S),
        PORTAL_GUARDIAN_CANARY_INTERVAL_S="2",
    ).start_all()
    try:
        spark3 = cluster.node("spark3")
        qwen = create_lane("qwen", [spark3], api_port=free_port(spark3.address))
        launch = call_in_thread(lambda: lane_job_create(lane=qwen, kind=JobKind.LAUNCH, user=admin_user))
        wait_for(lambda: Job.objects.get(pk=launch.pk).state == JobState.SUCCEEDED, timeout=120, what="qwen up")
        secret = call_in_thread(lambda: api_key_create(actor=admin_user, name="agent").secret)
        base = qwen.base_url()

        browser_login(page, asgi_server.url, viewer_user.username)
        page.goto(f"{asgi_server.url}/lanes/qwen/")
        page.wait_for_selector("#live-status[data-state=open]")
        assert page.inner_text("#lane-state") == "serving"
        page.evaluate("window.__notReloaded = true")
        progress_at_load = page.inner_text("#lane-guardian .last-progress")

        httpx.post(f"{base}/_sim/faults", json={"hang": True}).raise_for_status()
        hung_at = time.monotonic()

        threading.Thread(target=stuck_request, args=(asgi_server.url, secret), daemon=True).start()
        assert httpx.get(f"{base}/health").status_code == 200
        page.wait_for_selector("#lane-state.state-stalled", timeout=60_000)
        detected_s = time.monotonic() - hung_at
        print(f"hang detected on the open page after {detected_s:.1f} s (window {WINDOW_S} s, tick 1 s)")
        assert "no progress for" in page.inner_text("#lane-state-reason")
        assert page.evaluate("window.__notReloaded") is True
        card_follows(page, progress_at_load)
        assert page.evaluate("window.__notReloaded") is True

        seen = engine_generation_requests(base)
        refused = httpx.post(
            f"{asgi_server.url}/v1/completions",
            headers={"authorization": f"Bearer {secret}"},
            json={"model": "qwen", "prompt": "again", "max_tokens": 8},
            timeout=30,
        )
        assert refused.status_code >= 500  # no serving replica: the gateway does not send it there
        assert engine_generation_requests(base) == seen

        httpx.post(f"{base}/_sim/faults", json={"hang": False}).raise_for_status()
        page.wait_for_selector("#lane-state.state-serving", timeout=60_000)
        assert Lane.objects.get(name="qwen").state_reason == "guardian: progress again"
    finally:
        procs.stop()
        cluster_down(cluster.root)
