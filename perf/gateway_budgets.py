"""What token budgets add to the gateway: the same requests with a key under no budget and
with a key under its own and its team's budgets (limits never reached, so every request is
checked and charged), in rounds against the same gateway and upstream, with an A/A control
beside them — the plain key driven twice in each round, the same method: the noise the added
figure must stand out of. Run by `perf/gateway_overhead.py --budgets`; the figures are in
docs/performance.md.

--baseline-tree PATH (e.g. `git archive main | tar -x -C PATH`): a second gateway serves the
same database and Redis from that tree's code, and every round drives both gateways, so a
change and its baseline are measured side by side at the same moments of a shared machine."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from perf.gateway_drive import Result, drive, free_port, wait_port
from perf.loop_probe import proc_cpu_s


def budgeted_key() -> str:
    """A key in a team, both with a daily budget far above what a run uses."""
    from django.contrib.auth.models import AnonymousUser

    from gateway.models import ApiKey, Team
    from gateway.services import api_key_create
    from gateway.team_services import budget_set, team_create

    ApiKey.objects.filter(name="bench-budgeted").delete()
    Team.objects.filter(name="bench-team").delete()
    actor = AnonymousUser()
    team = team_create(actor=actor, name="bench-team")
    created = api_key_create(actor=actor, name="bench-budgeted", team=team.pk)
    budget_set(actor=actor, team=team, period="day", total_tokens=10**15)
    budget_set(actor=actor, key=created.key, period="month", prompt_tokens=10**15, completion_tokens=10**15)
    return created.secret


def start_baseline(tree: str) -> tuple[subprocess.Popen[bytes], str, int]:
    """The baseline tree's gateway (its own perf/gateway_overhead.py --serve-gateway), as the
    change's is started: the same environment, one uvicorn worker."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING", "PORTAL_GATEWAY_DEFAULT_LANE": "bench"}
    process = subprocess.Popen([sys.executable, str(Path(tree) / "perf" / "gateway_overhead.py"), "--serve-gateway",
                                str(port)], cwd=tree, env=env)
    wait_port(port)
    return process, f"http://127.0.0.1:{port}/v1/chat/completions", process.pid


class Arms:
    """Each arm's p50 and p99 per round, and its gateway process's CPU time over all rounds."""

    def __init__(self, names: list[str]) -> None:
        self.p50: dict[str, list[float]] = {name: [] for name in names}
        self.p99: dict[str, list[float]] = {name: [] for name in names}
        self.cpu_s = dict.fromkeys(names, 0.0)
        self.requests = dict.fromkeys(names, 0)
        self.errors = 0

    def add(self, name: str, result: Result, cpu_s: float) -> None:
        self.p50[name].append(Result.ms(result.latencies, 0.5))
        self.p99[name].append(Result.ms(result.latencies, 0.99))
        self.cpu_s[name] += cpu_s
        self.requests[name] += len(result.latencies)
        self.errors += result.errors

    def added(self, values: dict[str, list[float]], arm: str) -> float:
        return round(statistics.median(b - a for a, b in zip(values["plain"], values[arm], strict=True)), 3)

    def cpu_us(self, arm: str) -> float:
        return self.cpu_s[arm] / max(1, self.requests[arm]) * 1e6

    def summary(self, case: str, rounds: int, requests: int) -> dict[str, Any]:
        return {"case": case, "rounds": rounds, "requests_per_round": requests,
                "plain_p50_ms": round(statistics.median(self.p50["plain"]), 3),
                "budgeted_p50_ms": round(statistics.median(self.p50["budgeted"]), 3),
                "aa_added_p50_ms": self.added(self.p50, "again"), "added_p50_ms": self.added(self.p50, "budgeted"),
                "aa_added_p99_ms": self.added(self.p99, "again"), "added_p99_ms": self.added(self.p99, "budgeted"),
                "plain_cpu_us": round(self.cpu_us("plain")),
                "aa_added_cpu_us": round(self.cpu_us("again") - self.cpu_us("plain"), 1),
                "added_cpu_us": round(self.cpu_us("budgeted") - self.cpu_us("plain"), 1),
                "errors": self.errors, "load_avg_1m": round(os.getloadavg()[0], 1)}


async def budgets_on_off(gateway_url: str, plain_secret: str, budgeted_secret: str, *, quick: bool, gateway_pid: int,
                         baseline_tree: str | None = None) -> list[dict[str, Any]]:
    """Per round and gateway (their order alternating), a short unmeasured warm-up, then every
    arm — the plain key, the plain key again (A/A), the budgeted key — in an order rotated
    from round to round, so that no arm is always the first after the other gateway's turn.
    Latency: each arm's p50/p99 per round, the added figures the median over rounds of
    (arm − plain). CPU: the gateway process's CPU time per request of each arm, over all
    rounds (steadier than latency on a shared machine; it includes the work after each answer)."""
    rounds = 8 if quick else 24
    baseline = start_baseline(baseline_tree) if baseline_tree else None
    gateways = {"change": (gateway_url, gateway_pid), **({"baseline": baseline[1:]} if baseline else {})}
    keys = {"plain": plain_secret, "again": plain_secret, "budgeted": budgeted_secret}
    names = list(keys)
    try:
        for url, _ in gateways.values():
            for secret in (plain_secret, budgeted_secret):  # warm-up: caches, pools
                await drive(url, {"authorization": f"Bearer {secret}"}, stream=False, concurrency=8, requests=300)
        rows = []
        for concurrency, requests in ((1, 150 if quick else 250), (16, 400 if quick else 800)):
            arms = {gateway: Arms(names) for gateway in gateways}
            for number in range(rounds):
                order = list(gateways) if number % 2 == 0 else list(gateways)[::-1]
                shift = (number // 2) % len(names)
                for gateway in order:
                    url, pid = gateways[gateway]
                    await drive(url, {"authorization": f"Bearer {plain_secret}"}, stream=False,
                                concurrency=concurrency, requests=requests // 5)  # its turn's warm-up
                    for arm in names[shift:] + names[:shift]:
                        before = proc_cpu_s(pid)
                        result = await drive(url, {"authorization": f"Bearer {keys[arm]}"}, stream=False,
                                             concurrency=concurrency, requests=requests)
                        arms[gateway].add(arm, result, proc_cpu_s(pid) - before)
            for gateway in gateways:
                rows.append(arms[gateway].summary(f"{gateway} c={concurrency}", rounds, requests))
                print(rows[-1], flush=True)
        return rows
    finally:
        if baseline:
            baseline[0].send_signal(signal.SIGINT)
            baseline[0].wait(10)
