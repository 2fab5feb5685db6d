"""A stopped process leaves nothing behind: the web process (uvicorn, as production runs it)
stops its large-body worker processes and multiprocessing's resource tracker on SIGTERM,
and they end on their own if it is killed outright; a Celery worker stops its pool; the run
command stops every process it started, also when told to stop while still starting.

Children are found as the kernel sees them (/proc/*/stat's parent pid, recursively), each
kept with its start time, so a pid the kernel reuses is never taken for a survivor."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from core.roles import Role
from tests.conftest import WorkerProcesses, free_port, make_user, wait_for
from tests.gateway.conftest import create_key, make_lane
from tests.gateway.upstreams import CountingUpstream
from tests.portal.proc_tree import Proc, cmdline, descendants, kill_left, present, processes, running
from tests.portal.processes import CeleryProcesses, web_answers
from tests.portal.test_run_command import RunCommand, processes_mentioning

ROOT = Path(__file__).resolve().parents[2]
LARGE = 1024  # PORTAL_GATEWAY_LARGE_BODY_BYTES here: the posted body goes to the pool


def has_children(pid: int) -> bool:
    return any(ppid == pid for _, ppid, _ in processes().values())


StartWeb = Callable[[], subprocess.Popen[bytes]]


@pytest.fixture
def web(transactional_db: None, tmp_path: Path) -> Iterator[StartWeb]:
    """start() -> uvicorn serving the whole app as production runs it (lifespan on), with a
    lane and a key in the test database, after one large body went through its pool."""
    upstream = CountingUpstream(model="qwen-test").start()
    make_lane("qwen", upstream.port, served="qwen-test")
    secret, _ = create_key(make_user("gw-admin", Role.ADMIN))
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        env = WorkerProcesses(1, tmp_path).environment()
        env["PORTAL_GATEWAY_LARGE_BODY_BYTES"] = str(LARGE)
        port = free_port()
        with (tmp_path / "web.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port",
                 str(port), "--log-level", "info", "--no-access-log"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        started.append(proc)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: web_answers(proc, url, tmp_path / "web.log"), timeout=180, interval=0.2, what="uvicorn to answer")
        body = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": "x" * (4 * LARGE)}]})
        response = httpx.post(f"{url}/v1/chat/completions", content=body, timeout=60,
                              headers={"authorization": f"Bearer {secret}", "content-type": "application/json"})
        assert response.status_code == 200, response.text
        assert upstream.completions == 1
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    upstream.stop()



def pool_workers(children: set[Proc]) -> set[Proc]:
    return {proc for proc in children if "multiprocessing.spawn" in cmdline(proc[0])}


def test_sigterm_stops_the_webs_large_body_workers_before_it_exits(web: StartWeb) -> None:
    server = web()
    children = descendants(server.pid)
    try:
        assert pool_workers(children), [cmdline(pid) for pid, _ in children]  # the pool is up
        os.kill(server.pid, signal.SIGTERM)  # the process alone, as docker stop or systemd does
        server.wait(timeout=60)
        # Stopped and reaped by the web process itself before it exited: not one left, not
        # even as a zombie waiting for another parent.
        left = [child for child in children if present(child)]
        assert not left, [cmdline(pid) for pid, _ in left]
        assert not has_children(server.pid)
    finally:
        kill_left(children)


def test_a_killed_web_process_leaves_no_worker_behind(web: StartWeb) -> None:
    """No lifespan shutdown at all (SIGKILL, the OOM killer; or a server run without lifespan):
    the workers see their lifeline close and exit."""
    server = web()
    children = descendants(server.pid)
    try:
        assert pool_workers(children)
        server.kill()
        server.wait(timeout=30)
        wait_for(lambda: not any(running(child) for child in children), timeout=60, what="the orphaned workers to exit")
    finally:
        kill_left(children)


def test_sigterm_stops_a_celery_worker_and_its_pool(transactional_db: None, tmp_path: Path) -> None:
    celery = CeleryProcesses(tmp_path, PORTAL_WORKER_CONCURRENCY="2")
    proc = celery.start("worker", ["-m", "portal.workers", "jobs"])
    children: set[Proc] = set()
    try:
        wait_for(lambda: proc.poll() is None and len(descendants(proc.pid)) >= 2, timeout=120, interval=0.2,
                 what="the worker's prefork pool")
        wait_for(lambda: "ready" in (tmp_path / "worker.log").read_text(errors="replace"), timeout=120,
                 interval=0.2, what="the worker to be ready")
        children = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        wait_for(lambda: not any(running(child) for child in children), timeout=30, what="the pool's processes to exit")
    finally:
        celery.stop()
        kill_left(children)


def test_sigterm_while_the_run_command_starts_stops_what_it_started(tmp_path: Path) -> None:
    var = tmp_path / "var"
    run = RunCommand(var, PORTAL_WORKER_CONCURRENCY="1")
    run.proc = subprocess.Popen([sys.executable, "-m", "portal.launcher"], cwd=ROOT, env=run.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    children: set[Proc] = set()
    try:
        # The embedded Redis and the web process are up, the portal not yet ready.
        wait_for(lambda: any("uvicorn" in cmdline(pid) for pid, _ in descendants(run.proc.pid)), timeout=180,
                 interval=0.1, what="the run command to start its web process")
        children = descendants(run.proc.pid)
        run.proc.send_signal(signal.SIGTERM)
        run.proc.wait(timeout=90)
        assert run.proc.returncode == 128 + signal.SIGTERM
        wait_for(lambda: not any(running(child) for child in children), timeout=30, what="every child to exit")
        assert not processes_mentioning(str(var))
    finally:
        if run.proc.poll() is None:
            run.proc.kill()
        kill_left(children)


def test_production_command_lines_keep_the_asgi_lifespan() -> None:
    """The lifespan is where the web process stops its workers: off, they would be left to
    their lifeline alone."""
    for path in ("portal/launcher.py", "docker-compose.yml", "Dockerfile", "scripts/run.sh", "Makefile"):
        assert "lifespan" not in (ROOT / path).read_text(), path
