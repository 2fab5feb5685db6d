"""Fabric results: one row per measurement, kept per node set, read by node pages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import QuerySet

from jobs.models import FabricResult, Job
from lanes.models import Node


def node_set_key(nodes: Sequence[Node]) -> str:
    return ",".join(sorted(node.name for node in nodes))


def fabric_result_record(*, job: Job, kind: str, nodes: Sequence[Node], verdict: str, headline: float | None,
                         headline_unit: str, summary: dict[str, Any]) -> FabricResult:
    result = FabricResult.objects.create(kind=kind, node_set=node_set_key(nodes), job=job, verdict=verdict,
                                         headline=headline, headline_unit=headline_unit, summary=summary)
    result.nodes.set(nodes)
    return result


def fabric_history(*, node: Node | None = None, node_set: str = "", kind: str = "", limit: int = 20
                   ) -> QuerySet[FabricResult]:
    """Newest first: a node's results (any set it was part of), or one node set's."""
    results = FabricResult.objects.select_related("job")
    if node is not None:
        results = results.filter(nodes=node)
    if node_set:
        results = results.filter(node_set=node_set)
    if kind:
        results = results.filter(kind=kind)
    return results.order_by("-created_at", "-id")[:limit]
