"""A lane's desired state is saved with its launch/stop job, before the worker can start
it: the worker's lane.state events carried the old desired state otherwise."""

from __future__ import annotations

import pytest

from jobs.models import Job, JobKind
from jobs.services import JobConflict, lane_job_create
from lanes.models import DesiredState, Lane

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit runs as it does in production



@pytest.fixture
def lane(qwen_lane: Lane) -> Lane:
    Lane.objects.filter(pk=qwen_lane.pk).update(desired_state=DesiredState.SERVING)
    qwen_lane.refresh_from_db()
    return qwen_lane


def test_a_stop_job_is_dispatched_only_once_the_lane_wants_to_be_stopped(
    lane: Lane, admin_user, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_by_worker: list[str] = []
    monkeypatch.setattr(
        "jobs.services.dispatch_job",
        lambda job_id, time_limit_s: seen_by_worker.append(Lane.objects.get(pk=lane.pk).desired_state),
    )
    lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user)
    assert seen_by_worker == [DesiredState.STOPPED]


def test_a_refused_launch_leaves_the_desired_state_alone(lane: Lane, admin_user, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobs.services.dispatch_job", lambda job_id, time_limit_s: None)
    Lane.objects.filter(pk=lane.pk).update(desired_state=DesiredState.STOPPED)
    lane.refresh_from_db()
    lane_job_create(lane=lane, kind=JobKind.STATUS, user=admin_user)
    Job.objects.update(kind=JobKind.STOP, state="running")  # a mutating job holds the node
    with pytest.raises(JobConflict):
        lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    assert Lane.objects.get(pk=lane.pk).desired_state == DesiredState.STOPPED
