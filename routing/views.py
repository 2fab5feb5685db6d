"""Gateway pages (/gateway/): API keys, recent requests, totals, shadow samples. Admins only."""

from __future__ import annotations

import secrets

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.roles import Capability, role_required
from portal.validators import whole_number
from routing.forms import ApiKeyForm
from routing.models import ApiKey
from routing.selectors import (
    LogFilters,
    api_key_list,
    request_log_list,
    request_totals,
    shadow_sample_list,
    shadow_summary,
)
from routing.services import api_key_create, api_key_revoke

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
        return redirect("routing:gateway")
    if request.method == "POST" and form.is_valid():
        try:
            created = api_key_create(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            form = ApiKeyForm()
    return render(request, "routing/gateway.html", {
        "form": form, "form_token": _issue_form_token(request), "created": created, "keys": api_key_list(),
        "by_key": request_totals(by="key"), "by_lane": request_totals(by="lane"),
    })


@require_POST
@role_required(Capability.OPERATE)
def key_revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    api_key_revoke(actor=request.user, key=get_object_or_404(ApiKey, pk=key_id))
    return redirect("routing:gateway")


@role_required(Capability.OPERATE)
def requests_page(request: HttpRequest) -> HttpResponse:
    key = request.GET.get("key", "")
    filters = LogFilters(key_id=whole_number(key), lane=request.GET.get("lane", ""), status=request.GET.get("status", ""))
    if key and filters.key_id is None:
        return _requests_refused(request, filters, {"key": ["must be an API key's number"]})
    try:
        rows = request_log_list(filters=filters, limit=200)
    except ValidationError as exc:
        return _requests_refused(request, filters, exc.message_dict)
    return render(request, "routing/requests.html", {"rows": rows, "filters": filters, "keys": api_key_list()})


def _requests_refused(request: HttpRequest, filters: LogFilters, errors: dict[str, list[str]]) -> HttpResponse:
    return render(request, "routing/requests.html", {
        "rows": [], "filters": filters, "keys": api_key_list(),
        "errors": [f"{field}: {' '.join(texts)}" for field, texts in errors.items()]}, status=400)


@role_required(Capability.OPERATE)
def shadow_page(request: HttpRequest) -> HttpResponse:
    return render(request, "routing/shadow.html", {"samples": shadow_sample_list(), "summary": shadow_summary()})
