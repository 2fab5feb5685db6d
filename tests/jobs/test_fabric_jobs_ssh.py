"""The fabric checks over real SSH against sparksim nodes: parsed tables on a healthy
fabric, and a clear failure on a down link, a socket fallback, a half-working cable, a busy
node and a missing tool; refused while a lane serves on the nodes."""

from __future__ import annotations

import re

import pytest

from jobs.models import FabricResult, Job, JobKind, JobState
from jobs.services import JobConflict, fabric_job_create
from lanes.models import LaneState, Node
from tests.jobs.conftest import checked, fault, job_log_text, run_job

pytestmark = pytest.mark.django_db(transaction=True)


def fabric(kind: str, nodes: list[Node], admin_user, **params) -> Job:
    return run_job(fabric_job_create(kind=kind, nodes=nodes, user=admin_user, params=params))


def test_latency_matrix_measures_every_ordered_pair_like_seed_003(ssh_cluster, admin_user):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2", "spark3"])
    job = fabric(JobKind.LATENCY_MATRIX, nodes, admin_user, iterations=1000)
    log = job_log_text(job)
    assert job.state == JobState.SUCCEEDED, job.error + log
    result = FabricResult.objects.get(job=job)
    assert result.node_set == "spark1,spark2,spark3" and result.verdict == "ok"
    cells = result.summary["cells"]
    assert sorted(cells) == ["ib_read_lat", "ib_send_lat", "ib_write_lat"]
    assert all(len(pairs) == 6 for pairs in cells.values())  # 3 nodes: 6 ordered pairs each
    assert 2.5 < cells["ib_write_lat"]["spark1>spark2"]["avg_us"] < 3.6
    assert 5.5 < cells["ib_read_lat"]["spark3>spark1"]["avg_us"] < 6.6
    device = nodes[0].network_report["ib_hca"][0]
    assert result.summary["text"].startswith(f"RDMA Latency Matrix\n\ndevice={device} gid=3 size=2B iters=1000")
    assert re.search(r"^spark2 \d\.\d\dus p99=\d\.\d\d self \d\.\d\dus p99=", result.summary["text"], re.M)
    # One port per server/client run: 18 runs, 18 different ports, none reused.
    ports = re.findall(r"-p (\d+) -F 192\.168", log)
    assert len(ports) == 18 and len(set(ports)) == 18


def test_link_bandwidth_sums_each_cable_from_its_two_device_pairs(ssh_cluster, admin_user):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    job = fabric(JobKind.LINK_BANDWIDTH, nodes, admin_user)
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
    cables = FabricResult.objects.get(job=job).summary["cables"]
    assert sorted(cables) == ["spark1↔spark2 port 0", "spark1↔spark2 port 1"]
    port0 = cables["spark1↔spark2 port 0"]
    assert sorted(half["device"] for half in port0["devices"]) == ["roceP2p1s0f0", "rocep1s0f0"]
    assert port0["sum_gbps"] == pytest.approx(sum(half["average_gbps"] for half in port0["devices"]))
    assert port0["sum_gbps"] > 175 and port0["state"] == "ok"


def test_nccl_all_reduce_runs_over_ib_with_the_reports_fabric_env(ssh_cluster, admin_user):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    job = fabric(JobKind.NCCL_TEST, nodes, admin_user)
    log = job_log_text(job)
    assert job.state == JobState.SUCCEEDED, job.error + log
    summary = FabricResult.objects.get(job=job).summary
    assert summary["network"] == "IB" and summary["via"] == ["NET/IB"]
    assert summary["env"]["NCCL_IB_HCA"] == ",".join(nodes[0].network_report["ib_hca"])
    assert summary["env"]["NCCL_IB_GID_INDEX"] == "3" and summary["env"]["NCCL_SOCKET_IFNAME"] == nodes[0].network_report["eth_if"]
    # The safe sweep, never the 16 GB size: 512 MiB, 1, 2 and 4 GiB.
    assert [row["size"] for row in summary["rows"]] == [2**29, 2**30, 2**31, 2**32]
    assert 175 <= summary["avg_busbw_gbps"] < 190  # seed 000: 185 Gb/s
    assert "-b 536870912 -e 4294967296 -f 2" in log


def test_nccl_socket_fallback_fails_with_the_reason(ssh_cluster, admin_user):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    for device in nodes[1].network_report["ib_hca"]:
        fault(ssh_cluster, "spark2", "link-down", device)
    job = fabric(JobKind.NCCL_TEST, nodes, admin_user)
    assert job.state == JobState.FAILED
    assert "socket fallback" in job.error and "via NET/Socket" in job.error
    assert FabricResult.objects.get(job=job).verdict == "fail"


def test_nccl_on_half_a_cable_fails_below_the_threshold(ssh_cluster, admin_user):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    kept, *downed = nodes[1].network_report["ib_hca"]
    for device in downed:  # one PCIe half left on spark2
        fault(ssh_cluster, "spark2", "link-down", device)
    job = fabric(JobKind.NCCL_TEST, nodes, admin_user)
    assert job.state == JobState.FAILED
    assert "below 175 Gb/s" in job.error
    assert f"{downed[0]} on spark2 is down: NCCL will do without it" in job_log_text(job)


def test_latency_matrix_on_a_down_link_fails_naming_it(ssh_cluster, admin_user):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    device = nodes[0].network_report["ib_hca"][0]
    fault(ssh_cluster, "spark2", "link-down", device)
    job = fabric(JobKind.LATENCY_MATRIX, nodes, admin_user, tests=["send"])
    assert job.state == JobState.FAILED
    assert f"link down: {device} on spark2 is DOWN, not ACTIVE" in job.error


def test_a_busy_node_and_a_missing_tool_fail_before_measuring(ssh_cluster, admin_user):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    fault(ssh_cluster, "spark2", "gpu-busy", "python3 train.py")
    fault(ssh_cluster, "spark1", "tool-missing", "ib_write_bw")
    job = fabric(JobKind.LINK_BANDWIDTH, nodes, admin_user)
    assert job.state == JobState.FAILED
    assert "ib_write_bw is not installed on spark1 (not on its PATH)" in job.error
    assert "spark2 is busy: its GPU is in use by pid" in job.error and "python3 train.py" in job.error
    assert not job.steps.filter(phase="measure").exists()


def test_refused_while_a_lane_serves_on_the_nodes(ssh_cluster, admin_user, make_lane):
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    lane = make_lane("deepseek", nodes)
    lane.observed_state = LaneState.SERVING
    lane.save()
    with pytest.raises(JobConflict, match="lane deepseek is serving on spark1, spark2: stop it"):
        fabric_job_create(kind=JobKind.NCCL_TEST, nodes=nodes, user=admin_user)
    assert not Job.objects.filter(kind=JobKind.NCCL_TEST).exists()
