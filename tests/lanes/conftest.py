from __future__ import annotations

from typing import Any

import pytest

from lanes.models import Lane, Node
from lanes.services import lane_create
from tests.lanes.rule_cases import lane_data


@pytest.fixture
def nodes(db: None) -> dict[str, Node]:
    return {
        name: Node.objects.create(name=name, address=f"127.0.0.{10 + i}", transport="local")
        for i, name in enumerate(["spark1", "spark2", "spark3"], start=1)
    }


@pytest.fixture
def make_lane(nodes: dict[str, Node], admin_user: Any):
    def make(name: str = "other", node_names: list[str] | None = None, **overrides: Any) -> Lane:
        return lane_create(actor=admin_user, data=lane_data(name=name, **overrides), nodes=node_names or ["spark1"])

    return make

