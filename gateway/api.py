"""Management API of the gateway (admins: the OPERATE capability): teams, API keys and the
request log; a team's members may read their team (gateway.selectors.teams_visible_to). The OpenAI-compatible endpoint itself is gateway.asgi (raw ASGI). The usage
totals (/api/gateway/totals/...) are read from metrics' rollups: metrics/api.py."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Path, Query, Router, Status

from core.api import can_operate, can_view
from core.validators import INT64_MAX
from gateway.models import ApiKey, Budget, RequestLog, Team
from gateway.schemas import (
    ApiKeyCreatedOut,
    ApiKeyIn,
    ApiKeyOut,
    ApiKeyShareIn,
    RequestLogOut,
    RequestLogQuery,
    TeamIn,
    TeamOut,
    TeamPatchIn,
    TokenBudgetIn,
    TokenBudgetOut,
)
from gateway.selectors import LogFilters, api_key_list, request_log_list, team_budgets, team_for, teams_visible_to
from gateway.services import api_key_create, api_key_revoke, api_key_set_share
from gateway.team_services import BudgetUse, budget_reset, budget_set, budget_use, team_create, team_update

router = Router(tags=["routing"])


def key_out(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.pk, "name": key.name, "team": key.team_id, "prefix": key.prefix,
        "allowed_lanes": sorted(lane.name for lane in key.allowed_lanes.all()), "default_route": key.default_route,
        "rpm_limit": key.rpm_limit, "tpm_limit": key.tpm_limit, "max_parallel": key.max_parallel,
        "log_prompts": key.log_prompts, "fair_weight": key.fair_weight,
        "priority": key.priority, "expires_at": key.expires_at, "revoked_at": key.revoked_at,
        "created_at": key.created_at, "active": key.is_active,
    }


def team_out(team: Team) -> dict[str, Any]:
    return {"id": team.pk, "name": team.name, "allowed_lanes": sorted(lane.name for lane in team.allowed_lanes.all()),
            "members": sorted(user.username for user in team.members.all()), "fair_weight": team.fair_weight,
            "keys": [key_out(key) for key in team.keys.all()],
            "budgets": [budget_out(budget_use(budget)) for budget in team_budgets(team)], "created_at": team.created_at}


def budget_out(use: BudgetUse) -> dict[str, Any]:
    budget = use.budget
    return {"id": budget.pk, "team": budget.team_id, "key": budget.key_id, "period": budget.period,
            "prompt_tokens": budget.prompt_tokens, "completion_tokens": budget.completion_tokens,
            "total_tokens": budget.total_tokens, "window": use.window, "resets_at": use.resets_at,
            "used_prompt_tokens": use.prompt_tokens, "used_completion_tokens": use.completion_tokens,
            "used_total_tokens": use.total_tokens, "used_share": use.used_share}


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


@router.get("/gateway/teams", response=list[TeamOut], auth=can_view)
def teams_list(request: HttpRequest) -> list[dict[str, Any]]:
    """Admins: every team. Other roles: the teams they belong to."""
    return [team_out(team) for team in teams_visible_to(request.auth)]  # type: ignore[attr-defined]


@router.post("/gateway/teams", response={201: TeamOut}, auth=can_operate)
def teams_create(request: HttpRequest, payload: TeamIn) -> Status[dict[str, Any]]:
    team = team_create(actor=request.auth, **payload.dict())  # type: ignore[attr-defined]
    return Status(201, team_out(team_for(request.auth, team.pk)))  # type: ignore[attr-defined]


@router.get("/gateway/teams/{team_id}", response=TeamOut, auth=can_view)
def teams_detail(request: HttpRequest, team_id: int = Path(..., ge=1, le=INT64_MAX)) -> dict[str, Any]:
    return team_out(team_for(request.auth, team_id))  # type: ignore[attr-defined]


@router.patch("/gateway/teams/{team_id}", response=TeamOut, auth=can_operate)
def teams_update(request: HttpRequest, payload: TeamPatchIn, team_id: int = Path(..., ge=1, le=INT64_MAX)) -> dict[str, Any]:
    team = team_update(actor=request.auth, team=get_object_or_404(Team, pk=team_id),  # type: ignore[attr-defined]
                       **payload.dict(exclude_unset=True))
    return team_out(team_for(request.auth, team.pk))  # type: ignore[attr-defined]


@router.get("/gateway/budgets", response=list[TokenBudgetOut], auth=can_operate)
def budgets_list(request: HttpRequest) -> list[dict[str, Any]]:
    """Every budget with what its current window has used."""
    return [budget_out(budget_use(budget)) for budget in Budget.objects.all()]


@router.post("/gateway/budgets", response=TokenBudgetOut, auth=can_operate)
def budgets_set(request: HttpRequest, payload: TokenBudgetIn) -> dict[str, Any]:
    """Create the budget of a team or key for the period, or change it (raise, lower): at once."""
    return budget_out(budget_use(budget_set(actor=request.auth, **payload.dict())))  # type: ignore[attr-defined]


@router.post("/gateway/budgets/{budget_id}/reset", response=TokenBudgetOut, auth=can_operate)
def budgets_reset(request: HttpRequest, budget_id: int = Path(..., ge=1, le=INT64_MAX)) -> dict[str, Any]:
    """Forget what the current window has used: requests pass again at once."""
    return budget_out(budget_reset(actor=request.auth, budget=get_object_or_404(Budget, pk=budget_id)))  # type: ignore[attr-defined]


@router.post("/gateway/keys/{key_id}/share", response=ApiKeyOut, auth=can_operate)
def keys_share(request: HttpRequest, payload: ApiKeyShareIn,
               key_id: int = Path(..., ge=1, le=INT64_MAX)) -> dict[str, Any]:
    key = api_key_set_share(actor=request.auth, key=get_object_or_404(ApiKey, pk=key_id),  # type: ignore[attr-defined]
                            **payload.dict())
    return key_out(key)


@router.get("/gateway/requests", response=list[RequestLogOut], auth=can_operate)
def requests_list(request: HttpRequest, query: Query[RequestLogQuery]) -> list[dict[str, Any]]:
    filters = LogFilters(key_id=query.key, team_id=query.team, lane=query.lane, status=query.status, route=query.route or "",
                         since=query.since, until=query.until, request_id=query.request_id.strip(), text=query.text)
    return [log_out(row) for row in request_log_list(filters=filters, limit=query.limit, before_id=query.before)]
