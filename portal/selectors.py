from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from jobs.drift import lanes_drift
from jobs.models import ACTIVE_STATES, Job
from jobs.states import job_payload
from lanes.lane_states import lane_state_payload
from lanes.models import Lane, Node
from lanes.node_services import node_network_payload, node_state_payload

# The jobs a reconnecting page is told about: every active one and those finished this recently
# (a list shows the newest; an older final state cannot have changed while the socket was down
# for longer than a portal restart).
RECENT_JOBS = timedelta(minutes=15)
RECENT_JOBS_LIMIT = 100


def dashboard_summary() -> dict[str, Any]:
    lanes = list(Lane.objects.order_by("name"))
    node_states = dict(Node.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    nodes = list(Node.objects.order_by("name").values("name", "state"))
    return {"lanes": lanes, "nodes": nodes, "node_states": node_states, "node_count": sum(node_states.values())}


def dashboard_current() -> list[tuple[str, Any]]:
    """What the dashboard socket's live events say, as of now: each lane's state and drift,
    each node's state and network verdict, the active and recently finished jobs. Sent on every (re)connect
    (core.consumers.PortalConsumer.send_current) so every page that follows the socket shows
    what the API shows, not what it saw before the socket dropped."""
    lanes = list(Lane.objects.order_by("name"))
    drifts = lanes_drift(lanes)
    events: list[tuple[str, Any]] = []
    for lane in lanes:
        events.append(("lane.state", lane_state_payload(lane)))
        events.append(("lane.drift", {"name": lane.name, **drifts[lane.name].as_dict()}))
    for node in Node.objects.order_by("name"):
        events.append(("node.state", node_state_payload(node)))
        network = node_network_payload(node)
        if network is not None:
            events.append(("node.network", network))
    jobs = (Job.objects.filter(Q(state__in=ACTIVE_STATES) | Q(finished_at__gte=timezone.now() - RECENT_JOBS))
            .select_related("lane", "created_by").order_by("-id")[:RECENT_JOBS_LIMIT])
    events += [("job.state", job_payload(job)) for job in reversed(list(jobs))]
    return events
