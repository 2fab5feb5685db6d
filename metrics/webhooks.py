"""Alert webhook deliveries (services): beat sends what is due in its own task, so a slow
or failing receiver never blocks a scrape; a failure is retried after backoff·2^(n−1)
until the last attempt. One alert's changes arrive in order (a "resolved" is never posted
while its "opened" is still being retried), and a delivery being posted is leased, so a
second run started while a slow receiver holds the first never posts it again."""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
from django.conf import settings
from django.db.models import F, Min
from django.utils import timezone

from core.http import http_client
from metrics.models import WebhookDelivery, WebhookState


def webhook_backoff(attempts: int) -> timedelta:
    return timedelta(seconds=settings.METRICS_WEBHOOK_BACKOFF_S * 2 ** max(0, attempts - 1))


def webhooks_deliver_due(*, now: datetime | None = None, limit: int = 100) -> dict[str, int]:
    now = now or timezone.now()
    url = settings.METRICS_ALERT_WEBHOOK_URL
    counts = {"delivered": 0, "retrying": 0, "failed": 0}
    due = list(
        WebhookDelivery.objects.filter(state=WebhookState.PENDING, next_attempt_at__lte=now).order_by("id")[:limit]
    )
    if not due or not url:
        return counts
    # Per alert, only its oldest pending change may go: the rest wait their turn.
    first_pending = dict(
        WebhookDelivery.objects.filter(state=WebhookState.PENDING, alert_id__in={d.alert_id for d in due})
        .values("alert_id").annotate(first=Min("id")).values_list("alert_id", "first")
    )
    # Longer than one post can take: a claimed delivery is not due for anyone else meanwhile.
    lease = timedelta(seconds=settings.METRICS_WEBHOOK_TIMEOUT_S * 2 + 1)
    with http_client(timeout=settings.METRICS_WEBHOOK_TIMEOUT_S) as client:
        for delivery in due:
            if first_pending.get(delivery.alert_id) != delivery.pk:
                continue
            # Claim it: two beat-triggered runs never post the same delivery twice.
            claimed = WebhookDelivery.objects.filter(
                pk=delivery.pk, state=WebhookState.PENDING, attempts=delivery.attempts, next_attempt_at__lte=now
            ).update(attempts=F("attempts") + 1, next_attempt_at=now + lease)
            if not claimed:
                continue
            delivery.attempts += 1
            try:
                response = client.post(url, json=delivery.payload)
                error = "" if response.is_success else f"HTTP {response.status_code}"
            except httpx.HTTPError as exc:
                error = str(exc)[:300] or type(exc).__name__
            if not error:
                delivery.state, delivery.last_error = WebhookState.DELIVERED, ""
                counts["delivered"] += 1
            elif delivery.attempts >= settings.METRICS_WEBHOOK_MAX_ATTEMPTS:
                delivery.state, delivery.last_error = WebhookState.FAILED, error
                counts["failed"] += 1
            else:
                delivery.last_error = error
                delivery.next_attempt_at = now + webhook_backoff(delivery.attempts)
                counts["retrying"] += 1
            delivery.save(update_fields=["state", "last_error", "next_attempt_at"])
    return counts
