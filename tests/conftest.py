"""Fixtures shared by every test: role users (admin, team lead, viewer, outsider), logged-in
clients, a real ASGI server (uvicorn, HTTP + WebSocket) on the test database, and Chromium.

A skipped test fails the run: missing prerequisites must be installed by the project's
scripts, never silently skipped."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.test import Client

from core.roles import Role, ensure_role_groups
from sparksim.standalone import EngineHandle, start_engine
from tests import dbflush
from tests.chromium import SHARED

dbflush.install()  # transactional tests' teardown empties only the tables that hold rows

# Threads (uvicorn, database_sync_to_async) must not keep connections open past a test.
settings.DATABASES["default"]["CONN_MAX_AGE"] = 0
# Role users are created per test: PBKDF2 would dominate the suite's time.
settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

PASSWORD = "correct-horse-battery-staple"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"Skipped tests fail this suite (install the prerequisite instead): {reason}"


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    """Every test starts from an empty cache. State there is keyed by primary key (a
    node's boot id, a replica's liveness, a lane's progress), and the test database
    hands the same keys out again: one test's leftovers would be another's "reboot" or
    "canary already ok"."""
    import redis

    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{settings.REDIS_PREFIX}:1:*"):  # Django's key: prefix:version:key
        client.delete(key)
    client.close()
    yield


@pytest.fixture(autouse=True)
def fresh_channel_layer() -> Iterator[None]:
    """Every test gets its own channel layer object: a layer remembers the event loop that
    receives on it, and tests (uvicorn threads, communicators) each run their own loop."""
    yield
    from channels.layers import channel_layers

    channel_layers.backends.clear()


async def consumer_ended(ws: Any, timeout: float = 30.0) -> bool:
    """A refused or closed socket's consumer ended by itself (core.socket_loop): nothing of it
    is left for the test loop's close to cancel (one left reading Redis hung that close)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not ws.future.done() and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return bool(ws.future.done())


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def make_user(username: str, role: Role | None) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD, is_staff=role is Role.ADMIN)
    if role is not None:
        ensure_role_groups()
        user.groups.add(Group.objects.get(name=role.value))
    return user


def make_superuser(username: str = "root") -> User:
    """What `manage.py createsuperuser` makes: a superuser holding the admin role (Django
    admin is break-glass for those only; tests/core/test_superusers.py)."""
    user = User.objects.create_superuser(username, f"{username}@example.org", PASSWORD)
    ensure_role_groups()
    user.groups.add(Group.objects.get(name=Role.ADMIN.value))
    return user


@pytest.fixture
def admin_user(db: None) -> User:
    return make_user("ada-admin", Role.ADMIN)


@pytest.fixture
def lead_user(db: None) -> User:
    return make_user("lee-lead", Role.TEAM_LEAD)


@pytest.fixture
def viewer_user(db: None) -> User:
    return make_user("vic-viewer", Role.VIEWER)


@pytest.fixture
def outsider_user(db: None) -> User:
    """Logged in, but in no role."""
    return make_user("otto-outsider", None)


def _client_for(user: User) -> Client:
    client = Client(enforce_csrf_checks=False)
    client.force_login(user)
    return client


@pytest.fixture
def admin_client(admin_user: User) -> Client:
    return _client_for(admin_user)


@pytest.fixture
def lead_client(lead_user: User) -> Client:
    return _client_for(lead_user)


@pytest.fixture
def viewer_client(viewer_user: User) -> Client:
    return _client_for(viewer_user)


@pytest.fixture
def outsider_client(outsider_user: User) -> Client:
    return _client_for(outsider_user)


@pytest.fixture
def role_clients(admin_client: Client, lead_client: Client, viewer_client: Client, outsider_client: Client) -> dict[str, Client]:
    return {"admin": admin_client, "lead": lead_client, "viewer": viewer_client, "outsider": outsider_client,
            "anonymous": Client()}


class AsgiServer:
    """The real ASGI app (Django + Channels) under uvicorn in a thread of the test process,
    so it sees the test database (use with transactional_db)."""

    def __init__(self) -> None:
        import uvicorn

        from portal.asgi import application

        self.port = free_port()
        # On stop, uvicorn waits for every ASGI task to end. A socket's consumer sometimes never
        # does: channels_redis's receive (redis-py 8, Python 3.11) swallows the first
        # cancellation its consumer sends it on disconnect and reads on. The graceful timeout
        # cancels such a task again (which ends it) instead of the test waiting out the join.
        config = uvicorn.Config(application, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AsgiServer:
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=15, what="uvicorn to start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class WorkerProcesses:
    """Several real uvicorn processes serving the whole ASGI app (gateway included) against
    the test database and Redis, like compose's workers: one port each, so a test chooses
    which worker answers each request (a shared socket would leave that to the kernel).
    The database rows a test made must be committed (transactional_db)."""

    def __init__(self, count: int, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.count, self.log_dir, self.extra_env = count, log_dir, env or {}
        self.ports = [free_port() for _ in range(count)]
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{port}" for port in self.ports]

    def environment(self) -> dict[str, str]:
        from django.db import connection

        db = connection.settings_dict
        env = dict(os.environ)
        env["DATABASE_URL"] = (f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:"
                               f"{db['PORT'] or 5432}/{db['NAME']}")
        env["REDIS_URL"] = settings.REDIS_URL
        env.update(self.extra_env)
        return env

    def start(self) -> WorkerProcesses:
        env = self.environment()
        for index, port in enumerate(self.ports):
            with (self.log_dir / f"worker-{index}.log").open("ab") as log:
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1",
                     "--port", str(port), "--log-level", "warning", "--lifespan", "off"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                    cwd=Path(__file__).resolve().parent.parent))
        for index, url in enumerate(self.urls):
            wait_for(lambda url=url, index=index: self._answers(url, index), timeout=180,
                     interval=0.2, what=f"uvicorn worker {index} to answer")
        return self

    def _answers(self, url: str, index: int) -> bool:
        if self.processes[index].poll() is not None:
            log = (self.log_dir / f"worker-{index}.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"uvicorn worker {index} exited: {log}")
        try:
            return httpx.get(f"{url}/v1/models", timeout=5).status_code == 401
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)


@pytest.fixture
def worker_processes(transactional_db: None, tmp_path: Path) -> Iterator[Callable[..., WorkerProcesses]]:
    """start(count=2, env={...}) -> that many uvicorn worker processes, stopped after the test."""
    started: list[WorkerProcesses] = []

    def start(count: int = 2, env: dict[str, str] | None = None) -> WorkerProcesses:
        workers = WorkerProcesses(count, tmp_path, env)
        started.append(workers)
        return workers.start()

    yield start
    for workers in started:
        workers.stop()


@pytest.fixture(scope="session", autouse=True)
def end_orphaned_database_sessions(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """At the end of the run, end database sessions that tests left behind, so the test
    database can be dropped. They come from code that ran in another context of the same
    thread (Playwright's greenlets, ASGI executor threads) and was never closed."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql" or not str(connection.settings_dict["NAME"]).startswith("test_"):
        return  # no test database was made (a run without database tests)
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )


@pytest.fixture
def asgi_server(transactional_db: None) -> Iterator[AsgiServer]:
    server = AsgiServer().start()
    yield server
    server.stop()


# sparksim engines: real processes over HTTP, shared by the simulator's own tests and the
# gateway's. DeepSeek's weights do not fit one Spark: standalone engines get a fixed KV budget.
SIM_DEEPSEEK = "deepseek-ai/DeepSeek-V4-Flash-0731"
SIM_QWEN = "Qwen/Qwen3.8-27B-FP8"
SIM_DEEPSEEK_FLAGS = ("--kv-cache-memory-bytes", "11G", "--max-model-len", "131072")


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator[Callable[..., EngineHandle]]:
    """start(model, *flags, **start_engine options) -> a healthy engine, stopped after the test."""
    started: list[EngineHandle] = []

    def start(model: str = SIM_DEEPSEEK, *extra: str, **options: Any) -> EngineHandle:
        flags = SIM_DEEPSEEK_FLAGS if model == SIM_DEEPSEEK else ()
        log_path = tmp_path / f"engine-{len(started)}.log"
        handle = start_engine(model, log_path, *flags, *extra, **options)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        handle.stop()


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A Chromium shared with the module's next test if that one asks for a browser too
    (tests/chromium.py); the contexts this test opened are closed after it."""
    yield SHARED.get(request.node.module)
    SHARED.end_test()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    SHARED.before_teardown(item, nextitem)
    yield


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context()
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    yield tab
    context.close()


def browser_login(page: Any, base_url: str, username: str, password: str = PASSWORD) -> None:
    page.goto(f"{base_url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
