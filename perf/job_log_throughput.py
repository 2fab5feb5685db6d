"""Job log throughput: lines per second from a running job to a connected browser socket,
and how far behind the socket is (p50/p95), through the real path: LogSink batches →
bulk_create → channel layer (Redis) → JobLogConsumer under uvicorn → WebSocket client.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/jobs_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
      .venv/bin/python manage.py migrate -v0
    DATABASE_URL=... REDIS_URL=... .venv/bin/python perf/job_log_throughput.py [--rate 10000] [--seconds 10]

Goal: 10,000 lines/s sustained, under 0.5 s behind.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

import websockets  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from core.roles import Role, ensure_role_groups  # noqa: E402
from core.stats import percentile_nearest_rank  # noqa: E402
from jobs.logsink import LogSink  # noqa: E402
from jobs.models import Job, JobKind  # noqa: E402

LINE = "INFO 11-29 18:00:00 [engine.py:310] Avg prompt throughput: 1234.5 tokens/s, generation 567.8 tokens/s, seq "


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def session_cookie() -> str:
    ensure_role_groups()
    user, _ = User.objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get(name=Role.VIEWER.value))
    client = Client()
    client.force_login(user)
    return client.cookies["sessionid"].value


def produce(job_id: int, rate: float, seconds: float, sent_at: dict[int, float], done: threading.Event) -> None:
    """Appends lines at `rate` per second; a flusher writes and publishes them every
    JOBS_LOG_FLUSH_S, exactly as the runner's monitor does."""
    sink = LogSink(job_id)
    stop_flush = threading.Event()

    def flusher() -> None:
        while not stop_flush.is_set():
            stop_flush.wait(settings.JOBS_LOG_FLUSH_S)
            sink.flush()
        sink.flush()
        connection.close()

    thread = threading.Thread(target=flusher, daemon=True)
    thread.start()
    start = time.monotonic()
    produced = 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while produced < due:
            produced += 1
            sent_at[produced] = time.monotonic()
            sink.append("spark1", "stdout", f"{LINE}{produced}")
        time.sleep(0.002)
    stop_flush.set()
    thread.join()
    done.set()


async def follow(url: str, cookie: str, total: dict[str, int], sent_at: dict[int, float],
                 delays: list[float], done: threading.Event) -> float:
    headers = {"Cookie": f"sessionid={cookie}", "Origin": "http://127.0.0.1"}
    async with websockets.connect(url, additional_headers=headers, max_size=None) as ws:
        await ws.send(json.dumps({"after_seq": 0}))
        last = 0
        arrival = [time.monotonic()]
        while True:
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
            except TimeoutError:
                if done.is_set() and (last >= len(sent_at) or time.monotonic() - arrival[0] > 10):
                    return arrival[0]
                continue
            message = json.loads(raw)
            if message["event"] != "job.log":
                continue
            now = time.monotonic()
            for line in message["data"]["lines"]:
                seq = line[0]
                assert seq == last + 1, f"gap or repeat: {last} then {seq}"
                last = seq
                delays.append(now - sent_at[seq])
            total["received"] = last
            arrival[0] = now
            if done.is_set() and last >= len(sent_at):
                return now


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=10_000, help="lines per second the job writes")
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    cookie = session_cookie()
    job = Job.objects.create(kind=JobKind.STATUS, params={"nodes": []})
    port = free_port()
    # The web tier in its own process, as in production: this process plays the worker.
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port", str(port),
         "--log-level", "warning", "--lifespan", "off"],
        cwd=Path(__file__).resolve().parent.parent, env=dict(os.environ),
    )
    deadline = time.monotonic() + 30
    while not _listening(port):
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit("uvicorn did not start")
        time.sleep(0.1)

    sent_at: dict[int, float] = {}
    delays: list[float] = []
    total: dict[str, int] = {}
    done = threading.Event()
    loop = asyncio.new_event_loop()
    follower = loop.create_task(follow(f"ws://127.0.0.1:{port}/ws/jobs/{job.pk}/", cookie, total, sent_at, delays, done))
    loop.run_until_complete(asyncio.sleep(0.5))  # connected and resumed before the job writes
    start = time.monotonic()
    producer = threading.Thread(target=produce, args=(job.pk, args.rate, args.seconds, sent_at, done))
    producer.start()
    while not done.is_set():
        loop.run_until_complete(asyncio.sleep(0.1))
    end = loop.run_until_complete(follower)  # when the last line reached the socket
    server.terminate()
    server.wait(timeout=10)
    received = total.get("received", 0)
    # Nearest rank, as every timing of the portal's own in perf/: an observed delay.
    p50, p95 = (percentile_nearest_rank(delays, q) or 0.0 for q in (0.5, 0.95))
    print(f"job log → socket: target {args.rate:,.0f} lines/s for {args.seconds:g} s; produced {len(sent_at):,}, "
          f"received {received:,} (no gap, no repeat)")
    print(f"  throughput {received / (end - start):,.0f} lines/s end to end; "
          f"delay p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms")
    Job.objects.filter(pk=job.pk).delete()


if __name__ == "__main__":
    main()
