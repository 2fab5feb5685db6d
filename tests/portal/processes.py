"""The portal's Celery processes (jobs worker, periodic worker, beat) as real subprocesses
on the test database and Redis, for tests that need the whole machinery running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def database_url_of_tests() -> str:
    db = settings.DATABASES["default"]
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


class CeleryProcesses:
    def __init__(self, logs: Path, **env: str) -> None:
        self.logs = logs
        self.env = dict(os.environ, DATABASE_URL=database_url_of_tests(), DJANGO_SETTINGS_MODULE="portal.settings",
                        PYTHONUNBUFFERED="1", **env)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT, env=self.env,
                                stdout=(self.logs / f"{name}.log").open("wb"), stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def start_all(self) -> CeleryProcesses:
        self.start("worker", ["-m", "portal.workers", "jobs"])
        self.start("periodic-worker", ["-m", "portal.workers", "periodic"])
        self.start("beat", ["-m", "celery", "-A", "portal", "beat", "-l", "info",
                            "-s", str(self.logs / "celerybeat-schedule")])
        return self

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def engine_processes(port: int) -> list[psutil.Process]:
    """sparksim engines listening on this port (what `vllm serve --port N` is on a Spark)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "sparksim" in " ".join(cmdline) and "--port" in cmdline and str(port) in cmdline:
            found.append(proc)
    return found


def kill_engines(port: int) -> int:
    """kill -9 of the engine behind a lane, as the OOM killer would."""
    procs = engine_processes(port)
    for proc in procs:
        proc.kill()
    psutil.wait_procs(procs, timeout=10)
    return len(procs)


def web_answers(proc: subprocess.Popen[bytes], url: str, log: Path) -> bool:
    """The web process answers /healthz (a wait_for condition); it exiting instead is a failure
    with the end of its log."""
    if proc.poll() is not None:
        raise AssertionError(f"web exited: {log.read_text(errors='replace')[-3000:]}")
    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False
