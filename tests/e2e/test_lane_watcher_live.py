"""Browser + the real Celery processes: with the only job slot busy with a long launch, the
engine behind a serving lane is killed (-9); the health watcher, on its own periodic queue
and worker, turns the lane `failed` on an open page and in the API, and `serving` again
when the engine answers."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from jobs.models import Job, JobKind, JobState, JobStep, StepState
from jobs.services import job_cancel, lane_job_create
from lanes.models import Lane
from sparksim.cluster import cluster_down
from sparksim.standalone import start_engine
from tests.conftest import SIM_QWEN, browser_login, free_port, wait_for
from tests.jobs.conftest import call_in_thread, create_lane, make_sim_cluster
from tests.portal.processes import CeleryProcesses, kill_engines

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_killed_engine_turns_its_lane_failed_on_the_page_while_every_slot_is_busy(
    asgi_server, page, admin_user, viewer_user, tmp_path: Path
):
    cluster = make_sim_cluster(tmp_path / "sim", ["spark1", "spark3"], "local", tmp_path)
    procs = CeleryProcesses(tmp_path, PORTAL_WORKER_CONCURRENCY="1", PORTAL_LANES_WATCH_INTERVAL_S="1",
                            PORTAL_LANES_WATCH_FAILURES="2").start_all()
    revived = None
    try:
        spark1, spark3 = cluster.node("spark1"), cluster.node("spark3")
        qwen = create_lane("qwen", [spark3], api_port=free_port(spark3.address))
        slow = create_lane("slow", [spark1], extra_args=["--sim-startup-s", "100000"], wait_timeout_s=3600)
        launch = call_in_thread(lambda: lane_job_create(lane=qwen, kind=JobKind.LAUNCH, user=admin_user))
        wait_for(lambda: Job.objects.get(pk=launch.pk).state == JobState.SUCCEEDED, timeout=120, what="qwen up")
        busy = call_in_thread(lambda: lane_job_create(lane=slow, kind=JobKind.LAUNCH, user=admin_user))
        wait_for(lambda: JobStep.objects.filter(job=busy, key="wait.health", state=StepState.RUNNING).exists(),
                 timeout=120, what="the long launch to hold the only job slot")

        browser_login(page, asgi_server.url, viewer_user.username)
        page.goto(f"{asgi_server.url}/lanes/qwen/")
        page.wait_for_selector("#live-status[data-state=open]")
        assert page.inner_text("#lane-state") == "serving"
        page.evaluate("window.__notReloaded = true")

        assert kill_engines(qwen.api_port) >= 1
        page.wait_for_selector("#lane-state.state-failed", timeout=60_000)
        assert "refused" in page.inner_text("#lane-state-reason")
        api = Client()
        api.force_login(viewer_user)
        assert api.get("/api/lanes/qwen").json()["observed_state"] == "failed"
        assert Job.objects.get(pk=busy.pk).state == JobState.RUNNING  # the slot stayed busy throughout

        revived = start_engine(SIM_QWEN, tmp_path / "revived.log", "--served-model-name", "qwen",
                               host=spark3.address, port=qwen.api_port)
        page.wait_for_selector("#lane-state.state-serving", timeout=60_000)
        assert page.evaluate("window.__notReloaded") is True
        assert api.get("/api/lanes/qwen").json()["observed_state"] == "serving"
        assert Lane.objects.get(name="qwen").state_reason.startswith("health watcher: answers again")

        call_in_thread(lambda: job_cancel(job=busy, user=admin_user))
        wait_for(lambda: Job.objects.get(pk=busy.pk).is_final, timeout=120, what="the long launch to end")
    finally:
        if revived is not None:
            revived.stop()
        procs.stop()
        cluster_down(cluster.root)
