"""A real Celery worker process (`celery -A portal worker`) on the test database and
Redis runs jobs end to end; killed mid-job, the job becomes `lost` and a status job
reconciles the lane."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from jobs.drift import lane_drift
from jobs.models import Job, JobKind, JobState, JobStep, StepState
from jobs.services import job_reap_lost, job_run, lane_job_create
from jobs.tasks import run_job
from lanes.models import Lane, LaneState
from tests.conftest import wait_for
from tests.jobs.conftest import call_in_thread

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self, queue: str, log: Path) -> None:
        db = settings.DATABASES["default"]
        auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
        url = f"postgres://{auth}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
        env = dict(os.environ, DATABASE_URL=url, DJANGO_SETTINGS_MODULE="portal.settings", PYTHONUNBUFFERED="1")
        self.queue = queue
        self.log = log
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "celery"), "-A", "portal", "worker", "-Q", queue, "-c", "1",
             "-n", f"{queue}@%h", "--without-gossip", "--without-mingle", "--loglevel=INFO"],
            cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )

    def run(self, job: Job) -> None:
        run_job.apply_async(args=(job.pk,), queue=self.queue)

    def kill(self) -> None:
        """SIGKILL the whole worker (main process and pool child), as a crash would."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    w = Worker(f"jobs-test-{uuid.uuid4().hex[:8]}", tmp_path / "worker.log")
    yield w
    w.stop()


def final(job: Job, timeout: float = 90) -> Job:
    wait_for(lambda: Job.objects.get(pk=job.pk).is_final, timeout=timeout, what=f"job #{job.pk} to finish")
    job.refresh_from_db()
    return job


def test_a_celery_worker_launches_and_stops_a_lane(worker, local_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    launch = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    worker.run(launch)
    launch = final(launch)
    assert launch.state == JobState.SUCCEEDED, launch.error + worker.log.read_text()[-3000:]
    assert ":" in launch.worker and Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING
    stop = lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user)
    worker.run(stop)
    assert final(stop).state == JobState.SUCCEEDED
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.STOPPED


def test_a_killed_worker_leaves_a_lost_job_and_status_reconciles(worker, local_cluster, make_lane, admin_user,
                                                                 dispatched):
    # The engine needs ~3 s to load: the worker dies during the health wait, the engine lives on.
    lane = make_lane("qwen", [local_cluster.node("spark3")], extra_args=["--sim-startup-s", "30"])
    launch = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    worker.run(launch)
    wait_for(lambda: JobStep.objects.filter(job=launch, key="wait.health", state=StepState.RUNNING).exists(),
             timeout=90, what="the health wait")
    worker.kill()
    assert Job.objects.get(pk=launch.pk).state == JobState.RUNNING  # nobody could say otherwise

    wait_for(lambda: job_reap_lost(lost_after_s=1) == [launch.pk], timeout=30, what="the reaper")
    launch.refresh_from_db()
    assert launch.state == JobState.LOST and "stopped heartbeating" in launch.error
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.STARTING  # stale until reconciled

    status = Job.objects.get(kind=JobKind.STATUS, lane=lane)
    assert status.pk in dispatched
    call_in_thread(lambda: job_run(job_id=status.pk))
    status.refresh_from_db()
    assert status.state == JobState.SUCCEEDED, status.error
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING
    # D12: the lost launch recorded nothing; the status job read the containers' revision label
    assert status.result["running_revision"] == 1
    assert lane_drift(Lane.objects.get(pk=lane.pk)).as_dict()["running"] == 1
