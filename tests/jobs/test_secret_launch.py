"""A launch puts the decrypted secret on the container (sparksim's docker keeps the env it
was given, as `docker inspect` would) and nowhere else: the plan and the job log carry
the mark, a value never reaches a log line or a step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.models import JobKind, JobState
from jobs.services import lane_job_create
from lanes.crypto import encrypt_secret
from lanes.models import Lane
from tests.jobs.conftest import job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "hf_LaunchSecretValue0987654321"


def test_the_worker_alone_decrypts_the_secret_into_the_container(local_cluster, make_lane, admin_user):
    spark3 = local_cluster.node("spark3")
    lane = make_lane("qwen", [spark3], container_env={"HF_TOKEN": "[secret]", "PLAIN": "yes"})
    Lane.objects.filter(pk=lane.pk).update(secret_env={"HF_TOKEN": encrypt_secret(TOKEN)})
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.SUCCEEDED, launch.error + job_log_text(launch)
    state = json.loads((Path(spark3.sim_dir) / "containers" / "vllm_node" / "state.json").read_text())
    assert state["env"]["HF_TOKEN"] == TOKEN and state["env"]["PLAIN"] == "yes"
    log = job_log_text(launch)
    assert "HF_TOKEN=" in log and TOKEN not in log
    assert TOKEN not in json.dumps(list(launch.steps.values()), default=str)
    assert TOKEN not in json.dumps([launch.params, launch.result, launch.error], default=str)
    run_job(lane_job_create(lane=lane, kind=JobKind.STOP, user=admin_user))


def test_a_secret_cleared_since_the_revision_fails_the_launch_clearly(local_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [local_cluster.node("spark3")], container_env={"HF_TOKEN": "[secret]"})
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.FAILED and "secret env HF_TOKEN was cleared" in launch.error
