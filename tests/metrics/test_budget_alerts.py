"""Token budgets alert at 80 % and at 100 % of a limit through the alert machinery (and so
its webhook), once per budget and period; a reset resolves them."""

from __future__ import annotations

import redis
from django.conf import settings
from django.contrib.auth.models import User
from django.test import override_settings

from gateway.budgets import budget_identity, budget_now, budget_window, budget_zone, count_name
from gateway.models import Budget
from gateway.team_services import budget_reset, budget_set, team_create
from metrics.alerts import alerts_evaluate
from metrics.models import Alert, AlertState, WebhookDelivery
from metrics.services import budget_views


def use_tokens(budget: Budget, prompt: int, completion: int) -> None:
    """What the gateway's charge script leaves in Redis after answers of these sizes."""
    window, _ = budget_window(budget.period, budget_now(), budget_zone())
    name = count_name(settings.REDIS_PREFIX, budget_identity(budget.pk, budget.created_at), window)
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.hincrby(name, "p", prompt)
    client.hincrby(name, "c", completion)


def live_alerts() -> list[tuple[str, str, str]]:
    return sorted(Alert.objects.exclude(state=AlertState.RESOLVED).values_list("rule", "kind", "target"))


def test_a_budget_alerts_at_80_and_100_percent_with_the_webhook_and_a_reset_resolves(admin_user: User) -> None:
    team = team_create(actor=admin_user, name="agents")
    budget = budget_set(actor=admin_user, team=team, period="day", prompt_tokens=1000, total_tokens=10_000)
    with override_settings(METRICS_ALERT_WEBHOOK_URL="http://127.0.0.1:9/hook"):
        use_tokens(budget, 700, 10)
        alerts_evaluate(targets=[], budgets=budget_views())
        assert live_alerts() == []
        use_tokens(budget, 100, 0)  # 800 of 1000 prompt tokens
        alerts_evaluate(targets=[], budgets=budget_views())
        assert live_alerts() == [("budget_high", "team", "agents per day")]
        alert = Alert.objects.get(rule="budget_high")
        assert alert.state == AlertState.OPEN and "800 of 1000 prompt tokens" in alert.message
        use_tokens(budget, 250, 0)
        alerts_evaluate(targets=[], budgets=budget_views())
        alerts_evaluate(targets=[], budgets=budget_views())  # still used up: nothing opens twice
        assert live_alerts() == [("budget_high", "team", "agents per day"),
                                 ("budget_used_up", "team", "agents per day")]
        events = sorted((d.alert.rule, d.event) for d in WebhookDelivery.objects.select_related("alert"))
        assert events == [("budget_high", "opened"), ("budget_used_up", "opened")]
        budget_reset(actor=admin_user, budget=budget)
        alerts_evaluate(targets=[], budgets=budget_views())
        assert live_alerts() == []
        assert WebhookDelivery.objects.filter(event="resolved").count() == 2
