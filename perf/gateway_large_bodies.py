"""perf/gateway_overhead.py --large-bodies: small requests at one client (through the
gateway, and directly to the upstream in alternation) alone, then while clients in another
process post 8 MB bodies to the gateway; with the gateway's event-loop lag (perf/loop_probe.py)
and where the machine's CPU went. Not a script: perf/gateway_overhead.py runs it (and runs
the posters' process, `--post-large`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from perf.gateway_drive import BODY, Result

SCRIPT = Path(__file__).with_name("gateway_overhead.py")  # it runs the posters' process (--post-large)

LARGE_BODY_BYTES = 8 * 1024 * 1024


def large_body() -> bytes:
    text = ("lorem ipsum dolor sit amet " * (LARGE_BODY_BYTES // 27 + 1))[:LARGE_BODY_BYTES]
    return json.dumps({"model": "bench-long", "max_tokens": 16,
                       "messages": [{"role": "user", "content": text}]}).encode()


async def post_large_until(url: str, headers: dict[str, str], stop: asyncio.Event, counts: dict[str, int]) -> None:
    import aiohttp

    body = large_body()
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            async with session.post(url, data=body, headers={**headers, "content-type": "application/json"}) as resp:
                await resp.read()
                counts[str(resp.status)] = counts.get(str(resp.status), 0) + 1


def post_large(url: str, secret: str, clients: int) -> None:
    """The large-body clients, in their own process (so the client measuring the small
    requests is not busy sending 8 MB bodies): post until SIGINT, then print the answers'
    statuses as JSON."""
    async def main() -> dict[str, int]:
        stop, counts = asyncio.Event(), {}  # type: ignore[var-annotated]
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
        auth = {"authorization": f"Bearer {secret}", "x-stainless-retry-count": "0"}
        await asyncio.gather(*(post_large_until(url, auth, stop, counts) for _ in range(clients)))
        return counts

    print(json.dumps(asyncio.run(main())), flush=True)


async def alternate(direct_url: str, gateway_url: str, auth: dict[str, str], seconds: float) -> tuple[Result, Result]:
    """One client, one small request directly to the upstream then one through the gateway,
    for `seconds`: both see the same moment of a shared machine, so the difference is what
    the gateway adds, whatever else the machine is doing."""
    import aiohttp

    body = json.dumps({**BODY, "stream": False}).encode()
    direct, gateway = Result(), Result()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        begin = time.perf_counter()
        while time.perf_counter() - begin < seconds:
            for url, headers, result in ((direct_url, {}, direct), (gateway_url, auth, gateway)):
                started = time.perf_counter()
                try:
                    async with session.post(url, data=body,
                                            headers={**headers, "content-type": "application/json"}) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:
                    result.latencies.append(time.perf_counter() - started)
                else:
                    result.errors += 1
        direct.elapsed = gateway.elapsed = time.perf_counter() - begin
    return direct, gateway


async def probe(url: str) -> dict[str, Any]:
    """The gateway process's loop lag and CPU since the previous call (perf/loop_probe.py)."""
    import aiohttp

    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return dict(await resp.json())


def pin(pid: int, cpus: set[int], *, with_children: bool = False) -> None:
    """Every thread of `pid` (and of its child processes) onto `cpus` (--pin)."""
    pending = [pid]
    while pending:
        current = pending.pop()
        for task in os.listdir(f"/proc/{current}/task"):
            os.sched_setaffinity(int(task), cpus)
            if with_children:
                with open(f"/proc/{current}/task/{task}/children") as children:
                    pending.extend(int(child) for child in children.read().split())


def upstream_cpu_s(pids: list[int]) -> float:
    return sum(cpu_s(pid) for pid in pids)


def cpu_s(pid: int) -> float:
    from perf.loop_probe import proc_cpu_s

    return proc_cpu_s(pid)


Phase = tuple[dict[str, Any], float, float, float]  # the probe's figures; upstream, posters, client CPU s


def _phase_row(label: str, direct: Result, gateway: Result, phase: Phase,
               large_bodies_answered: dict[str, Any] | None) -> dict[str, Any]:
    lag, upstream_cpu, posters_cpu, client_cpu = phase
    wall = lag["wall_s"] or 1.0
    p50, p99 = Result.ms(gateway.latencies, 0.5), Result.ms(gateway.latencies, 0.99)
    direct_p50, direct_p99 = Result.ms(direct.latencies, 0.5), Result.ms(direct.latencies, 0.99)
    return {"case": label, "p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
            "direct_p50_ms": round(direct_p50, 2), "direct_p99_ms": round(direct_p99, 2),
            "added_p50_ms": round(p50 - direct_p50, 2), "added_p99_ms": round(p99 - direct_p99, 2),
            "requests": len(gateway.latencies), "errors": gateway.errors + direct.errors,
            "large_bodies_answered": large_bodies_answered,
            "loop_lag_p50_ms": lag["lag_p50_ms"], "loop_lag_p99_ms": lag["lag_p99_ms"],
            "loop_lag_max_ms": lag["lag_max_ms"], "loop_stalled_ms_per_s": round(lag["stalled_ms"] / wall, 1),
            # the loop's own CPU between two 1 ms ticks: what the portal held it for
            "loop_busy_p999_ms": lag["busy_p999_ms"], "loop_busy_max_ms": lag["busy_max_ms"],
            "loop_busy_over_2ms_per_s": round(lag["busy_over_2ms"] / wall, 1),
            # CPU share of one core, per process, over the phase (2 cores = 200 %)
            "cpu_pct": {"gateway_loop": round(100 * lag["loop_thread_cpu_s"] / wall),
                        "gateway_threads": round(100 * lag["other_threads_cpu_s"] / wall),
                        "gateway_workers": round(100 * lag["workers_cpu_s"] / wall),
                        "upstream": round(100 * upstream_cpu / wall),
                        "posters": round(100 * posters_cpu / wall),
                        "client": round(100 * client_cpu / wall)},
            "load_avg_1m": os.getloadavg()[0]}


async def small_under_large(direct_url: str, gateway_url: str, auth: dict[str, str], secret: str, *,
                            large_clients: int, seconds: float, probe_url: str, upstream_pids: list[int],
                            large_nice: int, posters_cpus: set[int] | None = None) -> list[dict[str, Any]]:
    """Small requests' latency at one client (through the gateway, and directly to the
    upstream in alternation), alone, then while `large_clients` (another process, at
    niceness `large_nice`) post 8 MB bodies to the gateway back to back. With each phase:
    the gateway's event-loop lag and where the machine's CPU went (gateway loop thread,
    its other threads, its worker processes, the fake upstream, the 8 MB posters, this
    client)."""
    await alternate(direct_url, gateway_url, auth, 1.0)  # warm-up
    await probe(probe_url)
    marks = (upstream_cpu_s(upstream_pids), time.process_time(), 0.0)
    alone = await alternate(direct_url, gateway_url, auth, seconds)
    phases: list[Phase] = [(await probe(probe_url), upstream_cpu_s(upstream_pids) - marks[0], 0.0,
                            time.process_time() - marks[1])]
    posters = subprocess.Popen([sys.executable, str(SCRIPT), "--post-large", gateway_url, "--secret", secret,
                                "--large-clients", str(large_clients)], stdout=subprocess.PIPE, text=True,
                               preexec_fn=(lambda: os.nice(large_nice)) if large_nice else None)
    if posters_cpus is not None:
        pin(posters.pid, posters_cpus)
    await asyncio.sleep(2.0)  # the large posts are under way
    began = time.perf_counter()
    await probe(probe_url)
    marks = (upstream_cpu_s(upstream_pids), time.process_time(), cpu_s(posters.pid))
    loaded = await alternate(direct_url, gateway_url, auth, seconds)
    phases.append((await probe(probe_url), upstream_cpu_s(upstream_pids) - marks[0], cpu_s(posters.pid) - marks[2],
                   time.process_time() - marks[1]))
    posters.send_signal(signal.SIGINT)
    await probe(probe_url + "?stop")  # the probe's tick costs CPU: off for what follows
    counts = json.loads(posters.communicate(timeout=120)[0] or "{}")
    counts["per_s"] = round(sum(counts.values()) / (time.perf_counter() - began + 2.0), 1)
    loaded_label = f"small requests, {large_clients} clients posting 8 MB bodies" + (
        f" (nice {large_nice})" if large_nice else "")
    rows = []
    for (label, (direct, gateway)), phase in zip((("small requests alone", alone), (loaded_label, loaded)), phases,
                                                 strict=True):
        rows.append(_phase_row(label, direct, gateway, phase, counts if gateway is loaded[1] else None))
        print(json.dumps(rows[-1]), flush=True)
        for count, stack in phase[0]["stall_stacks"]:
            print(f"    stalled {count}× in {stack}", flush=True)
    return rows
