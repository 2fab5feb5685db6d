"""Browser: an admin clicks Launch on the qwen lane, reads the plan, confirms, watches the
log lines arrive without reloading, and sees the lane become serving on its page."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.models import Job
from sparksim.cluster import cluster_down
from tests.conftest import browser_login, free_port, wait_for
from tests.jobs.conftest import create_lane, make_sim_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_admin_launches_qwen_and_watches_it_come_up(asgi_server, page, admin_user, tmp_path: Path, job_threads):
    cluster = make_sim_cluster(tmp_path / "sim", ["spark3"], "local", tmp_path)
    try:
        node = cluster.node("spark3")
        port = free_port(node.address)
        # ~10 s to load (a health poll line every 0.3 s), so the log visibly grows while the
        # admin watches, even when a loaded machine takes seconds to open the job page
        create_lane("qwen", [node], api_port=port, extra_args=["--sim-startup-s", "100"], wait_poll_s=0.3)

        browser_login(page, asgi_server.url, admin_user.username)
        lane_tab = page.context.new_page()
        lane_tab.goto(f"{asgi_server.url}/lanes/qwen/")
        lane_tab.wait_for_selector("#live-status[data-state=open]")
        assert lane_tab.inner_text("#lane-state") == "stopped"
        list_tab = page.context.new_page()
        list_tab.goto(f"{asgi_server.url}/jobs/")
        list_tab.wait_for_selector("#live-status[data-state=open]")

        page.bring_to_front()
        page.goto(f"{asgi_server.url}/lanes/qwen/")
        page.click("#lane-launch")
        plan = page.locator("[data-plan=launch]")
        plan.wait_for(state="visible")
        assert "vllm serve" in plan.inner_text()
        page.click("[data-confirm=launch]")
        page.wait_for_url(f"{asgi_server.url}/jobs/*/")
        page.evaluate("window.__notReloaded = true")

        first = wait_for(lambda: page.evaluate("window.jobLog.lastSeq()"), timeout=30, what="log lines")
        wait_for(lambda: page.evaluate("window.jobLog.lastSeq()") > first + 5, timeout=30, what="more lines")
        page.wait_for_selector("#job-state .state-succeeded", timeout=60_000)
        assert page.evaluate("window.__notReloaded") is True
        page.wait_for_selector("#job-log div:has-text('healthy: /health 200')")
        assert page.locator("#step-0 .state-succeeded").count() == 1

        lane_tab.wait_for_selector("#lane-state.state-serving", timeout=30_000)
        job = Job.objects.get()
        assert job.state == "succeeded"
        # the jobs list, opened before the launch, got the new row and its final state live
        list_tab.wait_for_selector(f"#job-row-{job.pk} .state-succeeded", timeout=30_000)
    finally:
        for thread in job_threads:
            thread.join(timeout=30)
        cluster_down(tmp_path / "sim")


def test_a_job_page_with_100000_lines_renders_a_window_and_loads_earlier_lines(asgi_server, page, viewer_user):
    from django.utils import timezone

    from jobs.models import JobLogLine

    job = Job.objects.create(kind="status", state="succeeded", params={"nodes": ["spark1"]}, last_seq=100_000)
    now = timezone.now()
    JobLogLine.objects.bulk_create(
        (JobLogLine(job=job, seq=i, created_at=now, node="spark1", text=f"line {i}") for i in range(1, 100_001)),
        batch_size=10_000,
    )
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    wait_for(lambda: page.evaluate("window.jobLog.lastSeq()") == 100_000, timeout=30, what="the tail")
    page.wait_for_selector("#job-log div[data-seq='100000']")
    rendered = page.evaluate("window.jobLog.rendered()")
    assert rendered <= 2000
    page.click("#log-earlier")
    wait_for(lambda: page.evaluate("window.jobLog.rendered()") > rendered, timeout=15, what="earlier lines")
    assert page.locator("#job-log div[data-seq='99000']").count() == 1
    assert page.get_attribute("#log-download", "href") == f"/jobs/{job.pk}/log.txt"
