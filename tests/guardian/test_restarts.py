"""The restart policy: `on-failure` brings a killed engine back through an ordinary launch
job (audited, by "the guardian") and stops after its limit; a power-cycled node's lanes are
relaunched; `never` leaves a failed lane alone."""

from __future__ import annotations

import httpx
import pytest

from core.models import AuditEvent
from guardian.memory import memory_guard_tick
from guardian.restarts import restarts_tick
from jobs.models import Job, JobKind, JobState
from jobs.services import lane_job_create
from lanes.models import Lane, LaneState
from lanes.restart_policy import clean_restart_policy, lane_set_restart_policy
from lanes.watcher import lanes_watch_tick
from sparksim.host.node import load_node
from sparksim.host.power import power_cycle
from tests.conftest import wait_for
from tests.jobs.conftest import job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def launched(local_cluster, make_lane, admin_user, **policy: object) -> Lane:
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    lane_set_restart_policy(lane=lane, actor=admin_user, data=policy)
    job = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
    return Lane.objects.get(pk=lane.pk)


def kill_engine(lane: Lane) -> None:
    httpx.post(f"{lane.base_url()}/_sim/faults", json={"exit_on_death": True, "die": True}).raise_for_status()

    def failed() -> bool:
        lanes_watch_tick()
        return Lane.objects.get(pk=lane.pk).observed_state == LaneState.FAILED

    wait_for(failed, what="the watcher to see the engine gone")


def guardian_relaunches(lane: Lane) -> Job:
    before = Job.objects.filter(lane=lane, kind=JobKind.LAUNCH).count()
    assert restarts_tick() == 1
    job = Job.objects.filter(lane=lane, kind=JobKind.LAUNCH).order_by("-pk").first()
    assert job is not None and Job.objects.filter(lane=lane, kind=JobKind.LAUNCH).count() == before + 1
    assert job.created_by is None
    return run_job(job)


def test_on_failure_brings_a_killed_engine_back_and_gives_up_after_its_limit(local_cluster, make_lane, admin_user):
    lane = launched(
        local_cluster, make_lane, admin_user, restart_policy="on-failure", restart_limit=2, restart_backoff_s=0
    )
    for number in (1, 2):
        kill_engine(lane)
        job = guardian_relaunches(lane)
        assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
        assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING
        event = AuditEvent.objects.filter(action="lane.guardian_restart").order_by("-pk").first()
        assert event is not None and event.actor_name == "the guardian" and event.diff["restart"][1] == number
    kill_engine(lane)
    assert restarts_tick() == 0
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.FAILED and lane.state_reason.startswith(
        "gave up after 2 restarts in 30 min"
    )
    assert restarts_tick() == 0  # and stays so


def test_a_power_cycled_nodes_lanes_are_relaunched(local_cluster, make_lane, admin_user):
    lane = launched(local_cluster, make_lane, admin_user, restart_policy="on-failure", restart_backoff_s=0)
    memory_guard_tick()  # learns the node's boot id
    power_cycle(load_node(local_cluster.node("spark3").sim_dir))
    assert memory_guard_tick() == 1
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.FAILED and "node spark3 rebooted (new boot id)" in lane.state_reason
    job = guardian_relaunches(lane)
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING


def test_never_leaves_a_failed_lane_alone_and_the_policy_is_validated(local_cluster, make_lane, admin_user):
    lane = launched(local_cluster, make_lane, admin_user)
    kill_engine(lane)
    assert restarts_tick() == 0
    with pytest.raises(Exception) as refused:
        clean_restart_policy({"restart_policy": "always", "restart_limit": 0})
    errors = refused.value.message_dict  # type: ignore[attr-defined]
    assert errors == {
        "restart_policy": ["must be one of never, on-failure"],
        "restart_limit": ["must be a whole number from 1 to 20"],
    }
