"""The guardian's part of a launch: a smoke prompt whose answer must be sane before the lane
turns serving, and a memory guard that stops a starting engine before its node wedges."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.models import JobKind, JobState
from jobs.services import lane_job_create
from lanes.models import Lane, LaneState
from sparksim.host.node import load_node
from sparksim.host.wedge import is_wedged
from tests.jobs.conftest import fault, job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def available_gib(sim_dir: str) -> float:
    match = re.search(r"MemAvailable:\s+(\d+)", (Path(sim_dir) / "proc" / "meminfo").read_text())
    assert match is not None
    return int(match.group(1)) / 1024**2


def test_a_launch_ends_with_a_sane_smoke_answer(local_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.SUCCEEDED, launch.error + job_log_text(launch)
    assert "smoke test: the engine answers" in job_log_text(launch)
    assert "smoke prompt has a sane answer" in Lane.objects.get(pk=lane.pk).state_reason


def test_gibberish_fails_the_launch_with_the_sample_shown(local_cluster, make_lane, admin_user):
    fault(local_cluster, "spark3", "engine-args", "--sim-gibberish")
    lane = make_lane("qwen", [local_cluster.node("spark3")])
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.FAILED
    assert "one token repeated ('!' x 16)" in launch.error and 'sample: "!!!!!!!!!!!!!!!!"' in launch.error
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.FAILED and "smoke test" in lane.state_reason


def test_a_leak_during_start_up_is_stopped_before_the_node_wedges(local_cluster, make_lane, admin_user, settings):
    settings.GUARDIAN_MEMORY_INTERVAL_S = 0.2
    spark3 = local_cluster.node("spark3")
    # Start-up of 60 simulated seconds (6 s real); 1 GiB a simulated second leaks (10 GiB/s real):
    # unguarded, MemAvailable reaches 0 at 57.5 s, before the start-up ends.
    fault(local_cluster, "spark3", "engine-args", "--sim-startup-s", "60", "--sim-leak-gib-per-s", "1")
    lane = make_lane("qwen", [spark3], wait_timeout_s=120)
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.FAILED
    assert re.search(
        r"memory guard: node spark3: MemAvailable \d+\.\d GiB, below the 8 GiB floor "
        r"\(below 8 GiB a Spark can wedge and need a power cycle\); stopped the engine on spark3",
        launch.error,
    ), launch.error + job_log_text(launch)
    node = load_node(spark3.sim_dir)
    assert not is_wedged(node)
    assert available_gib(spark3.sim_dir) > 100  # the engine is gone: its memory came back
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.FAILED and "memory guard" in lane.state_reason


def test_without_the_memory_guard_the_same_leak_wedges_the_node(local_cluster, make_lane, admin_user, settings):
    """What the guard prevents (the premise of the test above)."""
    settings.GUARDIAN_MEMORY_FLOOR_GIB = 0
    spark3 = local_cluster.node("spark3")
    fault(local_cluster, "spark3", "engine-args", "--sim-startup-s", "60", "--sim-leak-gib-per-s", "1")
    lane = make_lane("qwen", [spark3], wait_timeout_s=15)
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.FAILED and "memory guard" not in launch.error
    assert is_wedged(load_node(spark3.sim_dir))
