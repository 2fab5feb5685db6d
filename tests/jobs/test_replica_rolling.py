"""Lane jobs on a lane of two replicas (sparksim nodes, local transport): a launch and a
restart go one replica at a time, each healthy before the next; a restart under load
through two uvicorn gateway workers drops no request; a job may act on one replica."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.services import api_key_create
from jobs.models import JobKind, JobState
from jobs.services import lane_job_create
from lanes.models import Lane, LaneNode, LaneReplica, LaneRevision, LaneState
from sparksim.host.node import load_node
from sparksim.host.storage import seed_placeholder_model
from tests.conftest import WorkerProcesses
from tests.jobs.conftest import SimCluster, create_lane, job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def two_replica_lane(cluster: SimCluster) -> Lane:
    """Qwen on spark1 (replica 0) and spark2 (replica 1), revision 2 holding both."""
    lane = create_lane("qwen", [cluster.node("spark1")])
    LaneNode.objects.create(lane=lane, node=cluster.node("spark2"), replica=1, rank=0)
    seed_placeholder_model(load_node(cluster.node("spark2").sim_dir), lane.model_id)
    LaneReplica.objects.create(lane=lane, index=0)
    LaneReplica.objects.create(lane=lane, index=1)
    config = dict(LaneRevision.objects.get(lane=lane, number=1).config)
    config.update(revision=2, replicas=[{"nodes": ["spark1"], "api_port": None},
                                        {"nodes": ["spark2"], "api_port": None}])
    LaneRevision.objects.create(lane=lane, number=2, config=config)
    Lane.objects.filter(pk=lane.pk).update(revision=2)
    return lane


def replica_states(lane: Lane) -> list[str]:
    return list(LaneReplica.objects.filter(lane=lane).order_by("index").values_list("observed_state", flat=True))


def test_a_rolling_launch_then_a_rolling_restart_under_load_drops_no_request(
    local_cluster: SimCluster, admin_user: Any, worker_processes: Callable[..., WorkerProcesses],
) -> None:
    lane = two_replica_lane(local_cluster)
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.SUCCEEDED, launch.error + job_log_text(launch)
    assert replica_states(lane) == [LaneState.SERVING, LaneState.SERVING]
    log = job_log_text(launch)
    assert log.index("lane qwen replica 0: serving") < log.index("lane qwen replica 1: starting")

    secret = api_key_create(actor=admin_user, name="load").secret
    workers = worker_processes(2)
    outcomes: list[tuple[int, str]] = []
    stop = threading.Event()

    def client(number: int) -> None:
        turn = 0
        with httpx.Client(timeout=120) as http:
            while not stop.is_set():
                url = workers.urls[(number + turn) % 2]
                response = http.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                                     json={"model": "qwen", "max_tokens": 4, "messages": [
                                         {"role": "user", "content": f"Agent {number}: step {turn} of the refactor."}]})
                outcomes.append((response.status_code, response.headers.get("x-spark-lane-replica", "")
                                 if response.status_code == 200 else response.text[:300]))
                turn += 1

    clients = [threading.Thread(target=client, args=(number,), daemon=True) for number in range(3)]
    for thread in clients:
        thread.start()
    try:
        restart = run_job(lane_job_create(lane=lane, kind=JobKind.RESTART, user=admin_user))
    finally:
        stop.set()
        for thread in clients:
            thread.join(timeout=150)
    assert restart.state == JobState.SUCCEEDED, restart.error + job_log_text(restart)
    log = job_log_text(restart)
    # One replica at a time: replica 0 serves again before replica 1 is touched, and each
    # one drained before it stopped.
    assert log.index("lane qwen replica 0: serving") < log.index("lane qwen replica 1: stopping")
    assert log.count("drained") == 2
    assert replica_states(lane) == [LaneState.SERVING, LaneState.SERVING]
    failed = [outcome for outcome in outcomes if outcome[0] != 200]
    assert outcomes and not failed, failed
    assert {replica for _, replica in outcomes} == {"0", "1"}


def test_a_job_on_one_replica_leaves_the_other_serving(local_cluster: SimCluster, admin_user: Any) -> None:
    lane = two_replica_lane(local_cluster)
    assert run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)).state == JobState.SUCCEEDED
    stop = run_job(lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user, params={"replica": 1}))
    assert stop.state == JobState.SUCCEEDED, stop.error + job_log_text(stop)
    assert stop.params["nodes"] == ["spark2"] and stop.result["replica"] == 1
    assert replica_states(lane) == [LaneState.SERVING, LaneState.STOPPED]
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.SERVING and lane.desired_state == "serving"
    assert "replica 0 serving; replica 1 stopped" in lane.state_reason


def test_a_replica_the_revision_does_not_have_is_refused(local_cluster: SimCluster, admin_user: Any) -> None:
    from django.core.exceptions import ValidationError

    lane = two_replica_lane(local_cluster)
    with pytest.raises(ValidationError) as refused:
        lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user, params={"replica": 2})
    assert "replicas 0 to 1" in str(refused.value.message_dict["replica"])
    with pytest.raises(ValidationError) as bad:
        lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user, params={"replica": "one"})
    assert "must be a replica number" in str(bad.value.message_dict["replica"])
