from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lanes.lane_services import lane_create
from lanes.models import Lane, Node
from tests.lanes.rule_cases import lane_data


@pytest.fixture
def sim_root(settings: Any, tmp_path: Path) -> Path:
    """A simulated-cluster root for this test: local nodes' sim_dir must lie under it."""
    settings.SIM_ROOT = tmp_path / "sim"
    for name in ("spark1", "spark2", "spark3", "spark9"):
        (settings.SIM_ROOT / name).mkdir(parents=True)
    return Path(settings.SIM_ROOT)


@pytest.fixture
def nodes(db: None, sim_root: Path) -> dict[str, Node]:
    return {
        name: Node.objects.create(name=name, address=f"127.0.0.{10 + i}", transport="local",
                                  sim_dir=str(sim_root / name))
        for i, name in enumerate(["spark1", "spark2", "spark3"], start=1)
    }


@pytest.fixture
def make_lane(nodes: dict[str, Node], admin_user: Any):
    def make(name: str = "other", node_names: list[str] | None = None, **overrides: Any) -> Lane:
        return lane_create(actor=admin_user, data=lane_data(name=name, **overrides), nodes=node_names or ["spark1"])

    return make

