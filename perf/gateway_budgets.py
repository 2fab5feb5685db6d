"""What token budgets add to the gateway: the same requests with a key under no budget and
with a key under its own and its team's budgets (limits never reached, so every request is
checked and charged: one more Redis script before the upstream call, one after), in
alternating rounds against the same gateway and upstream. Run by
`perf/gateway_overhead.py --budgets`; the figures are in docs/performance.md."""

from __future__ import annotations

import statistics
from typing import Any

from perf.gateway_drive import Result, drive


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


async def budgets_on_off(gateway_url: str, plain_secret: str, budgeted_secret: str, *, quick: bool) -> list[dict[str, Any]]:
    """p50/p99 per round of each key, rounds alternating (a shared machine's drift hits both);
    the added figure is the median over rounds of (budgeted - plain)."""
    rounds = 6 if quick else 12
    headers = {key: {"authorization": f"Bearer {secret}"} for key, secret in
               (("plain", plain_secret), ("budgeted", budgeted_secret))}
    for auth in headers.values():
        await drive(gateway_url, auth, stream=False, concurrency=8, requests=300)  # warm-up
    rows = []
    for concurrency, requests in ((1, 200 if quick else 500), (16, 500 if quick else 1500)):
        added_p50: list[float] = []
        added_p99: list[float] = []
        p50s: dict[str, list[float]] = {"plain": [], "budgeted": []}
        errors = 0
        for number in range(rounds):
            results: dict[str, Result] = {}
            order = list(headers.items()) if number % 2 == 0 else list(headers.items())[::-1]  # neither always first
            for name, auth in order:
                results[name] = await drive(gateway_url, auth, stream=False, concurrency=concurrency,
                                            requests=requests)
                p50s[name].append(Result.ms(results[name].latencies, 0.5))
                errors += results[name].errors
            added_p50.append(Result.ms(results["budgeted"].latencies, 0.5) - Result.ms(results["plain"].latencies, 0.5))
            added_p99.append(Result.ms(results["budgeted"].latencies, 0.99) - Result.ms(results["plain"].latencies, 0.99))
        rows.append({
            "case": f"plain c={concurrency}", "rounds": rounds, "requests_per_round": requests,
            "plain_p50_ms": round(statistics.median(p50s["plain"]), 3),
            "budgeted_p50_ms": round(statistics.median(p50s["budgeted"]), 3),
            "added_p50_ms": round(statistics.median(added_p50), 3),
            "added_p99_ms": round(statistics.median(added_p99), 3), "errors": errors,
        })
    return rows
