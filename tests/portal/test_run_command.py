"""The run command end to end: embedded SQLite + Redis, web/worker/beat as separate
processes, the printed login works, and Ctrl+C leaves no process behind."""

from __future__ import annotations

import os
import re
import signal
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
