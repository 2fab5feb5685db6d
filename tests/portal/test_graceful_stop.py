"""D4: a graceful stop of `make run`'s web process (its own command line, SIGTERM to its
process group as the run command sends it) while streams are still being answered logs
every request that finished: uvicorn drains the open streams, then the ASGI lifespan's
shutdown flushes the request log. Sequenced by the engine's hold fault, not by sleeps:
every stream is inside the lane when the signal goes, and finishes during the drain."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from core.roles import Role
from gateway.models import RequestLog
from portal.launcher import ROOT, Launcher
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, WorkerProcesses, free_port, make_user, wait_for
from tests.gateway.conftest import SIM_SERVED, create_key, make_lane, set_engine_faults
from tests.portal.processes import web_answers

pytestmark = pytest.mark.django_db(transaction=True)

STREAMS = 20



def _stream(url: str, secret: str, done: list[bool], index: int) -> None:
    body = {"model": "qwen", "stream": True, "max_tokens": 40,
            "messages": [{"role": "user", "content": f"stream {index}"}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120,
                      headers={"authorization": f"Bearer {secret}"}) as response:
        text = "".join(response.iter_text())
    done[index] = response.status_code == 200 and text.rstrip().endswith("data: [DONE]")


def test_sigterm_during_the_drain_logs_every_finished_stream(
    engine_factory: Callable[..., EngineHandle], tmp_path: Path
) -> None:
    engine = engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, time_scale=0.001)
    make_lane("qwen", engine.port, served=SIM_SERVED)
    secret, _ = create_key(make_user("gw-admin", Role.ADMIN))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "web.log"
    with log.open("ab") as out:
        web = subprocess.Popen(Launcher("127.0.0.1", port).web_argv(), cwd=ROOT, stdout=out,
                               stderr=subprocess.STDOUT, env=WorkerProcesses(1, tmp_path).environment(),
                               start_new_session=True)
    try:
        wait_for(lambda: web_answers(web, url, log), timeout=180, interval=0.2, what="the web process to answer")
        set_engine_faults(engine, hold=True)
        done = [False] * STREAMS
        clients = [threading.Thread(target=_stream, args=(url, secret, done, i), daemon=True) for i in range(STREAMS)]
        for client in clients:
            client.start()

        def received() -> int:
            return sum(r["path"] == "/v1/chat/completions" for r in httpx.get(f"{engine.url}/_sim/requests").json())

        wait_for(lambda: received() == STREAMS, timeout=60, what="every stream to reach the lane")
        os.killpg(web.pid, signal.SIGTERM)  # what the run command sends on Ctrl+C
        wait_for(lambda: "Waiting for connections to close" in log.read_text(errors="replace"), timeout=30,
                 what="uvicorn to drain")
        set_engine_faults(engine, hold=False)  # the streams finish now, during the drain
        for client in clients:
            client.join(timeout=120)
        # uvicorn ends by re-raising the signal once its lifespan is done
        assert web.wait(timeout=60) == -signal.SIGTERM, log.read_text(errors="replace")[-3000:]
        assert "Application shutdown complete" in log.read_text(errors="replace")
        finished = sum(done)
        assert finished == STREAMS, log.read_text(errors="replace")[-3000:]
        assert RequestLog.objects.filter(lane="qwen", status=200).count() == finished
    finally:
        if web.poll() is None:
            os.killpg(web.pid, signal.SIGKILL)
            web.wait(timeout=10)
