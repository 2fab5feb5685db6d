"""Jobs fixtures: a sparksim cluster per test (own directory, own 127.0.0.x range per
xdist worker), a real OpenSSH server per simulated Spark (started once per session and
address, `sshd_pool`), nodes and lanes in the database, and a dispatcher that records
queued jobs instead of sending them to a worker."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from django.conf import settings

from jobs.models import Job, JobKind, JobLogLine, JobState
from jobs.services import job_create, job_run
from lanes.models import Lane, LaneNode, LaneRevision, Node
from sparksim.cluster import cluster_down, cluster_up
from sparksim.host.faults import apply_fault
from sparksim.host.node import NodeInfo, load_node
from sparksim.host.storage import seed_placeholder_model
from tests.conftest import free_port
from tests.jobs.sshd import SshdPool, SshdServer, client_keypair, start_sshd
from tests.lanes.seed_configs import base_config

IMAGE = "ghcr.io/eugr/spark-vllm-b12x@sha256:" + "4f" * 32
TIME_SCALE = 0.1  # sparksim engines start in well under a second


def worker_index() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def base_address() -> str:
    # Each xdist worker simulates its Sparks on its own addresses (the demo uses .11-.13).
    return f"127.0.0.{101 + 10 * worker_index()}"


@dataclass
class SimCluster:
    root: Path
    infos: list[NodeInfo]
    nodes: list[Node]
    servers: list[SshdServer]
    client_private_key: str

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)


def encrypt(text: str) -> str:
    return Fernet(settings.CREDENTIALS_KEY.encode()).encrypt(text.encode()).decode()


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Jobs queued on commit land here instead of in Redis; tests run them with job_run."""
    queued: list[int] = []
    monkeypatch.setattr("jobs.services.dispatch_job", lambda job_id, time_limit_s: queued.append(job_id))
    return queued


@pytest.fixture(autouse=True)
def _no_celery_dispatch(dispatched: list[int]) -> None:
    """Every jobs test records dispatches unless it asks for a real worker."""


@pytest.fixture
def sim_root(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "sim"
    yield root
    cluster_down(root)


def make_sim_cluster(root: Path, names: list[str], transport: str, tmp_path: Path,
                     pool: SshdPool | None = None) -> SimCluster:
    """With `pool`, the nodes are reached through its servers (kept for the session: the
    caller stops nothing); without, through servers of their own that the caller stops."""
    infos = cluster_up(root, names, base_address=base_address(), time_scale=TIME_SCALE)
    servers: list[SshdServer] = []
    private_key = ""
    if transport == "ssh" and pool is not None:
        private_key = pool.client_private_key
        servers = [pool.server(info.address) for info in infos]
    elif transport == "ssh":
        private_key, public_key = client_keypair(tmp_path / "client")
        for info in infos:
            servers.append(start_sshd(tmp_path / f"sshd-{info.name}", info.address,
                                      free_port(info.address), public_key))
    nodes = []
    for index, info in enumerate(infos):
        fields: dict[str, Any] = {
            "name": info.name, "address": info.address, "transport": transport, "sim_dir": info.sim_dir,
            "runtime_command": "docker", "memory_gib": 128,
        }
        if transport == "ssh":
            fields.update(ssh_port=servers[index].port, ssh_user="root", ssh_host_key=servers[index].host_key_line,
                          ssh_private_key_encrypted=encrypt(private_key))
        nodes.append(Node.objects.create(**fields))
    return SimCluster(root, infos, nodes, servers, private_key)


@pytest.fixture(scope="session")
def sshd_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdPool]:
    """The session's OpenSSH servers, one per simulated address, each with its host key."""
    pool = SshdPool(tmp_path_factory.mktemp("sshd"), free_port)
    yield pool
    pool.stop()


@pytest.fixture
def ssh_cluster(db: None, sim_root: Path, tmp_path: Path, sshd_pool: SshdPool) -> SimCluster:
    return make_sim_cluster(sim_root, ["spark1", "spark2", "spark3"], "ssh", tmp_path, pool=sshd_pool)


@pytest.fixture
def local_cluster(db: None, sim_root: Path, tmp_path: Path) -> SimCluster:
    return make_sim_cluster(sim_root, ["spark1", "spark2", "spark3"], "local", tmp_path)


MakeLane = Callable[..., Lane]


def create_lane(name: str, nodes: list[Node], seed_weights: bool = True, **config: Any) -> Lane:
    """A lane on `nodes` (rank = list order) with revision 1 holding its full config; config
    overrides tests.lanes.seed_configs.base_config."""
    address = nodes[0].address
    overrides: dict[str, Any] = {
        "name": name, "revision": 1, "image": IMAGE, "tensor_parallel_size": len(nodes),
        "api_port": free_port(address), "master_port": free_port(address), "nodes": [n.name for n in nodes],
        "model_id": "Qwen/Qwen3.8-27B-FP8", "served_model_name": name, "gpu_memory_utilization": 0.5,
        "max_model_len": 32768, "wait_poll_s": 0.2, "wait_timeout_s": 60,
    }
    overrides.update(config)
    cfg = base_config(**overrides)
    lane = Lane.objects.create(
        name=name, model_id=cfg["model_id"], image=cfg["image"], tensor_parallel_size=len(nodes),
        executor=cfg["executor"], api_port=cfg["api_port"], master_port=cfg["master_port"],
        max_model_len=cfg["max_model_len"], served_model_name=cfg["served_model_name"], revision=1,
    )
    for rank, node in enumerate(nodes):
        LaneNode.objects.create(lane=lane, node=node, rank=rank)
        if node.sim_dir and seed_weights:  # every rank holds the lane's model, as after a sync
            seed_placeholder_model(load_node(node.sim_dir), cfg["model_id"], cfg.get("model_revision") or "main")
    LaneRevision.objects.create(lane=lane, number=1, config=cfg)
    return lane


@pytest.fixture
def make_lane(db: None) -> MakeLane:
    return create_lane


@pytest.fixture
def qwen_lane(db: None) -> Lane:
    """A stopped single-node Qwen lane on spark3, for tests that create jobs without running them."""
    node = Node.objects.create(name="spark3", address="127.0.0.13", transport="local")
    return create_lane("qwen", [node])


def run_in_thread(target: Callable[[], Any]) -> threading.Thread:
    """Runs a job (its own DB connection) while the test watches or cancels it."""
    from django.db import connection

    def body() -> None:
        try:
            target()
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def call_in_thread(target: Callable[[], Any], timeout: float = 300) -> Any:
    """Runs a job to its end in a fresh thread: lanes' services broadcast with
    async_to_sync, which refuses a thread that runs an event loop (the test thread does,
    once a Playwright browser test ran in this process)."""
    result: list[Any] = []
    errors: list[BaseException] = []

    def body() -> None:
        try:
            result.append(target())
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)

    thread = run_in_thread(body)
    thread.join(timeout)
    if errors:
        raise errors[0]
    if thread.is_alive():
        raise AssertionError(f"still running after {timeout}s")
    return result[0] if result else None


def run_job(job: Job) -> Job:
    """Run a queued job to its end, the way the worker does, and reload it."""
    call_in_thread(lambda: job_run(job_id=job.pk))
    job.refresh_from_db()
    return job


def job_log_text(job: Job) -> str:
    return "\n".join(JobLogLine.objects.filter(job=job).order_by("seq").values_list("text", flat=True))


def checked(cluster: SimCluster, user: Any, names: list[str]) -> list[Node]:
    """A network check of these nodes: the fabric checks and the watchdog read their
    addresses, devices and GID index from its reports."""
    nodes = [cluster.node(name) for name in names]
    check = run_job(job_create(kind=JobKind.NETWORK_CHECK, user=user, nodes=nodes))
    assert check.state == JobState.SUCCEEDED, check.error
    return [Node.objects.get(pk=node.pk) for node in nodes]


def fault(cluster: SimCluster, name: str, kind: str, *values: str) -> None:
    """A sparksim host fault on one node (`python -m sparksim fault`)."""
    info = next(info for info in cluster.infos if info.name == name)
    apply_fault(load_node(info.sim_dir), kind, list(values))
