"""The run command end to end: embedded SQLite + Redis, web/worker/beat as separate
processes, the printed login works, a restart finds its engines gone, and Ctrl+C or SIGTERM
leaves no process behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import psutil

from tests.conftest import free_port, wait_for
from tests.portal.proc_tree import Proc, cmdline, descendants, kill_left, running

ROOT = Path(__file__).resolve().parents[2]


def processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            environ = proc.info["environ"] or {}
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if proc.pid != os.getpid() and (text in cmdline or environ.get("PORTAL_VAR_DIR") == text):
            found.append(proc)
    return found


class RunCommand:
    """`python -m portal.launcher` as a user runs it, with its own var/ directory."""

    def __init__(self, var: Path, **env: str) -> None:
        self.env = {k: v for k, v in os.environ.items()
                    if k not in {"DATABASE_URL", "REDIS_URL", "PYTEST_XDIST_WORKER"}}
        self.port = free_port()
        self.env.update(PORTAL_VAR_DIR=str(var), PORTAL_PORT=str(self.port),
                        PORTAL_EMBEDDED_REDIS_PORT=str(free_port()), PORTAL_REDIS_PREFIX="runcmd", **env)
        self.lines: list[str] = []

    def start(self) -> tuple[str, str]:
        self.proc = subprocess.Popen([sys.executable, "-m", "portal.launcher"], cwd=ROOT, env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: self.lines.extend(iter(stdout.readline, "")), daemon=True).start()
        banner = wait_for(lambda: next((line for line in self.lines if "Login:" in line), None), timeout=180,
                          what="the run command's banner")
        username, password = re.search(r"Login: (\S+) / (\S+)", banner).groups()
        return username, password

    def client(self, username: str, password: str) -> httpx.Client:
        client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", follow_redirects=False, timeout=10)
        client.get("/accounts/login/")
        client.post("/accounts/login/", data={"username": username, "password": password,
                                              "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        return client

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=90)
        assert self.proc.returncode == 0, "".join(self.lines[-30:])


def test_the_run_command_serves_restarts_on_the_same_var_and_stops_on_ctrl_c_and_sigterm(tmp_path):
    """Two launches, as a user runs them (each takes ~25 s: one test, not three). The first prints
    a URL and a login that work, runs its embedded Redis and SQLite, launches a lane, and Ctrl+C
    stops it all (exit 0, no process left). The second, on the same var/, finds the engines gone
    with the first: the lane the database says is serving is checked, then failed; SIGTERM stops
    every process it started (exit 0)."""
    var = tmp_path / "var"
    env = {"PORTAL_WORKER_CONCURRENCY": "1", "PORTAL_SIM_TIME_SCALE": "0.05", "PORTAL_LANES_WATCH_INTERVAL_S": "1"}
    run = RunCommand(var, **env)
    try:
        _serves_its_login_and_a_lane(run)
        assert (var / "portal.sqlite3").exists()
    finally:
        run.stop()  # Ctrl+C: the simulated engines go with it; the database still says serving
    assert wait_for(lambda: not processes_mentioning(str(var)), timeout=15, what="every process to exit")

    again = RunCommand(var, **env)
    children: set[Proc] = set()
    try:
        login = again.start()
        children = descendants(again.proc.pid)
        commands = " | ".join(cmdline(pid) for pid, _ in children)
        assert "redis-server" in commands and "uvicorn" in commands and "portal.workers" in commands, commands
        assert "multiprocessing.spawn" in commands  # the web's large-body pool, started by its lifespan
        with contextlib.closing(again.client(*login)) as client:
            lane = wait_for(lambda: (body := client.get("/api/lanes/qwen").json())["observed_state"] == "failed"
                            and body, timeout=60, interval=0.5, what="qwen failed after the restart")
            assert "refused" in lane["state_reason"]
            assert client.get("/api/lanes/deepseek").json()["observed_state"] == "stopped"  # never launched
            events = client.get("/lanes/qwen/").text
            assert "serving → checking" in events and "checking → failed" in events  # the state history
        again.proc.send_signal(signal.SIGTERM)
        again.proc.wait(timeout=90)
        assert again.proc.returncode == 0, "".join(again.lines[-30:])
        wait_for(lambda: not any(running(child) for child in children), timeout=30, what="every child to exit")
        assert not processes_mentioning(str(var))
    finally:
        if again.proc.poll() is None:
            again.proc.kill()
        kill_left(children | descendants(again.proc.pid))
    _the_restart_is_in_the_audit(var)


def _serves_its_login_and_a_lane(run: RunCommand) -> None:
    username, password = run.start()
    assert any(f"http://127.0.0.1:{run.port}/" in line for line in run.lines)
    names = {p.name() for p in psutil.Process(run.proc.pid).children(recursive=True)}
    assert any("redis-server" in name for name in names), names
    with httpx.Client(base_url=f"http://127.0.0.1:{run.port}", follow_redirects=False, timeout=10) as client:
        assert client.get("/accounts/login/").status_code == 200
        response = client.post("/accounts/login/", data={"username": username, "password": password,
                                                         "csrfmiddlewaretoken": client.cookies["csrftoken"]})
        assert response.status_code == 302, response.text[:500]
        dashboard = client.get("/")
        assert dashboard.status_code == 200 and "Dashboard" in dashboard.text
        assert client.get("/healthz").json()["status"] == "ok"
        launched = client.post("/api/jobs/lanes/qwen/launch", json={},
                               headers={"X-CSRFToken": client.cookies["csrftoken"]})
        assert launched.status_code == 201, launched.text
        wait_for(lambda: client.get("/api/lanes/qwen").json()["observed_state"] == "serving", timeout=120,
                 interval=0.5, what="qwen serving")


def _the_restart_is_in_the_audit(var: Path) -> None:
    with sqlite3.connect(var / "portal.sqlite3") as db:
        history = db.execute("SELECT diff FROM portal_auditevent WHERE action = 'lane.state' AND object_repr = 'qwen'"
                             " ORDER BY id").fetchall()
    states = [json.loads(diff)["observed_state"] for (diff,) in history]
    assert states[-2:] == [["serving", "checking"], ["checking", "failed"]], states
    assert "the portal started" in json.loads(history[-2][0])["reason"][1]
    assert "health watcher" in json.loads(history[-1][0])["seen_by"][1]
