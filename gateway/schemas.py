"""Schemas of the gateway's management API (/api/gateway/...)."""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Schema

from core.api import InSchema
from core.validators import INT32_MAX, INT64_MAX
from gateway.models import BudgetPeriod, RouteReason


class ApiKeyIn(InSchema):
    name: str
    allowed_lanes: list[str] = []
    default_route: str = "auto"
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    max_parallel: int | None = None
    expires_at: datetime | None = None
    log_prompts: bool = Field(False, description="Store this key's prompts, secrets redacted: the request log, router replay, judged comparison.")
    team: int | None = Field(None, ge=1, le=INT64_MAX, description="The team's id; its lanes bound the key's.")
    fair_weight: int | None = Field(None, description="Share of a full lane against other keys (default 1).")
    priority: str | None = Field(None, description="`interactive` (default) or `batch`.")


class ApiKeyShareIn(InSchema):
    """A key's share of a full lane (gateway.fair); a field left out keeps its value."""

    fair_weight: int | None = None
    priority: str | None = None


class ApiKeyOut(Schema):
    id: int
    name: str
    team: int | None
    prefix: str
    allowed_lanes: list[str]
    default_route: str
    rpm_limit: int | None
    tpm_limit: int | None
    max_parallel: int | None
    log_prompts: bool
    fair_weight: int
    priority: str
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    active: bool


class ApiKeyCreatedOut(ApiKeyOut):
    secret: str  # shown once: only its hash is stored


class TeamIn(InSchema):
    name: str = Field(..., max_length=100)
    allowed_lanes: list[str] = Field([], description="Lanes its keys may use; empty = every lane.")
    members: list[str] = Field([], description="Usernames.")
    fair_weight: int | None = Field(None, description="Share of a full lane against other teams (default 1); its "
                                                      "keys share it by their own weights.")


class TeamPatchIn(InSchema):
    """Only the fields sent change."""

    name: str | None = Field(None, max_length=100)
    allowed_lanes: list[str] | None = None
    members: list[str] | None = None
    fair_weight: int | None = None


class TokenBudgetIn(InSchema):
    """A team's or a key's budget for the period: created, or changed when it exists."""

    team: int | None = Field(None, ge=1, le=INT64_MAX, description="A team's id (or give `key`).")
    key: int | None = Field(None, ge=1, le=INT64_MAX, description="An API key's id (or give `team`).")
    period: BudgetPeriod = BudgetPeriod.DAY
    prompt_tokens: int | None = Field(None, description="Per period; empty = no limit.")
    completion_tokens: int | None = None
    total_tokens: int | None = None


class TokenBudgetOut(Schema):
    id: int
    team: int | None
    key: int | None
    period: str
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    window: str  # the current day or month, in the budgets' time zone
    resets_at: datetime
    used_prompt_tokens: int
    used_completion_tokens: int
    used_total_tokens: int
    used_share: float  # the largest share used of any limit (1.0 = used up)


class TeamOut(Schema):
    id: int
    name: str
    allowed_lanes: list[str]
    members: list[str]
    fair_weight: int
    keys: list[ApiKeyOut]
    budgets: list[TokenBudgetOut]  # the team's and its keys'
    created_at: datetime


class RequestLogQuery(Schema):
    """The request log's filters (gateway.selectors.LogFilters) and its keyset paging."""

    key: int | None = Field(None, ge=1, le=INT64_MAX, description="An API key's id.")
    team: int | None = Field(None, ge=1, le=INT64_MAX, description="A team's id: its keys' requests.")
    lane: str = Field("", max_length=63)
    status: str = Field("", max_length=16, description="`ok` (below 400), `error` (400 and above) or an HTTP "
                                                       "status from 100 to 599.")
    route: RouteReason | None = Field(None, description="How the gateway chose the lane.")
    since: datetime | None = Field(None, description="Created at or after (ISO 8601; UTC when it has no offset).")
    until: datetime | None = Field(None, description="Created before; must be after `since`.")
    request_id: str = Field("", max_length=40, description="Exactly this request id (the answer's `x-request-id`).")
    text: str = Field("", max_length=200, description="Words that must all occur in the stored prompt "
                                                       "(case-insensitive); only keys that store prompts "
                                                       "(`log_prompts`) are searched.")
    before: int | None = Field(None, ge=1, le=INT64_MAX, description="Only rows with a smaller id: the next page.")
    limit: int = Field(100, ge=1, le=1000)


class RequestLogOut(Schema):
    id: int
    created_at: datetime
    request_id: str
    key: str | None
    endpoint: str
    requested_model: str
    lane: str
    replica: int | None  # the lane's replica that was sent the request (None: none was)
    route_reason: str
    route_score: float | None
    route_label: str
    stream: bool
    status: int
    error_code: str
    prompt_tokens: int | None
    completion_tokens: int | None
    usage_source: str  # "" the lane's usage; "tokenize" counted exactly by the gateway; "estimate"
    ttft_ms: float | None
    latency_ms: float
    upstream_ms: float | None


class ShadowIn(InSchema):
    """Put a draft in shadow with its stop rules and its judged comparison (a field left out
    keeps the draft's stored value; the rules are routing.services' and answer 422 naming
    the field). Setting a shadow samples afresh."""

    version: int = Field(..., ge=1, le=INT32_MAX, description="The draft's number.")
    shadow_limit: int | None = Field(None, description="Stop after this many sampled decisions (1-10,000,000).")
    stop_metric: str | None = Field(None, description="Stop on a confidence bound too: `agreement`, `win_rate` or "
                                                      "`` (none).")
    stop_threshold: float | None = Field(None, description="The bound's threshold, a share from 0 to 1.")
    stop_confidence: float | None = Field(None, description="The interval's confidence, 0.5-0.999.")
    judge_share: float | None = Field(None, description="Share of sampled disagreements judged (0: off).")
    judge_lane: str | None = Field(None, max_length=63, description="The lane that grades both answers blind.")
    judge_daily_tokens: int | None = Field(None, description="Tokens a UTC day for the draft's answers and the judge.")


class ShadowPairOut(Schema):
    published_lane: str
    shadow_lane: str
    count: int


class JudgedOut(Schema):
    """The judged comparison: its settings, its verdicts' counts and its cost."""

    share: float
    lane: str
    daily_tokens: int  # the budget
    tokens_today: int  # spent today (UTC), every gateway process
    wins: int
    ties: int
    losses: int
    unparsed: int
    errors: int
    skipped_budget: int
    win_rate: float | None  # wins / (wins + losses): ties left out
    win_rate_interval: list[float] | None
    answer_tokens: int  # the draft's answers, all of this run's comparisons
    judge_tokens: int


class ShadowOut(Schema):
    version: int | None  # the draft in shadow (None: none)
    shadow_limit: int | None
    stop_metric: str | None
    stop_threshold: float | None
    stop_confidence: float | None
    sampled: int  # decisions sampled by every gateway process
    agreed: int
    agreement: float | None
    agreement_interval: list[float] | None  # Wilson, at stop_confidence
    stopped: bool
    stop_reason: str  # the confidence bound's reason ("" : not stopped on it)
    logged_requests: int  # request-log rows carrying the draft's decision
    pairs: list[ShadowPairOut]
    judge: JudgedOut | None


class JudgedQuery(Schema):
    version: int | None = Field(None, ge=1, le=INT32_MAX, description="A draft's number (default: the one in shadow).")
    limit: int = Field(50, ge=1, le=500)
    before: int | None = Field(None, ge=1, le=INT64_MAX, description="Only comparisons with a smaller id: the next page.")


class JudgedComparisonOut(Schema):
    id: int
    created_at: datetime
    request_id: str
    router_version: int
    published_lane: str
    draft_lane: str
    judge_lane: str
    draft_first: bool  # the draft's answer was shown to the judge as "A"
    verdict: str  # draft | published | tie | unparsed | error | budget
    reason: str  # the judge's words (redacted like a prompt) or the error
    answer_tokens: int
    judge_tokens: int
