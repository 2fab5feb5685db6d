"""Gateway pages (/gateway/): API keys, mirrored samples, the draft router on live traffic.
Admins only. Teams (/teams/): admins manage them; members read their own team. Metrics serves the request log page (/monitor/requests/, with this app's
filter) and the usage totals beside the keys (metrics_tags' usage_totals: its rollup)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.form_tokens import form_token_issue, form_token_spend
from core.roles import Capability, require, role_required, user_can
from gateway.fair_view import fair_queues_now, fair_waits
from gateway.forms import ApiKeyForm, BudgetForm, TeamForm
from gateway.models import ApiKey, Team
from gateway.selectors import (
    api_key_list,
    captured_prompts_with_outcomes,
    mirror_sample_list,
    mirror_summary,
    outcome_summary,
    team_budgets,
    team_for,
    teams_visible_to,
)
from gateway.services import api_key_create, api_key_revoke
from gateway.shadow_view import shadow_status
from gateway.team_services import budget_reset, budget_set, budget_use, team_create, team_update
from lanes.selectors import lane_list
from routing.encoder import EncoderUnavailable
from routing.evaluation import replay_version
from routing.models import StopMetric, VersionStatus
from routing.selectors import published_version, version_changes, version_list, version_or_404
from routing.services import SHADOW_RULE_FIELDS, previous_active_version, router_version_set_shadow

FORM_TOKENS_SESSION_KEY = "gateway_key_form_tokens"  # core.form_tokens: a new key's form


@role_required(Capability.OPERATE)
def gateway_home(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST or None)
    created = None
    if request.method == "POST" and not form_token_spend(request, FORM_TOKENS_SESSION_KEY, request.POST.get("form_token", "")):
        messages.warning(request, "That form was already sent (a reload?): no second key was created. "
                                  "The secret was shown once, when the key was created.")
        return redirect("gateway:gateway")
    if request.method == "POST" and form.is_valid():
        try:
            created = api_key_create(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            form = ApiKeyForm()
    lane = request.GET.get("lane", "")[:63]
    return render(request, "gateway/gateway.html", {
        "form": form, "form_token": form_token_issue(request, FORM_TOKENS_SESSION_KEY), "created": created, "keys": api_key_list(),
        "fair_lane": lane, "fair_queues": fair_queues_now(lane), "fair_waits": fair_waits(lane=lane),
        "fair_window_s": settings.METRICS_PERCENTILE_WINDOW_S,
    })


@require_POST
@role_required(Capability.OPERATE)
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    api_key_revoke(actor=request.user, key=get_object_or_404(ApiKey, pk=key_id))
    return redirect("gateway:gateway")


def _form_errors(form: TeamForm | ApiKeyForm | BudgetForm, exc: ValidationError) -> None:
    for field, errors in exc.message_dict.items():
        for error in errors:
            form.add_error(field if field in form.fields else None, error)


@role_required(Capability.VIEW)
def teams_page(request: HttpRequest) -> HttpResponse:
    """Admins: every team and a form for a new one. Others: the teams they belong to."""
    form = TeamForm(request.POST or None)
    if request.method == "POST":
        require(request.user, Capability.OPERATE)
        if form.is_valid():
            try:
                team = team_create(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                _form_errors(form, exc)
            else:
                return redirect("gateway:team", team_id=team.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "gateway/teams.html", {"teams": teams_visible_to(request.user), "form": form}, status=status)


@role_required(Capability.VIEW)
def team_page(request: HttpRequest, team_id: int) -> HttpResponse:
    """A team's members, lanes, keys and usage; admins change it here."""
    team = team_for(request.user, team_id)
    form = _team_form(team, request.POST or None)
    if request.method == "POST":
        require(request.user, Capability.OPERATE)
        if form.is_valid():
            try:
                team_update(actor=request.user, team=team, **form.cleaned_data)
            except ValidationError as exc:
                _form_errors(form, exc)
            else:
                messages.success(request, f"Team “{team.name}” saved.")
                return redirect("gateway:team", team_id=team.pk)
    return _team_render(request, team, form=form, status=400 if request.method == "POST" else 200)


def _team_form(team: Team, data: Any = None) -> TeamForm:
    return TeamForm(data, initial={"name": team.name, "members": [user.username for user in team.members.all()],
                                   "allowed_lanes": [lane.name for lane in team.allowed_lanes.all()],
                                   "fair_weight": team.fair_weight})


def _team_render(request: HttpRequest, team: Team, *, form: TeamForm | None = None,
                 budget_form: BudgetForm | None = None, status: int = 200) -> HttpResponse:
    keys = list(team.keys.all())
    return render(request, "gateway/team.html", {
        "team": team, "keys": keys, "key_ids": [key.pk for key in keys],
        "budgets": [budget_use(budget) for budget in team_budgets(team)],
        "form": form or _team_form(team),
        "budget_form": budget_form or BudgetForm(team=team),
        "budget_zone": settings.GATEWAY_BUDGET_TIME_ZONE,
        "can_manage": user_can(request.user, Capability.OPERATE)}, status=status)


@require_POST
@role_required(Capability.OPERATE)
def team_budget_set(request: HttpRequest, team_id: int) -> HttpResponse:
    """Set (create, raise, lower) the team's or one of its keys' budget: in force at once."""
    team = team_for(request.user, team_id)
    form = BudgetForm(request.POST, team=team)
    if form.is_valid():
        owner = form.budget_owner() or {"team": team.pk}
        try:
            budget_set(actor=request.user, period=form.cleaned_data["period"], **owner,
                       **{name: form.cleaned_data[name] for name in ("prompt_tokens", "completion_tokens",
                                                                     "total_tokens")})
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            messages.success(request, "Budget saved: in force from the next request.")
            return redirect("gateway:team", team_id=team.pk)
    return _team_render(request, team, budget_form=form, status=400)


@require_POST
@role_required(Capability.OPERATE)
def team_budget_reset(request: HttpRequest, team_id: int, budget_id: int) -> HttpResponse:
    team = team_for(request.user, team_id)
    budget = get_object_or_404(team_budgets(team), pk=budget_id)
    budget_reset(actor=request.user, budget=budget)
    messages.success(request, "Budget reset: this period's use is forgotten.")
    return redirect("gateway:team", team_id=team.pk)


@role_required(Capability.OPERATE)
def mirror_page(request: HttpRequest) -> HttpResponse:
    return render(request, "gateway/mirror.html", {"samples": mirror_sample_list(), "summary": mirror_summary()})


@role_required(Capability.VIEW)
def draft_shadow_page(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        require(request.user, Capability.EDIT_ROUTING)
        number = request.POST.get("version", "")
        try:
            router_version_set_shadow(actor=request.user, version=version_or_404(number) if number else None,
                                      rules={f: request.POST[f] for f in SHADOW_RULE_FIELDS if f in request.POST})
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
        return redirect("gateway:draft-shadow")
    status = shadow_status()
    version, published = status.version, published_version()
    return render(request, "routing/shadow.html", {
        "tab": "shadow", "version": version, "total": status.logged, "table": status.pairs, "examples": status.examples,
        "agreement": status.logged_agreement, "drafts": version_list().filter(status=VersionStatus.DRAFT),
        "sampled": status.sampled, "published": published, "previous": previous_active_version(),
        "agreement_interval": status.agreement_interval, "stop_reason": status.stop_reason, "judged": status.judged,
        "judge_tokens_today": status.judge_tokens_today, "lanes": lane_list(), "stop_metrics": StopMetric.choices,
        "activate_changes": version_changes(version, published) if version else None})


@role_required(Capability.VIEW)
def outcomes_page(request: HttpRequest) -> HttpResponse:
    """What the agents said of their requests (POST /v1/feedback), by lane × label, key, task."""
    return render(request, "routing/outcomes.html", {"tab": "outcomes", "summary": outcome_summary()})


@role_required(Capability.VIEW)
def replay_page(request: HttpRequest) -> HttpResponse:
    """A version replayed offline on the captured prompts (keys that opt in to storing prompts: ApiKey.log_prompts)."""
    drafts = version_list().filter(status=VersionStatus.DRAFT)
    number = request.GET.get("version", "")
    report, unavailable = None, None
    if number:
        texts, served, scores = captured_prompts_with_outcomes()
        try:
            report = replay_version(version_or_404(number), texts=texts, served=served, scores=scores)
        except EncoderUnavailable as exc:
            unavailable = str(exc)
    return render(request, "routing/replay.html", {"tab": "replay", "drafts": drafts, "report": report,
                                                   "unavailable": unavailable, "number": number})
