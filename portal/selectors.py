from __future__ import annotations

from typing import Any

from django.db.models import Count

from lanes.models import Lane, Node


def dashboard_summary() -> dict[str, Any]:
    lanes = list(Lane.objects.order_by("name"))
    node_states = dict(Node.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    nodes = list(Node.objects.order_by("name").values("name", "state"))
    return {"lanes": lanes, "nodes": nodes, "node_states": node_states, "node_count": sum(node_states.values())}
