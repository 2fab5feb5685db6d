"""Schemas of the gateway's management API (/api/gateway/...)."""

from __future__ import annotations

from datetime import datetime

from ninja import Schema

from core.api import InSchema


class ApiKeyIn(InSchema):
    name: str
    allowed_lanes: list[str] = []
    default_route: str = "auto"
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    max_parallel: int | None = None
    expires_at: datetime | None = None
    log_prompts: bool = False


class ApiKeyOut(Schema):
    id: int
    name: str
    prefix: str
    allowed_lanes: list[str]
    default_route: str
    rpm_limit: int | None
    tpm_limit: int | None
    max_parallel: int | None
    log_prompts: bool
    expires_at: datetime | None
    revoked_at: datetime | None
    created_at: datetime
    active: bool


class ApiKeyCreatedOut(ApiKeyOut):
    secret: str  # shown once: only its hash is stored


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


class TotalsOut(Schema):
    name: str
    requests: int
    errors: int
    prompt_tokens: int | None
    completion_tokens: int | None
    avg_latency_ms: float | None
    avg_ttft_ms: float | None
