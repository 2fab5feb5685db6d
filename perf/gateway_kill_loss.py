"""What a SIGKILL of the web process loses from the request log: the rows still queued in
the log writer (gateway/logwriter.py), at most its flush window (GATEWAY_LOG_FLUSH_S in
portal/tuning.py) or one batch (GATEWAY_LOG_BATCH), whichever fills first.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gw_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python perf/gateway_kill_loss.py [--rates 50,200] [--seconds 4]

Starts a fast fake upstream (perf/gateway_drive.py) and the web process with `make run`'s
own command line (portal.launcher), sends non-streamed requests through the gateway at a
steady rate, SIGKILLs the web process mid-traffic, then counts: answers the clients got
(200) against request-log rows written. The lost rows are the last answers before the
kill: the window printed is how long before the kill the oldest lost one was answered.
(A graceful stop, SIGTERM, loses none: tests/portal/test_graceful_stop.py.)"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perf.gateway_drive import BODY, free_port, serve_upstream, wait_port  # noqa: E402
from perf.gateway_overhead import prepare_database  # noqa: E402


async def steady(url: str, secret: str, rate: float, seconds: float, kill: subprocess.Popen[bytes]) -> tuple[list[float], float]:
    """Requests at `rate` per second for `seconds`, then SIGKILL: (answer times, kill time)."""
    import aiohttp

    answered: list[float] = []
    body = json.dumps({**BODY, "model": "bench", "stream": False}).encode()
    headers = {"authorization": f"Bearer {secret}", "content-type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def one() -> None:
            try:
                async with session.post(f"{url}/v1/chat/completions", data=body, headers=headers) as response:
                    await response.read()
                    if response.status == 200:
                        answered.append(time.monotonic())
            except aiohttp.ClientError:
                pass  # in flight at the kill: no answer, and no row is owed

        tasks = []
        start = time.monotonic()
        sent = 0
        while time.monotonic() - start < seconds:
            due = int((time.monotonic() - start) * rate) + 1
            for _ in range(due - sent):
                tasks.append(asyncio.create_task(one()))
            sent = due
            await asyncio.sleep(0.002)
        killed_at = time.monotonic()
        os.kill(kill.pid, signal.SIGKILL)
        await asyncio.gather(*tasks)
    return [t for t in answered if t <= killed_at], killed_at


def wait_healthy(url: str, timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url}/healthz did not answer 200 in {timeout}s")


def measure(rate: float, seconds: float, secret: str, env: dict[str, str]) -> dict[str, float]:
    from gateway.models import RequestLog
    from portal.launcher import Launcher

    port = free_port()
    web = subprocess.Popen(Launcher("127.0.0.1", port).web_argv(), cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=120)
        wait_healthy(f"http://127.0.0.1:{port}")
        since = datetime.now(UTC)
        answered, killed_at = asyncio.run(steady(f"http://127.0.0.1:{port}", secret, rate, seconds, web))
    finally:
        web.kill()
        web.wait()
    rows = RequestLog.objects.filter(lane="bench", status=200, created_at__gte=since).count()
    lost = max(0, len(answered) - rows)
    window = killed_at - sorted(answered)[-lost] if lost else 0.0
    return {"rate": rate, "answered": len(answered), "rows": rows, "lost": lost, "window_s": round(window, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="50,200")
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--serve-upstream", type=int)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    upstream_port = free_port()
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="portal.settings")
    upstream = subprocess.Popen([sys.executable, __file__, "--serve-upstream", str(upstream_port)], env=env)
    try:
        wait_port(upstream_port)
        secret = prepare_database(upstream_port)
        print("rate req/s | answered | rows | lost | oldest lost answered before the kill")
        for rate in (float(r) for r in args.rates.split(",")):
            figures = measure(rate, args.seconds, secret, env)
            print(f"{figures['rate']:>10g} | {figures['answered']:>8} | {figures['rows']:>4} | {figures['lost']:>4} | "
                  f"{figures['window_s']:.2f} s")
    finally:
        upstream.terminate()
        upstream.wait()


if __name__ == "__main__":
    main()
