"""Alert lifecycle (services): pending → open → resolved, acknowledged by an admin; each
change is saved, broadcast to the dashboards and queued for the webhook."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.broadcast import DASHBOARD_GROUP, HEADER_GROUP, broadcast
from core.roles import Capability, UserLike, user_can
from metrics.models import Alert, AlertState, WebhookDelivery
from metrics.rules import RULE_LABELS, BudgetView, TargetView, Thresholds, budget_rules, firing_rules, held_rules


def thresholds_from_settings() -> Thresholds:
    return Thresholds(
        kv_pct=settings.METRICS_ALERT_KV_PCT,
        kv_for_s=settings.METRICS_ALERT_KV_FOR_S,
        ttft_p95_ms=settings.METRICS_ALERT_TTFT_P95_MS,
        node_mem_gib=settings.METRICS_ALERT_NODE_MEM_GIB,
        swap_gib=settings.METRICS_ALERT_SWAP_GIB,
        scrape_failures=settings.METRICS_ALERT_SCRAPE_FAILURES,
    )


def alert_payload(alert: Alert) -> dict[str, Any]:
    return {
        "id": alert.id, "rule": alert.rule, "rule_label": RULE_LABELS.get(alert.rule, alert.rule),
        "kind": alert.kind, "target": alert.target, "state": alert.state, "message": alert.message,
        "value": alert.value, "opened_at": alert.opened_at.isoformat() if alert.opened_at else None,
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
        "acknowledged_by": alert.acknowledged_by.get_username() if alert.acknowledged_by else None,
    }


def _announce(alert: Alert, event: str, now: datetime, *, header: bool = True) -> None:
    """Saved first; the broadcast and the webhook row follow the commit. `header=False`: the
    caller sends the header's count once for all the alerts it changed."""
    payload = alert_payload(alert)
    if settings.METRICS_ALERT_WEBHOOK_URL:
        WebhookDelivery.objects.create(
            alert=alert, event=event, payload={"event": event, "alert": payload}, next_attempt_at=now
        )
    transaction.on_commit(lambda: broadcast(DASHBOARD_GROUP, "alert.changed", {"event": event, **payload}))
    if header:
        transaction.on_commit(_broadcast_header_count)


def _broadcast_header_count() -> None:
    broadcast(HEADER_GROUP, *alerts_header_snapshot())


ALERTS_COUNT_EVENT = "alerts.count"


def alerts_header_snapshot() -> tuple[str, dict[str, int]]:
    """The header's badge on every page: how many alerts are open (read after the commit)."""
    return ALERTS_COUNT_EVENT, {"open": Alert.objects.filter(state=AlertState.OPEN).count()}


def alerts_evaluate(*, targets: list[TargetView], budgets: list[BudgetView] | None = None,
                    now: datetime | None = None) -> dict[str, int]:
    """Open what fires (after its duration), refresh what still fires, keep what cannot be
    judged this scrape (rules.held_rules), resolve the rest. `budgets`: the token budgets' use
    (None: every budget alert resolves)."""
    now = now or timezone.now()
    fired = firing_rules(targets, thresholds_from_settings()) + budget_rules(budgets or [])
    firing = {(f.rule, f.kind, f.target): f for f in fired}
    held = held_rules(targets)
    counts = {"opened": 0, "resolved": 0}
    with transaction.atomic():
        live = {(a.rule, a.kind, a.target): a for a in Alert.objects.select_for_update().exclude(state=AlertState.RESOLVED)}
        for key, fire in firing.items():
            alert = live.get(key)
            if alert is None:
                alert = Alert(rule=fire.rule, kind=fire.kind, target=fire.target, since=now)
            alert.message, alert.value = fire.message, fire.value
            opens = alert.state == AlertState.PENDING and (now - alert.since).total_seconds() >= fire.for_s
            if opens:
                alert.state, alert.opened_at = AlertState.OPEN, now
            alert.save()
            if opens:
                counts["opened"] += 1
                _announce(alert, "opened", now, header=False)
        # What no longer fires resolves, including targets that left the scrape (a lane
        # stopped on purpose, a node put in maintenance): callers pass every lane and node.
        for key, alert in live.items():
            if key in firing or key in held:
                continue
            if alert.state == AlertState.PENDING:
                alert.delete()
                continue
            alert.state, alert.resolved_at = AlertState.RESOLVED, now
            alert.save(update_fields=["state", "resolved_at"])
            counts["resolved"] += 1
            _announce(alert, "resolved", now, header=False)
        if counts["opened"] or counts["resolved"]:
            # One count query and one header message per tick, however many alerts changed
            # (a switch going down opens one per lane and node behind it).
            transaction.on_commit(_broadcast_header_count)
    return counts


def alert_acknowledge(*, alert: Alert, actor: UserLike) -> Alert:
    if not user_can(actor, Capability.OPERATE):
        raise PermissionDenied("Only an admin may acknowledge alerts.")
    with transaction.atomic():
        if alert.acknowledged_at is None:
            alert.acknowledged_at = timezone.now()
            alert.acknowledged_by = actor  # type: ignore[assignment]
            alert.save(update_fields=["acknowledged_at", "acknowledged_by"])
            audit_record(actor=actor, action="alert.acknowledge", obj=alert, before={"acknowledged": False},
                         after={"acknowledged": True, "rule": alert.rule, "target": alert.target})
            _announce(alert, "acknowledged", alert.acknowledged_at)
    return alert
