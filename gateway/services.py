"""Gateway services: API keys (create, share, revoke), request log retention, outcomes and
captured prompts. Teams and token budgets: gateway/team_services.py."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.redis_client import sync_redis
from core.roles import UserLike
from core.validators import has_control_characters
from gateway.capture import CAPTURE_PER_KEY, captured_text
from gateway.keys import hash_secret, key_names, key_namespace
from gateway.models import ApiKey, CapturedPrompt, JudgedComparison, RequestLog, RequestOutcome, Team
from lanes.models import Lane
from lanes.replica_health import invalidation_channel

SECRET_PREFIX = "sk-spark-"
VISIBLE_PREFIX_LEN = len(SECRET_PREFIX) + 6





def gateway_invalidate(message: str) -> None:
    """Tell every gateway process to drop cached keys/lanes ("lanes", "key:<id>", "all")."""
    sync_redis().publish(invalidation_channel(), message)


def lanes_named(names: list[str] | None) -> tuple[list[Lane], list[str]]:
    """The lanes of these names, and the names that are no lane (sorted)."""
    wanted = sorted(set(names or []))
    lanes = list(Lane.objects.filter(name__in=[name for name in wanted if not has_control_characters(name)]))
    return lanes, sorted(set(wanted) - {lane.name for lane in lanes})


def _key_snapshot(key: ApiKey) -> dict[str, object]:
    return {
        "name": key.name, "team": key.team.name if key.team else None, "prefix": key.prefix, "allowed_lanes": sorted(key.allowed_lanes.values_list("name", flat=True)),
        "default_route": key.default_route, "rpm_limit": key.rpm_limit, "tpm_limit": key.tpm_limit,
        "max_parallel": key.max_parallel, "log_prompts": key.log_prompts,
        "fair_weight": key.fair_weight, "priority": key.priority,
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


def _team_lane_errors(team: Team, wanted: list[str], default_route: str) -> dict[str, list[str]]:
    """A key inherits its team's lanes and may narrow them, never widen them."""
    team_lanes = set(team.allowed_lanes.values_list("name", flat=True))
    if not team_lanes:
        return {}
    errors: dict[str, list[str]] = {}
    if not set(wanted) <= team_lanes:
        errors["allowed_lanes"] = [f"Must be within the team's lanes ({', '.join(sorted(team_lanes))}); "
                                   f"not: {', '.join(sorted(set(wanted) - team_lanes))}."]
    if default_route and default_route != "auto" and default_route not in team_lanes:
        errors["default_route"] = [f"The default lane `{default_route}` must be one of the team's lanes."]
    return errors


@dataclass(frozen=True)
class CreatedKey:
    key: ApiKey
    secret: str  # shown once, never stored


def _default_lane(default_route: str, wanted: list[str], errors: dict[str, list[str]]) -> Lane | None:
    """The lane a key's requests without a model go to (None for `auto`); a bad one goes in errors."""
    if not default_route or default_route == "auto":
        return None
    lane = None if has_control_characters(default_route) else Lane.objects.filter(name=default_route).first()
    if lane is None:
        errors["default_route"] = [f"`{default_route}` is neither `auto` nor a lane."]
    elif wanted and default_route not in wanted:
        errors["default_route"] = [f"The default lane `{default_route}` must be one of the allowed lanes."]
    return lane


def api_key_create(
    *,
    actor: UserLike,
    name: str,
    allowed_lanes: list[str] | None = None,
    default_route: str = "auto",
    rpm_limit: int | None = None,
    tpm_limit: int | None = None,
    max_parallel: int | None = None,
    expires_at: datetime | None = None,
    log_prompts: bool = False,
    team: Team | int | None = None,
    fair_weight: int | None = None,
    priority: str | None = None,
) -> CreatedKey:
    errors: dict[str, list[str]] = {}
    name = (name or "").strip()
    if not name:
        errors["name"] = ["Give the key a name (e.g. the agent that uses it)."]
    lanes, missing = lanes_named(allowed_lanes)
    wanted = sorted({lane.name for lane in lanes} | set(missing))
    if missing:
        errors["allowed_lanes"] = [f"Unknown lane(s): {', '.join(missing)}."]
    if isinstance(team, int):
        team_id, team = team, Team.objects.filter(pk=team).first()
        if team is None:
            errors["team"] = [f"No team has the id {team_id}."]
    if team is not None and not missing:
        errors.update(_team_lane_errors(team, wanted, default_route))
    default_lane = _default_lane(default_route, wanted, errors)
    if expires_at is not None and timezone.is_naive(expires_at):
        expires_at = timezone.make_aware(expires_at)  # a time without zone is the portal's time zone
    if expires_at is not None and expires_at <= timezone.now():
        errors["expires_at"] = ["Must be in the future."]
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)  # 256 bits: a plain SHA-256 is enough
    owner = actor if isinstance(actor, User) else None
    key = ApiKey(
        name=name, owner=owner, team=team,
        prefix=secret[:VISIBLE_PREFIX_LEN], secret_hash=hash_secret(secret), default_lane=default_lane,
        rpm_limit=rpm_limit, tpm_limit=tpm_limit, max_parallel=max_parallel, expires_at=expires_at,
        log_prompts=log_prompts, fair_weight=fair_weight or 1,
        priority=priority or "interactive",
    )
    try:  # each field's declared rules (core.validators): the same for the form, the API and the shell
        key.full_clean(exclude=[*errors, "default_lane"])
    except ValidationError as exc:
        for field_name, messages in exc.message_dict.items():
            errors.setdefault(field_name, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        key.save()
        key.allowed_lanes.set(lanes)
        audit_record(actor=actor, action="api_key.create", obj=key, after=_key_snapshot(key))
    return CreatedKey(key=key, secret=secret)


def api_key_set_share(*, actor: UserLike, key: ApiKey, fair_weight: int | None = None,
                      priority: str | None = None) -> ApiKey:
    """An admin sets a key's share of a full lane (gateway.fair): its weight, its class.
    Every gateway process drops its cached copy at once."""
    before = _key_snapshot(key)
    if fair_weight is not None:
        key.fair_weight = fair_weight
    if priority is not None:
        key.priority = priority
    try:
        key.full_clean(exclude=["owner", "default_lane"])
    except ValidationError as exc:
        raise ValidationError({name: messages for name, messages in exc.message_dict.items()
                               if name in ("fair_weight", "priority")} or exc.message_dict) from None
    with transaction.atomic():
        key.save(update_fields=["fair_weight", "priority"])
        audit_record(actor=actor, action="api_key.share", obj=key, before=before, after=_key_snapshot(key))
    gateway_invalidate(f"key:{key.pk}")
    return key


def api_key_revoke(*, actor: UserLike, key: ApiKey) -> ApiKey:
    """Effective at once in every process: a Redis marker the admission script checks on
    every request (kept longer than any cached copy of the key lives), then a message
    that drops the cached key everywhere."""
    if key.revoked_at is not None:
        return key
    before = _key_snapshot(key)
    key.revoked_at = timezone.now()
    marker_ttl = int(max(settings.GATEWAY_KEY_CACHE_TTL_S * 4, 3600))
    revoked_marker = key_names(settings.REDIS_PREFIX, key_namespace(key.secret_hash), "")[0]
    sync_redis().set(revoked_marker, "1", ex=marker_ttl)
    with transaction.atomic():
        key.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="api_key.revoke", obj=key, before=before, after=_key_snapshot(key))
    gateway_invalidate(f"key:{key.pk}")
    return key


@dataclass(frozen=True)
class PurgeResult:
    deleted: int
    batches: int
    finished: bool


def request_log_purge(
    *, older_than_days: int | None = None, batch_size: int | None = None, max_seconds: float | None = None,
    now: datetime | None = None,
) -> PurgeResult:
    """Delete request logs older than the retention, by primary-key ranges: each batch is
    its own short transaction, so no lock is held for long and memory stays flat (LiteLLM's
    cleanup got pods OOM-killed: #21908, #16582). Stops after `max_seconds`; the next beat
    run continues."""
    days = older_than_days or settings.GATEWAY_LOG_RETENTION_DAYS
    size = batch_size or settings.GATEWAY_PURGE_BATCH
    budget = max_seconds or settings.GATEWAY_PURGE_MAX_SECONDS
    cutoff = (now or timezone.now()) - timedelta(days=days)
    started = time.monotonic()
    # Rows are written in time order, so the old ones are the low ids: find the range once.
    bounds = RequestLog.objects.filter(created_at__lt=cutoff).order_by("id").values_list("id", flat=True)
    low = bounds.first()
    if low is None:
        return PurgeResult(deleted=0, batches=0, finished=True)
    high = RequestLog.objects.filter(created_at__lt=cutoff).order_by("-id").values_list("id", flat=True).first()
    assert high is not None
    deleted = batches = 0
    start = low
    while start <= high:
        if time.monotonic() - started > budget:
            return PurgeResult(deleted=deleted, batches=batches, finished=False)
        end = start + size
        with transaction.atomic():
            count, _ = RequestLog.objects.filter(id__gte=start, id__lt=end, created_at__lt=cutoff).delete()
        deleted += count
        batches += 1
        start = end
    return PurgeResult(deleted=deleted, batches=batches, finished=True)


def request_outcome_purge(*, now: datetime | None = None) -> int:
    """Outcomes, captured prompts and judged comparisons are kept as long as the request log
    (PORTAL_GATEWAY_LOG_RETENTION_DAYS)."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.GATEWAY_LOG_RETENTION_DAYS)
    return (RequestOutcome.objects.filter(created_at__lt=cutoff).delete()[0]
            + CapturedPrompt.objects.filter(created_at__lt=cutoff).delete()[0]
            + JudgedComparison.objects.filter(created_at__lt=cutoff).delete()[0])


def captured_prompt_store(*, key_id: int, request_id: str, text: str, lane: str = "", route_label: str = "",
                          router_version: int | None = None) -> CapturedPrompt | None:
    """Keeps one prompt of a key that opted in: cut and redacted before it is stored, and
    only the key's last CAPTURE_PER_KEY kept."""
    if not text.strip():
        return None
    row = CapturedPrompt.objects.create(key_id=key_id, request_id=request_id, text=captured_text(text), lane=lane,
                                        route_label=route_label, router_version=router_version)
    stale = CapturedPrompt.objects.filter(key_id=key_id).order_by("-id").values_list("id", flat=True)[CAPTURE_PER_KEY:]
    CapturedPrompt.objects.filter(id__in=list(stale)).delete()
    return row


class FeedbackRefused(Exception):
    """A feedback the gateway answers with an error (status, code, the field it is about)."""

    def __init__(self, status: int, message: str, *, code: str, param: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def request_outcome_record(*, key_id: int, request_id: str, score: float, comment: str = "", task: str = "",
                           conversation: bool = False) -> int:
    """Records how a request went (or, with `conversation`, every request so far of its
    conversation) for the key that sent it; a later feedback for the same request replaces
    the earlier one. Returns how many requests it attaches to."""
    row = RequestLog.objects.filter(request_id=request_id, key_id=key_id).only("conversation").first()
    if row is None:  # unknown, or another key's: the same answer, so ids leak nothing
        raise FeedbackRefused(
            404, f"request_id: no request of this key has the id {request_id!r} (its log row is written within "
            "a second of the answer; feedback on another key's request is refused).",
            code="request_not_found", param="request_id")
    if conversation and not row.conversation:
        raise FeedbackRefused(400, "scope: this request has no conversation (no messages): rate it with scope `request`.",
                              code="invalid_request", param="scope")
    ids = ([request_id] if not conversation else
           list(RequestLog.objects.filter(key_id=key_id, conversation=row.conversation)
                .values_list("request_id", flat=True).distinct()))
    RequestOutcome.objects.bulk_create(
        [RequestOutcome(key_id=key_id, request_id=rid, score=score, comment=comment, task=task,
                        conversation=conversation) for rid in ids],
        update_conflicts=True, unique_fields=["request_id"],
        update_fields=["score", "comment", "task", "conversation", "created_at"])
    return len(ids)
