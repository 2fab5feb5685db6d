"""The memory guard while a lane serves: a leak on a serving engine is stopped before its
node wedges, the lane failed with the node and MemAvailable named."""

from __future__ import annotations

import re

import httpx
import pytest

from guardian.services import guardian_tick
from jobs.models import JobKind, JobState
from jobs.services import lane_job_create
from lanes.models import Lane, LaneState
from sparksim.host.node import load_node
from sparksim.host.wedge import is_wedged
from tests.conftest import wait_for
from tests.jobs.conftest import job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_leak_while_serving_is_stopped_before_the_node_wedges(local_cluster, make_lane, admin_user, settings):
    settings.GUARDIAN_CANARY_INTERVAL_S = 0
    spark3 = local_cluster.node("spark3")
    lane = make_lane("qwen", [spark3])
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.SUCCEEDED, launch.error + job_log_text(launch)
    # 0.5 GiB a simulated second at the cluster's 0.1 scale: 5 GiB/s real, ~1.6 s from the floor to 0.
    httpx.post(f"{lane.base_url()}/_sim/faults", json={"leak_gib_per_s": 0.5}).raise_for_status()

    def stopped() -> bool:
        guardian_tick()
        return Lane.objects.get(pk=lane.pk).observed_state == LaneState.FAILED

    wait_for(stopped, timeout=60, interval=0.1, what="the memory guard")
    reason = Lane.objects.get(pk=lane.pk).state_reason
    assert re.fullmatch(
        r"memory guard: node spark3: MemAvailable \d+\.\d GiB, below the 8 GiB floor \(below 8 GiB "
        r"a Spark can wedge and need a power cycle\); stopped the engine on spark3",
        reason,
    ), reason
    assert not is_wedged(load_node(spark3.sim_dir))
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{lane.base_url()}/health", timeout=2)  # the engine is gone
