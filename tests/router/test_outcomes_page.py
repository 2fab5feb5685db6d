"""The outcomes page: the agents' scores joined to the request log, per lane × label and per key."""

from __future__ import annotations

from gateway.models import ApiKey, RequestLog, RequestOutcome
from gateway.services import request_outcome_record


def log(key: ApiKey, request_id: str, lane: str, label: str, latency: float, tokens: int, conversation: str = "") -> None:
    RequestLog.objects.create(request_id=request_id, key=key, endpoint="chat.completions", lane=lane, route_label=label,
                              status=200, latency_ms=latency, completion_tokens=tokens, conversation=conversation)


def test_outcomes_are_shown_per_lane_and_label_and_per_key(db, admin_user, viewer_client):
    from gateway.services import api_key_create

    review = api_key_create(actor=admin_user, name="review-agent").key
    refactor = api_key_create(actor=admin_user, name="refactor-agent").key
    log(review, "req-1", "qwen", "code_review", 100, 10)
    log(review, "req-2", "qwen", "code_review", 300, 30)
    log(refactor, "req-3", "deepseek", "code_refactor", 2000, 900, conversation="c" * 32)
    log(refactor, "req-4", "deepseek", "code_refactor", 4000, 1100, conversation="c" * 32)
    log(refactor, "req-5", "qwen", "short_factual", 50, 5)  # not rated: not shown
    request_outcome_record(key_id=review.pk, request_id="req-1", score=1.0, task="review")
    request_outcome_record(key_id=review.pk, request_id="req-2", score=0.0, task="review")
    assert request_outcome_record(key_id=refactor.pk, request_id="req-4", score=0.5, conversation=True) == 2
    assert RequestOutcome.objects.count() == 4
    response = viewer_client.get("/routing/outcomes/")
    assert response.status_code == 200
    summary = response.context["summary"]
    lanes = {row.group: (row.count, row.success, row.latency_p50_ms, row.completion_tokens_mean) for row in summary["lanes"]}
    assert lanes == {("qwen", "code_review"): (2, 0.5, 100, 20), ("deepseek", "code_refactor"): (2, 0.5, 2000, 1000)}
    keys = {row.group[0]: (row.count, row.success) for row in summary["keys"]}
    assert keys == {"review-agent": (2, 0.5), "refactor-agent": (2, 0.5)}
    content = response.content.decode()
    assert 'id="outcomes-lanes"' in content and "review-agent" in content and "code_refactor" in content


def test_outcomes_are_purged_with_the_request_log_retention(db, admin_user, settings):
    from datetime import timedelta

    from django.utils import timezone

    from gateway.services import api_key_create, request_outcome_purge

    key = api_key_create(actor=admin_user, name="agent").key
    now = timezone.now()
    old = RequestOutcome.objects.create(key=key, request_id="req-old", score=1,
                                        created_at=now - timedelta(days=settings.GATEWAY_LOG_RETENTION_DAYS, hours=1))
    kept = RequestOutcome.objects.create(key=key, request_id="req-new", score=1, created_at=now - timedelta(days=1))
    assert request_outcome_purge(now=now) == 1
    assert list(RequestOutcome.objects.values_list("pk", flat=True)) == [kept.pk] and old.pk != kept.pk
