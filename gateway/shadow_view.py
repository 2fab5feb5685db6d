"""What the shadow page and the API (/api/router/shadow) show of the draft in shadow: its
sampled decisions as every gateway process counted them (Redis: routing.shadow), their
agreement with the published version and its Wilson interval, whether and why sampling
stopped, the (published lane, draft lane) pairs of the request log, and its judged
comparison's results and cost. One function, read by both."""

from __future__ import annotations

from dataclasses import dataclass

from core.stats import wilson_interval
from gateway.models import RequestLog
from gateway.selectors import JudgedSummary, ShadowRow, judged_summary, shadow_comparison
from routing.models import RouterVersion
from routing.selectors import shadow_version
from routing.shadow import judge_tokens_today, shadow_agreed, shadow_count, shadow_stop_reason


@dataclass(frozen=True)
class ShadowStatus:
    version: RouterVersion | None  # the draft in shadow (None: no shadow run)
    sampled: int  # decisions sampled, every gateway process (stops at version.shadow_limit)
    agreed: int  # of those, the ones naming the published version's lane
    agreement_interval: tuple[float, float] | None  # Wilson, at the version's stop confidence
    stop_reason: str  # why it stopped on its confidence bound ("" : it did not)
    stopped: bool  # on the bound, or the sample limit reached: no more sampling until set again
    logged: int  # request-log rows carrying the draft's decision
    logged_agreement: float | None
    pairs: list[ShadowRow]
    examples: list[RequestLog]  # recent disagreements
    judged: JudgedSummary | None
    judge_tokens_today: int  # every judged comparison's spend today (UTC), against version.judge_daily_tokens


def shadow_status(*, examples: int = 20) -> ShadowStatus:
    version = shadow_version()
    if version is None:
        return ShadowStatus(None, 0, 0, None, "", False, 0, None, [], [], None, judge_tokens_today())
    logged, pairs, recent = shadow_comparison(version.number, examples=examples)
    agree = sum(row.count for row in pairs if row.published_lane == row.shadow_lane)
    sampled, agreed, reason = shadow_count(version.number), shadow_agreed(version.number), shadow_stop_reason(version.number)
    return ShadowStatus(
        version, sampled, agreed, wilson_interval(agreed, sampled, version.stop_confidence), reason,
        bool(reason) or sampled >= version.shadow_limit, logged, agree / logged if logged else None, pairs, recent,
        judged_summary(version.number, confidence=version.stop_confidence), judge_tokens_today())
