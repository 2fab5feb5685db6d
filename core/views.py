"""Users pages (/users/, admins only) and the invite link's set-password page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.forms import UserCreateForm, UserRoleForm, role_from_choice
from core.roles import Capability, role_required, user_role
from core.selectors import user_audit_events, user_list
from core.services import (
    invited_user,
    password_set_by_invite,
    user_create,
    user_new_invite,
    user_set_active,
    user_set_role,
)


def _form_errors(form: UserCreateForm, exc: ValidationError) -> None:
    for field, field_messages in exc.message_dict.items():
        for message in field_messages:
            form.add_error(field if field in form.fields else None, message)


@role_required(Capability.OPERATE)
def users_page(request: HttpRequest) -> HttpResponse:
    """Admins list, create or invite users and give them a role."""
    form = UserCreateForm(request.POST or None)
    invite = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            created = user_create(actor=request.user, username=data["username"], email=data["email"],
                                  role=role_from_choice(data["role"]), password=data["password"])
        except ValidationError as exc:
            _form_errors(form, exc)
        else:
            if not created.invite_path:
                messages.success(request, f"User {created.user.username} created.")
                return redirect("users")
            invite = {"user": created.user, "url": request.build_absolute_uri(created.invite_path)}
            form = UserCreateForm()
    rows = [(user, user_role(user)) for user in user_list()]
    return render(request, "portal/users.html", {
        "rows": rows, "form": form, "invite": invite, "role_form": UserRoleForm(), "events": user_audit_events(),
    })


@require_POST
@role_required(Capability.OPERATE)
def user_action(request: HttpRequest, user_id: int, action: str) -> HttpResponse:
    """role, deactivate, activate or invite (a new set-password link) for one user."""
    user = get_object_or_404(User, pk=user_id)
    try:
        if action == "role":
            role_form = UserRoleForm(request.POST)
            if not role_form.is_valid():
                raise ValidationError({"role": "Choose admin, team lead, viewer or no role."})
            user_set_role(actor=request.user, user=user, role=role_from_choice(role_form.cleaned_data["role"]))
            messages.success(request, f"{user.username} is now {user_role(user) or 'without a role'}.")
        elif action in ("deactivate", "activate"):
            user_set_active(actor=request.user, user=user, active=action == "activate")
            messages.success(request, f"{user.username} {action}d.")
        elif action == "invite":
            url = request.build_absolute_uri(user_new_invite(actor=request.user, user=user))
            messages.info(request, f"Send this one-time link to {user.username}: {url}")
        else:
            return HttpResponse(f"No user action {action!r}.", status=404)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("users")


def password_set(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """The invite link: the new user sets their own password, then logs in. The token is
    checked from the link on every request, the POST too (the form posts back to the link);
    nothing is put in the session (Django's PasswordResetConfirmView keeps the token there,
    and a session row that lets its reader set the password is a credential at rest)."""
    user = invited_user(uidb64, token)
    form = SetPasswordForm(user, request.POST or None) if user is not None else None
    if user is not None and form is not None and request.method == "POST" and form.is_valid():
        password_set_by_invite(user=user, form=form)
        messages.success(request, "Password set: log in with it now.")
        return redirect("login")
    response = render(request, "registration/set_password.html", {"form": form, "validlink": user is not None})
    response["Referrer-Policy"] = "no-referrer"  # the token is in this page's address
    return response
