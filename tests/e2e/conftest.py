"""Browser-test fixtures: jobs run in threads of the test process (they see the test
database) instead of Celery, and a lane defined through the lanes service on a simulated
Spark."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from jobs.services import job_run
from lanes.lane_services import lane_create
from lanes.models import Lane
from routing.evaluation_runs import router_evaluation_run
from sparksim.cluster import cluster_down
from sparksim.host.node import load_node
from sparksim.host.storage import seed_placeholder_model
from tests.conftest import free_port
from tests.jobs.conftest import IMAGE, SimCluster, call_in_thread, make_sim_cluster


@pytest.fixture
def job_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[threading.Thread]]:
    threads: list[threading.Thread] = []

    def dispatch(job_id: int, time_limit_s: float) -> None:
        def body() -> None:
            try:
                job_run(job_id=job_id)
            finally:
                connection.close()

        thread = threading.Thread(target=body, daemon=True)
        threads.append(thread)
        thread.start()

    monkeypatch.setattr("jobs.services.dispatch_job", dispatch)
    yield threads
    for thread in threads:
        thread.join(timeout=60)


SimLane = Callable[..., tuple[Lane, SimCluster]]


@pytest.fixture
def sim_lane(tmp_path: Path, admin_user: Any) -> Iterator[SimLane]:
    """qwen on one simulated Spark, saved as revision 1 by the lanes service."""
    roots: list[Path] = []

    def make(name: str = "qwen", startup_s: float = 2, **data: Any) -> tuple[Lane, SimCluster]:
        root = tmp_path / f"sim-{name}"
        roots.append(root)
        cluster = make_sim_cluster(root, ["spark3"], "local", tmp_path)
        node = cluster.node("spark3")
        fields = {
            "name": name, "model_id": "Qwen/Qwen3.8-27B-FP8", "served_model_name": name, "image": IMAGE,
            "api_port": free_port(node.address), "master_port": free_port(node.address), "max_model_len": 32768,
            "gpu_memory_utilization": 0.5, "weights_gib": 20, "extra_args": ["--sim-startup-s", str(startup_s)],
            **data,
        }
        seed_placeholder_model(load_node(node.sim_dir), str(fields["model_id"]))  # the rank holds its weights
        # another thread: the save broadcasts with async_to_sync, and Playwright's loop runs in this one
        return call_in_thread(lambda: lane_create(actor=admin_user, data=fields, nodes=["spark3"])), cluster

    yield make
    for root in roots:
        cluster_down(root)


class EvaluationThreads:
    """Router evaluations run in threads of the test process (they see the test database)
    instead of a Celery worker; each waits for `gate` (set by default), so a test can let one
    start once its page is following."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.threads: list[threading.Thread] = []

    def dispatch(self, evaluation_id: int) -> None:
        def body() -> None:
            try:
                assert self.gate.wait(60), "the test never let the evaluation start"
                router_evaluation_run(evaluation_id=evaluation_id)
            finally:
                connection.close()

        thread = threading.Thread(target=body, daemon=True)
        self.threads.append(thread)
        thread.start()


@pytest.fixture
def evaluation_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[EvaluationThreads]:
    runs = EvaluationThreads()
    monkeypatch.setattr("routing.evaluation_runs.dispatch_evaluation", runs.dispatch)
    yield runs
    runs.gate.set()
    for thread in runs.threads:
        thread.join(timeout=120)
