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


def start_baseline(tree: str) -> tuple[subprocess.Popen[bytes], str]:
    """The baseline tree's gateway (its own perf/gateway_overhead.py --serve-gateway), as the
    change's is started: the same environment, one uvicorn worker."""
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING", "PORTAL_GATEWAY_DEFAULT_LANE": "bench"}
    process = subprocess.Popen([sys.executable, str(Path(tree) / "perf" / "gateway_overhead.py"), "--serve-gateway",
                                str(port)], cwd=tree, env=env)
    wait_port(port)
    return process, f"http://127.0.0.1:{port}/v1/chat/completions"


def _summary(gateway: str, concurrency: int, rounds: int, requests: int,
             p50: dict[str, list[float]], p99: dict[str, list[float]], errors: int) -> dict[str, Any]:
    def added(values: dict[str, list[float]], arm: str) -> float:
        return round(statistics.median(b - a for a, b in zip(values["plain"], values[arm], strict=True)), 3)

    return {"case": f"{gateway} c={concurrency}", "rounds": rounds, "requests_per_round": requests,
            "plain_p50_ms": round(statistics.median(p50["plain"]), 3),
            "budgeted_p50_ms": round(statistics.median(p50["budgeted"]), 3),
            "aa_added_p50_ms": added(p50, "again"), "added_p50_ms": added(p50, "budgeted"),
            "aa_added_p99_ms": added(p99, "again"), "added_p99_ms": added(p99, "budgeted"),
            "errors": errors, "load_avg_1m": round(os.getloadavg()[0], 1)}


async def budgets_on_off(gateway_url: str, plain_secret: str, budgeted_secret: str, *, quick: bool,
                         baseline_tree: str | None = None) -> list[dict[str, Any]]:
    """Per round, every arm — the plain key, the plain key again (A/A), the budgeted key; on
    each gateway — in an order rotated from round to round (none always first); each arm's
    p50/p99 per round, and the added figures as the median over rounds of (arm − plain)."""
    rounds = 6 if quick else 12
    baseline = start_baseline(baseline_tree) if baseline_tree else None
    gateways = {"change": gateway_url, **({"baseline": baseline[1]} if baseline else {})}
    keys = {"plain": plain_secret, "again": plain_secret, "budgeted": budgeted_secret}
    arms = [(gateway, arm) for gateway in gateways for arm in keys]
    try:
        for url in gateways.values():
            for secret in (plain_secret, budgeted_secret):  # warm-up: caches, pools
                await drive(url, {"authorization": f"Bearer {secret}"}, stream=False, concurrency=8, requests=300)
        rows = []
        for concurrency, requests in ((1, 200 if quick else 500), (16, 500 if quick else 1500)):
            p50: dict[str, dict[str, list[float]]] = {gateway: {arm: [] for arm in keys} for gateway in gateways}
            p99: dict[str, dict[str, list[float]]] = {gateway: {arm: [] for arm in keys} for gateway in gateways}
            errors = dict.fromkeys(gateways, 0)
            for number in range(rounds):
                shift = number % len(arms)
                for gateway, arm in arms[shift:] + arms[:shift]:
                    result = await drive(gateways[gateway], {"authorization": f"Bearer {keys[arm]}"}, stream=False,
                                         concurrency=concurrency, requests=requests)
                    p50[gateway][arm].append(Result.ms(result.latencies, 0.5))
                    p99[gateway][arm].append(Result.ms(result.latencies, 0.99))
                    errors[gateway] += result.errors
            for gateway in gateways:
                rows.append(_summary(gateway, concurrency, rounds, requests, p50[gateway], p99[gateway],
                                     errors[gateway]))
                print(rows[-1], flush=True)
        return rows
    finally:
        if baseline:
            baseline[0].send_signal(signal.SIGINT)
            baseline[0].wait(10)
