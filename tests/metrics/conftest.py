"""Metrics fixtures: sparksim engines over real HTTP behind lanes, simulated Sparks read
over the local transport, and a TCP port that accepts but never answers."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lanes.models import Lane, LaneNode, Node
from sparksim.cluster import cluster_down, cluster_up
from sparksim.host.node import NodeInfo
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN as QWEN

__all__ = ["QWEN", "make_lane_for"]


def make_lane_for(name: str, address: str, port: int, *, state: str = "serving", node: Node | None = None,
                  served: str = "") -> Lane:
    node = node or Node.objects.create(name=f"host-{name}", address=address, transport="local", state="online")
    lane = Lane.objects.create(
        name=name, model_id=f"org/{name}", served_model_name=served, image="vllm/vllm-openai@sha256:" + "0" * 64, api_port=port,
        max_model_len=32768, observed_state=state, desired_state="serving",
    )
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    return lane


def _base_address() -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return f"127.0.0.{151 + 4 * index}"


@pytest.fixture
def sim_nodes(tmp_path: Path) -> Iterator[list[NodeInfo]]:
    root = tmp_path / "cluster"
    created = cluster_up(root, ["spark1", "spark2"], base_address=_base_address(), time_scale=0.01)
    yield created
    cluster_down(root)


@pytest.fixture
def qwen_engine(engine_factory: Callable[..., EngineHandle]) -> EngineHandle:
    return engine_factory(QWEN, "--max-model-len", "32768")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """Accepts connections and never answers: a hung engine."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()
