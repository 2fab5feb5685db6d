"""A shadow run's shared counters and its stop rules.

Every gateway process counts its shadow decisions in Redis (how many, how many agreed with
the published version), so the run stops for all of them at once: after the version's
sample limit, or — when the version says so — as soon as the Wilson interval of its
agreement (or of its judged win rate, gateway.judge) lies wholly on one side of its
threshold. The reason is kept in Redis for the shadow page; setting the shadow again
starts afresh."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from core.redis_client import sync_redis
from core.stats import wilson_interval
from routing.models import StopMetric


def shadow_count_key(number: int) -> str:
    """Shadow decisions taken for a draft, counted by every gateway process (INCR)."""
    return f"{settings.REDIS_PREFIX}:router:shadow-count:{number}"


def shadow_agree_key(number: int) -> str:
    """Of those, the decisions that named the published version's lane."""
    return f"{settings.REDIS_PREFIX}:router:shadow-agree:{number}"


def shadow_stop_key(number: int) -> str:
    """Why sampling stopped on a confidence bound (absent: it did not)."""
    return f"{settings.REDIS_PREFIX}:router:shadow-stop:{number}"


@dataclass(frozen=True)
class StopRule:
    """A shadow run's stop rules, as the version sets them."""

    sample_limit: int = 0  # stop after this many decisions (0: no limit)
    metric: str = StopMetric.NONE  # "", "agreement" or "win_rate"
    threshold: float = 0.9
    confidence: float = 0.95


def bound_stop_reason(rule: StopRule, metric: str, successes: int, trials: int) -> str | None:
    """Why the run should stop on its confidence bound, or None: the Wilson interval of
    successes / trials at the rule's confidence excludes the rule's threshold."""
    if rule.metric != metric or not rule.metric:
        return None
    interval = wilson_interval(successes, trials, rule.confidence)
    if interval is None:
        return None
    low, high = interval
    name = StopMetric(metric).label
    bounds = f"{successes}/{trials} = {successes / trials:.3f}, {rule.confidence:.0%} interval [{low:.3f}, {high:.3f}]"
    if low > rule.threshold:
        return f"{name} is above {rule.threshold:g} ({bounds})"
    if high < rule.threshold:
        return f"{name} is below {rule.threshold:g} ({bounds})"
    return None


def shadow_count(number: int) -> int:
    raw = sync_redis().get(shadow_count_key(number))
    return int(raw) if raw else 0


def shadow_agreed(number: int) -> int:
    raw = sync_redis().get(shadow_agree_key(number))
    return int(raw) if raw else 0


def shadow_stop_reason(number: int) -> str:
    raw = sync_redis().get(shadow_stop_key(number))
    return raw.decode() if isinstance(raw, bytes) else str(raw or "")


def shadow_stop(number: int, reason: str) -> None:
    """Stop the run on its bound (the first reason stays)."""
    sync_redis().set(shadow_stop_key(number), reason, nx=True)


def shadow_count_reset(number: int) -> None:
    sync_redis().delete(shadow_count_key(number), shadow_agree_key(number), shadow_stop_key(number))


def judge_budget_key(day: str | None = None) -> str:
    """The tokens judged comparisons spent on one UTC day, every gateway process (gateway.judge)."""
    return f"{settings.REDIS_PREFIX}:router:judge-tokens:{day or datetime.now(UTC).date().isoformat()}"


def judge_tokens_today() -> int:
    raw = sync_redis().get(judge_budget_key())
    return int(raw) if raw else 0
