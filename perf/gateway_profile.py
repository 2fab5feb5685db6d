"""Where the gateway's time goes: the ASGI app under cProfile (one uvicorn process, uvloop,
httptools) driven with plain and streaming requests, CPU time grouped by component.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gw_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python perf/gateway_profile.py [--requests 4000] [--budgets] [--bare]

--budgets: every request with a key under its own and its team's token budgets
(perf/gateway_budgets.py), plain requests only. --bare: without the SDK's retry header, as
the budgets' comparison sends them (no retry registration). Run `--bare` and `--bare
--budgets` one after the other and compare the µs per request of each group.

cProfile roughly doubles Python's cost, so read the shares, not the absolute times."""

from __future__ import annotations

import argparse
import asyncio
import os
import pstats
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gateway_overhead import ROOT, drive, free_port, prepare_database, wait_port  # noqa: E402

from perf.gateway_budgets import budgeted_key  # noqa: E402

GROUPS = [
    ("gateway: token budgets (gateway/budgets.py)", "/gateway/budgets.py"),
    ("gateway: the hot path's Redis pipe (gateway/scripts.py)", "/gateway/scripts.py"),
    ("gateway: the gateway app (auth, admission, relay, log)", "/gateway/"),
    ("upstream client: httpx", "/httpx/"),
    ("upstream client: aiohttp + httpx-aiohttp", "/aiohttp"),
    ("redis client (admission + release scripts)", "/redis/"),
    ("uvicorn + httptools (HTTP server)", "/uvicorn/"),
    ("json (orjson, C)", "orjson"),
    ("asyncio / uvloop scheduling", "asyncio"),
    ("Django (settings access, ORM off the hot path)", "/django/"),
]


def group_of(filename: str) -> str:
    for label, needle in GROUPS:
        if needle in filename:
            return label
    return "other (builtins, C calls, stdlib)"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--budgets", action="store_true", help="a key under token budgets, plain requests only")
    parser.add_argument("--bare", action="store_true", help="no SDK retry header (no retry registration)")
    args = parser.parse_args()
    upstream_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING", "PORTAL_GATEWAY_DEFAULT_LANE": "bench"}
    profile_path = Path(tempfile.mkdtemp()) / "gateway.prof"
    upstream = subprocess.Popen([sys.executable, str(ROOT / "perf" / "gateway_overhead.py"), "--serve-upstream",
                                 str(upstream_port)], env=env)
    try:
        wait_port(upstream_port)
        secret = prepare_database(upstream_port)
        if args.budgets:
            secret = budgeted_key()
        server = subprocess.Popen(
            [sys.executable, "-m", "cProfile", "-o", str(profile_path), "-m", "uvicorn", "portal.asgi:application",
             "--host", "127.0.0.1", "--port", str(gateway_port), "--loop", "uvloop", "--http", "httptools",
             "--no-access-log", "--log-level", "warning"], cwd=ROOT, env=env)
        wait_port(gateway_port)
        url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        auth = {"authorization": f"Bearer {secret}", **({} if args.bare else {"x-stainless-retry-count": "0"})}
        plain = asyncio.run(drive(url, auth, stream=False, concurrency=8, requests=args.requests))
        stream = asyncio.run(drive(url, auth, stream=True, concurrency=8, requests=0 if args.budgets else args.requests // 4))
        server.send_signal(signal.SIGINT)
        server.wait(30)
    finally:
        upstream.send_signal(signal.SIGINT)
        upstream.wait(10)
    requests = len(plain.latencies) + len(stream.latencies)
    stats = pstats.Stats(str(profile_path))
    totals: dict[str, float] = defaultdict(float)
    for (filename, _, _), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        totals[group_of(filename)] += tottime
    busy = sum(totals.values())
    print(f"\n{requests} requests ({len(plain.latencies)} plain, {len(stream.latencies)} streamed), "
          f"errors {plain.errors + stream.errors}; CPU under the profiler: {busy:.2f} s, "
          f"{busy / requests * 1e6:.0f} µs per request\n")
    print("| component | share | µs per request (profiled) |\n|---|---|---|")
    for label, seconds in sorted(totals.items(), key=lambda item: -item[1]):
        print(f"| {label} | {seconds / busy:.0%} | {seconds / requests * 1e6:.0f} |")
    print()
    stats.sort_stats("tottime").print_stats(20)
    if args.budgets:  # the budgeted path's own functions, by cumulative time
        stats.sort_stats("cumulative").print_stats(r"gateway/(budgets|admission|scripts|limits)\.py")


if __name__ == "__main__":
    main()
