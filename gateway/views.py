"""Gateway pages (/gateway/): API keys, mirrored samples, the draft router on live traffic.
Admins only. Metrics serves the request log page (/monitor/requests/, with this app's
filter) and the usage totals beside the keys (metrics_tags' usage_totals: its rollup)."""

from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.roles import Capability, require, role_required
from gateway.fair_view import fair_queues_now, fair_waits
from gateway.forms import ApiKeyForm
from gateway.models import ApiKey
from gateway.selectors import api_key_list, mirror_sample_list, mirror_summary, shadow_comparison
from gateway.services import api_key_create, api_key_revoke
from routing.models import VersionStatus
from routing.selectors import shadow_version, version_list, version_or_404
from routing.services import router_version_set_shadow

FORM_TOKENS_SESSION_KEY = "gateway_key_form_tokens"


def _issue_form_token(request: HttpRequest) -> str:
    """One token per rendered New key form, spent by the key it creates: a reload of the
    page that showed the secret re-posts a spent token and creates nothing (the secret itself
    is never kept, not even in the session)."""
    token = secrets.token_urlsafe(16)
    tokens = [*request.session.get(FORM_TOKENS_SESSION_KEY, [])[-9:], token]
    request.session[FORM_TOKENS_SESSION_KEY] = tokens
    return token


def _spend_form_token(request: HttpRequest, token: str) -> bool:
    tokens = list(request.session.get(FORM_TOKENS_SESSION_KEY, []))
    if token not in tokens:
        return False
    tokens.remove(token)
    request.session[FORM_TOKENS_SESSION_KEY] = tokens
    return True


@role_required(Capability.OPERATE)
def gateway_home(request: HttpRequest) -> HttpResponse:
    form = ApiKeyForm(request.POST or None)
    created = None
    if request.method == "POST" and not _spend_form_token(request, request.POST.get("form_token", "")):
        messages.warning(request, "That form was already sent (a reload?): no second key was created. "
                                  "The secret was shown once, when the key was created.")
        return redirect("gateway:gateway")
    if request.method == "POST" and form.is_valid():
        try:
            created = api_key_create(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            form = ApiKeyForm()
    lane = request.GET.get("lane", "")[:63]
    return render(request, "gateway/gateway.html", {
        "form": form, "form_token": _issue_form_token(request), "created": created, "keys": api_key_list(),
        "fair_lane": lane, "fair_queues": fair_queues_now(lane), "fair_waits": fair_waits(lane=lane),
        "fair_window_s": settings.METRICS_PERCENTILE_WINDOW_S,
    })


@require_POST
@role_required(Capability.OPERATE)
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    api_key_revoke(actor=request.user, key=get_object_or_404(ApiKey, pk=key_id))
    return redirect("gateway:gateway")


@role_required(Capability.OPERATE)
def mirror_page(request: HttpRequest) -> HttpResponse:
    return render(request, "gateway/mirror.html", {"samples": mirror_sample_list(), "summary": mirror_summary()})


@role_required(Capability.VIEW)
def draft_shadow_page(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        require(request.user, Capability.EDIT_ROUTING)
        number = request.POST.get("version", "")
        try:
            router_version_set_shadow(actor=request.user, version=version_or_404(number) if number else None)
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
        return redirect("gateway:draft-shadow")
    version = shadow_version()
    total, table, examples = shadow_comparison(version.number) if version else (0, [], [])
    agree = sum(row.count for row in table if row.published_lane == row.shadow_lane)
    return render(request, "routing/shadow.html", {
        "tab": "shadow", "version": version, "total": total, "table": table, "examples": examples,
        "agreement": agree / total if total else None, "drafts": version_list().filter(status=VersionStatus.DRAFT)})
