"""Management API of the gateway (admins: the OPERATE capability): API keys and the
request log. The OpenAI-compatible endpoint itself is gateway.asgi (raw ASGI). The usage
totals (/api/gateway/totals/...) are read from metrics' rollups: metrics/api.py."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Path, Query, Router, Status

from core.api import can_operate
from core.validators import INT64_MAX
from gateway.models import ApiKey, RequestLog
from gateway.schemas import ApiKeyCreatedOut, ApiKeyIn, ApiKeyOut, ApiKeyShareIn, RequestLogOut, RequestLogQuery
from gateway.selectors import LogFilters, api_key_list, request_log_list
from gateway.services import api_key_create, api_key_revoke, api_key_set_share

router = Router(tags=["routing"])


def key_out(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.pk, "name": key.name, "prefix": key.prefix,
        "allowed_lanes": sorted(lane.name for lane in key.allowed_lanes.all()), "default_route": key.default_route,
        "rpm_limit": key.rpm_limit, "tpm_limit": key.tpm_limit, "max_parallel": key.max_parallel,
        "log_prompts": key.log_prompts, "fair_weight": key.fair_weight, "priority": key.priority,
        "expires_at": key.expires_at, "revoked_at": key.revoked_at,
        "created_at": key.created_at, "active": key.is_active,
    }


def log_out(row: RequestLog) -> dict[str, Any]:
    return {**{f: getattr(row, f) for f in RequestLogOut.model_fields if f != "key"},
            "key": row.key.name if row.key else None}


@router.get("/gateway/keys", response=list[ApiKeyOut], auth=can_operate)
def keys_list(request: HttpRequest) -> list[dict[str, Any]]:
    return [key_out(key) for key in api_key_list()]


@router.post("/gateway/keys", response={201: ApiKeyCreatedOut}, auth=can_operate)
def keys_create(request: HttpRequest, payload: ApiKeyIn) -> Status[dict[str, Any]]:
    created = api_key_create(actor=request.auth, **payload.dict())  # type: ignore[attr-defined]
    return Status(201, {**key_out(created.key), "secret": created.secret})


@router.post("/gateway/keys/{key_id}/revoke", response=ApiKeyOut, auth=can_operate)
def keys_revoke(request: HttpRequest, key_id: int = Path(..., ge=1, le=INT64_MAX)) -> dict[str, Any]:
    key = api_key_revoke(actor=request.auth, key=get_object_or_404(ApiKey, pk=key_id))  # type: ignore[attr-defined]
    return key_out(key)


@router.post("/gateway/keys/{key_id}/share", response=ApiKeyOut, auth=can_operate)
def keys_share(request: HttpRequest, payload: ApiKeyShareIn,
               key_id: int = Path(..., ge=1, le=INT64_MAX)) -> dict[str, Any]:
    key = api_key_set_share(actor=request.auth, key=get_object_or_404(ApiKey, pk=key_id),  # type: ignore[attr-defined]
                            **payload.dict())
    return key_out(key)


@router.get("/gateway/requests", response=list[RequestLogOut], auth=can_operate)
def requests_list(request: HttpRequest, query: Query[RequestLogQuery]) -> list[dict[str, Any]]:
    filters = LogFilters(key_id=query.key, lane=query.lane, status=query.status, route=query.route or "",
                         since=query.since, until=query.until)
    return [log_out(row) for row in request_log_list(filters=filters, limit=query.limit, before_id=query.before)]
