"""The gateway as production runs it: uvicorn in its own process (uvloop, httptools), the
request log flushed when the process is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth.models import User

from gateway.models import RequestLog
from sparksim.standalone import EngineHandle
from tests.conftest import free_port, wait_for
from tests.gateway.conftest import SIM_SERVED, create_key, engine_received, make_lane
from tests.subprocess_settings import subprocess_settings

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    db = settings.DATABASES["default"]
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def test_a_stopped_worker_writes_the_request_log_rows_it_still_held(
    key_owner: User, qwen_engine: EngineHandle, tmp_path: Path
) -> None:
    make_lane("qwen", qwen_engine.port, served=SIM_SERVED)
    secret, _ = create_key(key_owner)
    port = free_port()
    env = {**os.environ, "DATABASE_URL": database_url(), "PORTAL_GATEWAY_DEFAULT_LANE": "qwen",
           **subprocess_settings(GATEWAY_LOG_FLUSH_S=3600),  # nothing is flushed before the shutdown
           "PORTAL_REDIS_PREFIX": settings.REDIS_PREFIX.removesuffix(os.environ.get("PYTEST_XDIST_WORKER", ""))}
    log = (tmp_path / "uvicorn.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--loop", "uvloop", "--http", "httptools", "--no-access-log"], cwd=ROOT, env=env, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _up(port), timeout=30, what="uvicorn to start")
        for _ in range(5):
            answer = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                headers={"authorization": f"Bearer {secret}"},
                                json={"model": "auto", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
            assert answer.status_code == 200
        assert RequestLog.objects.count() == 0  # still held by the worker
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)
        log.close()
    assert server.returncode == 0, (tmp_path / "uvicorn.log").read_text()
    assert RequestLog.objects.filter(lane="qwen", status=200).count() == 5
    assert len(engine_received(qwen_engine)) == 5


def _up(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
