"""The runner's guarantees: one claim per job, a final state whatever happens (traceback
kept), time limit, cancel, the per-node lock, the reaper, and log lines that survive
invalid UTF-8 and 1 MB lines."""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobKind, JobLogLine, JobState
from jobs.runner import JobContext, job_execute
from jobs.services import JobConflict, job_create, job_reap_lost, lane_job_create
from lanes.models import Lane, LaneState
from tests.jobs.conftest import call_in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def status_job(local_cluster, admin_user) -> Job:
    return job_create(kind=JobKind.STATUS, user=admin_user, nodes=[local_cluster.node("spark1")])


def test_a_redelivered_task_never_runs_the_job_twice(local_cluster, admin_user):
    job = status_job(local_cluster, admin_user)
    calls: list[int] = []

    def kind(ctx: JobContext) -> dict:
        calls.append(ctx.job.pk)
        return {"ok": True}

    assert call_in_thread(lambda: job_execute(job_id=job.pk, kinds={JobKind.STATUS: kind})) == JobState.SUCCEEDED
    assert call_in_thread(lambda: job_execute(job_id=job.pk, kinds={JobKind.STATUS: kind})) is None  # the redelivery
    assert calls == [job.pk]


def test_a_crash_in_a_kind_ends_failed_with_its_traceback(local_cluster, admin_user):
    job = status_job(local_cluster, admin_user)

    def kind(ctx: JobContext) -> dict:
        raise KeyError("boom")

    assert call_in_thread(lambda: job_execute(job_id=job.pk, kinds={JobKind.STATUS: kind})) == JobState.FAILED
    job.refresh_from_db()
    assert job.error == "KeyError: 'boom'"
    assert 'raise KeyError("boom")' in job.traceback
    assert job.finished_at is not None


def test_the_time_limit_kills_the_command_and_ends_timed_out(local_cluster, admin_user):
    job = status_job(local_cluster, admin_user)
    node = local_cluster.node("spark1")

    def kind(ctx: JobContext) -> dict:
        ctx.run(ctx.endpoint(node), "echo started; sleep 60")
        return {}

    # The limit counts from the job's start: long enough for a loaded machine to start the command.
    assert call_in_thread(lambda: job_execute(job_id=job.pk, kinds={JobKind.STATUS: kind}, time_limit_s=5.5)) == JobState.TIMED_OUT
    job.refresh_from_db()
    assert "time limit of 5.5s" in job.error
    assert JobLogLine.objects.filter(job=job, text="started").exists()


def test_cancel_kills_the_running_command_on_the_node(local_cluster, admin_user, tmp_path):
    from jobs.services import job_cancel
    from tests.conftest import wait_for

    job = status_job(local_cluster, admin_user)
    node = local_cluster.node("spark1")
    marker = tmp_path / "still-running"
    sleep = f"sleep 30.{os.getpid()}"  # no other test run on this machine runs this very command

    def kind(ctx: JobContext) -> dict:
        ctx.run(ctx.endpoint(node), f"echo started; {sleep}; touch {marker}")
        return {}

    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(call_in_thread(lambda: job_execute(job_id=job.pk, kinds={JobKind.STATUS: kind}))))
    thread.start()
    wait_for(lambda: JobLogLine.objects.filter(job=job, text="started").exists(), what="the command to start")
    job_cancel(job=job, user=admin_user)
    thread.join(timeout=20)
    assert outcome == [JobState.CANCELLED]
    import subprocess

    assert sleep not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not marker.exists()


def test_invalid_utf8_and_a_1mb_line_are_stored_safely(local_cluster, admin_user):
    job = status_job(local_cluster, admin_user)
    node = local_cluster.node("spark1")

    def kind(ctx: JobContext) -> dict:
        ctx.run(ctx.endpoint(node), r"printf 'bad \xff\xfe bytes\n'; head -c 1048576 /dev/zero | tr '\0' a; echo; echo after")
        return {}

    assert call_in_thread(lambda: job_execute(job_id=job.pk, kinds={JobKind.STATUS: kind})) == JobState.SUCCEEDED
    texts = list(JobLogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))
    assert "bad \ufffd\ufffd bytes" in texts
    long_line = next(t for t in texts if t.startswith("aaaa"))
    assert len(long_line) < 9000 and "line truncated" in long_line
    assert "after" in texts
    seqs = list(JobLogLine.objects.filter(job=job).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_two_launches_on_one_node_at_once_one_is_refused_naming_the_other(local_cluster, make_lane, admin_user):
    spark1, spark2 = local_cluster.node("spark1"), local_cluster.node("spark2")
    first = make_lane("deepseek", [spark1, spark2])
    second = make_lane("qwen", [spark2])
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def launch(lane: Lane) -> None:
        from django.db import connection

        barrier.wait()
        try:
            results[lane.name] = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
        except JobConflict as exc:
            results[lane.name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=launch, args=(lane,)) for lane in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    jobs = [r for r in results.values() if isinstance(r, Job)]
    refusals = [r for r in results.values() if isinstance(r, JobConflict)]
    assert len(jobs) == 1 and len(refusals) == 1
    assert f"job #{jobs[0].pk}" in str(refusals[0])
    assert "spark2 is busy" in str(refusals[0])


def test_status_is_not_blocked_by_a_running_launch(local_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    assert lane_job_create(lane=lane, kind=JobKind.STATUS, user=admin_user).state == JobState.QUEUED


def test_the_reaper_marks_silent_jobs_lost_and_queues_a_status_job(local_cluster, make_lane, admin_user, dispatched):
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    stale = timezone.now() - timedelta(minutes=10)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, started_at=stale, heartbeat_at=stale)
    fresh = lane_job_create(lane=make_lane("other", [local_cluster.node("spark1")]), kind=JobKind.STATUS,
                            user=admin_user)
    Job.objects.filter(pk=fresh.pk).update(state=JobState.RUNNING, heartbeat_at=timezone.now())

    assert job_reap_lost() == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.LOST and "stopped heartbeating" in job.error
    reconcile = Job.objects.get(kind=JobKind.STATUS, lane=lane)
    assert reconcile.pk in dispatched
    assert Job.objects.get(pk=fresh.pk).state == JobState.RUNNING
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.STOPPED  # the status job decides


def test_celerys_soft_time_limit_ends_the_job_timed_out(local_cluster, admin_user):
    from celery.exceptions import SoftTimeLimitExceeded

    job = status_job(local_cluster, admin_user)

    def kind(ctx: JobContext) -> dict:
        raise SoftTimeLimitExceeded()

    assert call_in_thread(lambda: job_execute(job_id=job.pk, kinds={JobKind.STATUS: kind})) == JobState.TIMED_OUT
    job.refresh_from_db()
    assert job.error == "Celery soft time limit reached" and job.finished_at is not None
