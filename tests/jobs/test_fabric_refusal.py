"""A fabric test refused because a lane runs on its nodes names the nodes, whichever replica of
the lane runs there (a replica lane once read "lane tour1 is serving on : stop it")."""

from __future__ import annotations

import pytest

from jobs.models import Job, JobKind
from jobs.services import JobConflict, fabric_job_create
from lanes.models import Lane, LaneNode, LaneState, Node

pytestmark = pytest.mark.django_db


def test_the_refusal_for_a_replica_lane_names_the_nodes_its_replicas_use(admin_user):
    nodes = [Node.objects.create(name=f"spark{i}", address=f"127.0.0.{10 + i}", transport="local",
                                 network_report={"devices": [{"name": "rocep1s0f0"}]}) for i in (1, 2, 3)]
    lane = Lane.objects.create(name="tour1", max_model_len=4096, observed_state=LaneState.SERVING)
    LaneNode.objects.create(lane=lane, node=nodes[0], replica=0, rank=0)
    LaneNode.objects.create(lane=lane, node=nodes[1], replica=1, rank=0)
    with pytest.raises(JobConflict) as refused:
        fabric_job_create(kind=JobKind.NCCL_TEST, nodes=nodes[1:], user=admin_user)
    assert str(refused.value).startswith("lane tour1 is serving on spark2: stop it before a fabric test")
    assert not Job.objects.filter(kind=JobKind.NCCL_TEST).exists()
