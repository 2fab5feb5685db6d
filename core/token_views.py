"""Your personal access tokens (/account/tokens/): create one (its secret shown once), list
them, revoke one — the page beside /api/tokens, through the same services (core.access_tokens:
audited, the secret never stored nor logged). Any role; a token acts with its owner's role."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from core.access_tokens import MAX_DAYS, access_token_create, access_token_revoke
from core.form_tokens import form_token_issue, form_token_spend
from core.models import PersonalAccessToken
from core.roles import Capability, role_required

FORM_TOKENS = "access_token_form_tokens"


class AccessTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What uses it, e.g. “nightly CI”.")
    expires_in_days = forms.IntegerField(min_value=1, max_value=MAX_DAYS, initial=90, label="Expires in (days)")


@never_cache
@role_required(Capability.VIEW)
def tokens_page(request: HttpRequest) -> HttpResponse:
    form = AccessTokenForm(request.POST or None)
    created = None
    status = 200
    if request.method == "POST":
        if not form_token_spend(request, FORM_TOKENS, request.POST.get("form_token", "")):
            messages.warning(request, "That form was already sent (a reload?): no second token was created. "
                                      "The secret was shown once, when the token was created.")
            return redirect("tokens")
        if form.is_valid():
            try:
                created = access_token_create(user=request.user, **form.cleaned_data)
            except ValidationError as exc:
                for field, errors in exc.message_dict.items():
                    for error in errors:
                        form.add_error(field if field in form.fields else None, error)
            else:
                form = AccessTokenForm()
        status = 200 if created else 400
    return render(request, "portal/tokens.html", {
        "form": form, "form_token": form_token_issue(request, FORM_TOKENS), "created": created,
        "tokens": _own_tokens(request)}, status=status)


def _own_tokens(request: HttpRequest) -> QuerySet[PersonalAccessToken]:
    user = request.user
    return PersonalAccessToken.objects.filter(user=user) if isinstance(user, User) else PersonalAccessToken.objects.none()


@require_POST
@role_required(Capability.VIEW)
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Your own token (another's is 404 here: admins revoke others' through the API)."""
    token = get_object_or_404(_own_tokens(request), pk=token_id)
    access_token_revoke(actor=request.user, token=token)
    messages.success(request, f"Token “{token.name}” revoked: it is refused from now on.")
    return redirect("tokens")
