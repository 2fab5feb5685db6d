"""Fixtures for sparksim: real engine processes over HTTP and simulated node directories."""

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sparksim.cluster import cluster_down, cluster_up
from sparksim.host.node import NodeInfo
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_DEEPSEEK, SIM_QWEN, wait_for

DEEPSEEK = SIM_DEEPSEEK
QWEN = SIM_QWEN

__all__ = ["wait_for", "node_shell", "DEEPSEEK", "QWEN"]


@pytest.fixture
def engine(engine_factory: Callable[..., EngineHandle]) -> EngineHandle:
    return engine_factory(DEEPSEEK, "--served-model-name", DEEPSEEK, "deepseek")


def base_address() -> str:
    # Each xdist worker simulates its Sparks on its own addresses (jobs use .101 and up).
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return f"127.0.0.{61 + 4 * index}"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[NodeInfo]]:
    root = tmp_path / "cluster"
    created = cluster_up(root, ["spark1", "spark2"], base_address=base_address(), time_scale=0.01)
    yield created
    cluster_down(root)


def node_shell(
    node: NodeInfo, line: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run one command line the way the launcher does on a simulated node."""
    prefix = (f"export PATH={node.sim_dir}/bin:$PATH SPARK_SYSFS={node.sim_dir}/sys "
              f"SPARK_PROCFS={node.sim_dir}/proc SPARK_HF_HOME={node.sim_dir}/hf; ")
    return subprocess.run(["bash", "-c", prefix + line], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ), check=False)
