"""The demo's simulated cluster: the one place the portal uses sparksim (a separate,
Django-free package that only `make run` needs). Plain functions, no Django, so the
launcher can call them before any settings exist."""

from __future__ import annotations

from pathlib import Path

from sparksim.cluster import cluster_down, cluster_up
from sparksim.host.node import load_node
from sparksim.host.storage import seed_placeholder_model

DEMO_NODES = ["spark1", "spark2", "spark3"]
DEMO_BASE_ADDRESS = "127.0.0.11"


def demo_cluster_up(root: str | Path, time_scale: float) -> list[tuple[str, str, str]]:
    """(name, address, sim_dir) per node; idempotent: re-creates missing node directories, keeps faults."""
    infos = cluster_up(root, DEMO_NODES, DEMO_BASE_ADDRESS, time_scale)
    return [(info.name, info.address, info.sim_dir) for info in infos]


def demo_cluster_down(root: str | Path) -> None:
    """Simulated engines run detached, like containers: stop them with the portal."""
    if Path(root).exists():
        cluster_down(root)


def demo_seed_weights(sim_dir: str, model_id: str, revision: str = "") -> None:
    """Put a lane's model (a small stand-in) into a simulated node's HF cache, whole."""
    seed_placeholder_model(load_node(sim_dir), model_id, revision or "main")
