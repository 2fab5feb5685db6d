"""Management API of the gateway (admins: the OPERATE capability): teams, API keys and the
request log; a team's members may read their team (gateway.selectors.teams_visible_to);
the router's shadow run and its judged comparison (every role reads, EDIT_ROUTING changes). The OpenAI-compatible endpoint itself is gateway.asgi (raw ASGI). The usage
totals (/api/gateway/totals/...) are read from metrics' rollups: metrics/api.py."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import Path, Query, Router, Status

from core.api import can_edit_routing, can_operate, can_view
from core.validators import INT64_MAX
from gateway.models import ApiKey, Budget, JudgedComparison, RequestLog, Team
from gateway.schemas import (
    ApiKeyCreatedOut,
    ApiKeyIn,
    ApiKeyOut,
    ApiKeyShareIn,
    JudgedComparisonOut,
    JudgedQuery,
    RequestLogOut,
    RequestLogQuery,
    ShadowIn,
    ShadowOut,
    TeamIn,
    TeamOut,
    TeamPatchIn,
    TokenBudgetIn,
    TokenBudgetOut,
)
from gateway.selectors import (
    LogFilters,
    api_key_list,
    judged_list,
    request_log_list,
    team_budgets,
    team_for,
    teams_visible_to,
)
from gateway.services import api_key_create, api_key_revoke, api_key_set_share
from gateway.shadow_view import ShadowStatus, shadow_status
from gateway.team_services import BudgetUse, budget_reset, budget_set, budget_use, team_create, team_update
from routing.models import RouterVersion
from routing.selectors import shadow_version
from routing.services import router_version_set_shadow

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


# ---------------------------------------------------------------- the router's shadow run
# Here, not in routing/api.py: its results are read from this app's request log and judged
# comparisons. The same services and figures as the shadow page (gateway.shadow_view).


def shadow_out(status: ShadowStatus) -> dict[str, Any]:
    version, judged = status.version, status.judged
    rules = {name: getattr(version, name) if version else None
             for name in ("shadow_limit", "stop_metric", "stop_threshold", "stop_confidence")}
    judge = None
    if version is not None and judged is not None:
        judge = {"share": version.judge_share, "lane": version.judge_lane, "daily_tokens": version.judge_daily_tokens,
                 "tokens_today": status.judge_tokens_today, "wins": judged.wins, "ties": judged.ties,
                 "losses": judged.losses, "unparsed": judged.counts.get("unparsed", 0),
                 "errors": judged.counts.get("error", 0), "skipped_budget": judged.counts.get("budget", 0),
                 "win_rate": judged.win_rate, "win_rate_interval": judged.interval,
                 "answer_tokens": judged.answer_tokens, "judge_tokens": judged.judge_tokens}
    return {"version": version.number if version else None, **rules, "sampled": status.sampled,
            "agreed": status.agreed, "agreement": status.agreed / status.sampled if status.sampled else None,
            "agreement_interval": status.agreement_interval, "stopped": status.stopped,
            "stop_reason": status.stop_reason, "logged_requests": status.logged,
            "pairs": [vars(row) for row in status.pairs], "judge": judge}


@router.get("/router/shadow", response=ShadowOut, tags=["router"])
def shadow_get(request: HttpRequest) -> dict[str, Any]:
    """The draft in shadow: its sample count, agreement and stop rule, and its judged comparison."""
    return shadow_out(shadow_status(examples=0))


@router.post("/router/shadow", response=ShadowOut, auth=can_edit_routing, tags=["router"])
def shadow_start(request: HttpRequest, payload: ShadowIn) -> dict[str, Any]:
    """Put a draft in shadow (any other stops), sampling afresh, with its rules (audited
    `router.shadow`); every gateway process follows within a second."""
    data = payload.dict()
    number = data.pop("version")
    version = RouterVersion.objects.filter(number=number).first()
    if version is None:
        raise ValidationError({"version": [f"No router version v{number}."]})
    router_version_set_shadow(actor=request.auth, version=version,  # type: ignore[attr-defined]
                              rules={name: value for name, value in data.items() if value is not None})
    return shadow_out(shadow_status(examples=0))


@router.post("/router/shadow/stop", response=ShadowOut, auth=can_edit_routing, tags=["router"])
def shadow_end(request: HttpRequest) -> dict[str, Any]:
    """No draft in shadow any more (audited); its results stay readable by `GET /router/shadow/judged?version=`."""
    router_version_set_shadow(actor=request.auth, version=None)  # type: ignore[attr-defined]
    return shadow_out(shadow_status(examples=0))


@router.get("/router/shadow/judged", response=list[JudgedComparisonOut], tags=["router"])
def shadow_judged(request: HttpRequest, query: Query[JudgedQuery]) -> list[JudgedComparison]:
    """A draft's judged comparisons, newest first: each verdict, the lanes, the order shown
    to the judge, the judge's words and the tokens."""
    number = query.version
    if number is None:
        current = shadow_version()
        if current is None:
            return []
        number = current.number
    return judged_list(number, limit=query.limit, before_id=query.before)
