"""The run command end to end: embedded SQLite + Redis, web/worker/beat as separate
processes, the printed login works, and Ctrl+C leaves no process behind."""

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


def test_run_command_serves_login_and_dashboard_then_stops_cleanly(tmp_path):
    var = tmp_path / "var"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "PYTEST_XDIST_WORKER"}}
    env.update(PORTAL_VAR_DIR=str(var), PORTAL_PORT=str(port), PORTAL_EMBEDDED_REDIS_PORT=str(free_port()),
               PORTAL_WORKER_CONCURRENCY="1", PORTAL_REDIS_PREFIX="runcmd")
    proc = subprocess.Popen([sys.executable, "-m", "portal.launcher"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    try:
        banner = wait_for(lambda: next((line for line in lines if "Login:" in line), None), timeout=120,
                          what="the run command's banner")
        username, password = re.search(r"Login: (\S+) / (\S+)", banner).groups()
        assert any(f"http://127.0.0.1:{port}/" in line for line in lines)
        names = {p.name() for p in psutil.Process(proc.pid).children(recursive=True)}
        assert any("redis-server" in name for name in names), names

        with httpx.Client(base_url=f"http://127.0.0.1:{port}", follow_redirects=False, timeout=10) as client:
            login_page = client.get("/accounts/login/")
            assert login_page.status_code == 200
            token = client.cookies["csrftoken"]
            response = client.post("/accounts/login/", data={"username": username, "password": password,
                                                             "csrfmiddlewaretoken": token})
            assert response.status_code == 302, response.text[:500]
            dashboard = client.get("/")
            assert dashboard.status_code == 200
            assert "Dashboard" in dashboard.text
            assert client.get("/healthz").json()["status"] == "ok"
        assert (var / "portal.sqlite3").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 0, "".join(lines[-30:])
    leftovers = wait_for(lambda: not processes_mentioning(str(var)), timeout=15, what="every process to exit")
    assert leftovers


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


def test_after_a_restart_with_the_engines_gone_a_serving_lane_is_checked_then_failed(tmp_path):
    var = tmp_path / "var"
    env = {"PORTAL_WORKER_CONCURRENCY": "1", "PORTAL_SIM_TIME_SCALE": "0.05", "PORTAL_LANES_WATCH_INTERVAL_S": "1"}
    run = RunCommand(var, **env)
    try:
        login = run.start()
        with contextlib.closing(run.client(*login)) as client:
            launched = client.post("/api/jobs/lanes/qwen/launch", json={},
                                   headers={"X-CSRFToken": client.cookies["csrftoken"]})
            assert launched.status_code == 201, launched.text
            wait_for(lambda: client.get("/api/lanes/qwen").json()["observed_state"] == "serving", timeout=120,
                     interval=0.5, what="qwen serving")
    finally:
        run.stop()  # Ctrl+C: the simulated engines go with it; the database still says serving

    again = RunCommand(var, **env)
    try:
        login = again.start()
        with contextlib.closing(again.client(*login)) as client:
            lane = wait_for(lambda: (body := client.get("/api/lanes/qwen").json())["observed_state"] == "failed"
                            and body, timeout=60, interval=0.5, what="qwen failed after the restart")
            assert "refused" in lane["state_reason"]
            assert client.get("/api/lanes/deepseek").json()["observed_state"] == "stopped"  # never launched
            events = client.get("/lanes/qwen/").text
            assert "serving → checking" in events and "checking → failed" in events  # the state history
    finally:
        again.stop()
    with sqlite3.connect(var / "portal.sqlite3") as db:
        history = db.execute("SELECT diff FROM portal_auditevent WHERE action = 'lane.state' AND object_repr = 'qwen'"
                             " ORDER BY id").fetchall()
    states = [json.loads(diff)["observed_state"] for (diff,) in history]
    assert states[-2:] == [["serving", "checking"], ["checking", "failed"]], states
    assert "the portal started" in json.loads(history[-2][0])["reason"][1]
    assert "health watcher" in json.loads(history[-1][0])["seen_by"][1]
    leftovers = wait_for(lambda: not processes_mentioning(str(var)), timeout=15, what="every process to exit")
    assert leftovers
