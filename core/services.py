"""Users and their roles, managed by admins in the portal. Every
change is audited with a before/after diff; passwords and invite tokens never are."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.forms import SetPasswordForm
from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.contrib.auth.tokens import default_token_generator
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import transaction
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_decode, urlsafe_base64_encode

from core.audit import audit_record
from core.broadcast import announce_access_change
from core.models import ExternalIdentity
from core.roles import ROLE_CAPABILITIES, Role, UserLike, ensure_role_groups, forget_role, user_role


@dataclass(frozen=True)
class UserCreated:
    user: User
    invite_path: str  # "" when the admin set a password; else the one-time set-password link


def user_snapshot(user: User) -> dict[str, object]:
    """What an audit event of a user change compares (the user name is the event's object)."""
    role = user_role(user)
    return {"email": user.email, "role": role.value if role else None, "is_active": user.is_active,
            "is_superuser": user.is_superuser, "is_staff": user.is_staff}


def _set_role_groups(user: User, role: Role | None) -> None:
    ensure_role_groups()
    user.groups.remove(*Group.objects.filter(name__in=[r.value for r in ROLE_CAPABILITIES]))
    if role is not None:
        user.groups.add(Group.objects.get(name=role.value))
    forget_role(user)
    # Django admin is break-glass for a superuser holding the admin role: any other role
    # takes the superuser flag away too, so nothing is left that the users page does not show.
    if role is not Role.ADMIN:
        user.is_superuser = False
    user.is_staff = role is Role.ADMIN and user.is_superuser
    user.save(update_fields=["is_staff", "is_superuser"])


def active_admin_count() -> int:
    """Every active account that can administer: the role alone decides (core.roles.user_can)."""
    return User.objects.filter(is_active=True, groups__name=Role.ADMIN.value).distinct().count()


def user_invite_path(user: User) -> str:
    """A one-time link where the user sets their own password (Django's reset token: it
    stops working once a password is set or after PASSWORD_RESET_TIMEOUT)."""
    uid = urlsafe_base64_encode(force_bytes(user.pk))
    return reverse("password_set", kwargs={"uidb64": uid, "token": default_token_generator.make_token(user)})


@transaction.atomic
def user_create(
    *, actor: UserLike | None, username: str, email: str = "", role: Role | None, password: str = ""
) -> UserCreated:
    """With a password the account works at once; without one it gets an invite link."""
    username = username.strip()
    errors: dict[str, list[str]] = {}
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError as exc:
        errors["username"] = list(exc.messages)
    if not username:
        errors["username"] = ["Give a user name."]
    elif User.objects.filter(username__iexact=username).exists():
        errors["username"] = [f"A user named {username!r} already exists."]
    if password:
        try:
            validate_password(password, User(username=username, email=email))
        except ValidationError as exc:
            errors["password"] = list(exc.messages)
    if errors:
        raise ValidationError(errors)
    user = User.objects.create_user(username=username, email=email.strip(), password=password or None)
    if not password:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    _set_role_groups(user, role)
    audit_record(actor=actor, action="user.create", obj=user, after=user_snapshot(user))
    return UserCreated(user, "" if password else user_invite_path(user))


def _guard_last_admin(*, actor: UserLike | None, user: User, losing_admin: bool) -> None:
    if not losing_admin:
        return
    if actor is not None and getattr(actor, "pk", None) == user.pk:
        raise ValidationError({"role": "You cannot remove your own admin role or account: ask another admin."})
    if active_admin_count() <= 1:
        raise ValidationError({"role": f"{user.get_username()} is the last active admin: make another admin first."})


@transaction.atomic
def user_set_role(*, actor: UserLike | None, user: User, role: Role | None, system_name: str = "system",
                  keep_last_admin: bool = True) -> User:
    """`keep_last_admin=False` when the identity provider decides (portal.oidc, at each sign-in):
    its groups are the truth for its accounts, and local break-glass admins stay."""
    before = user_snapshot(user)
    current = user_role(user)
    if current == role:
        return user
    if keep_last_admin:
        _guard_last_admin(actor=actor, user=user, losing_admin=current is Role.ADMIN and user.is_active)
    _set_role_groups(user, role)
    audit_record(actor=actor, action="user.role", obj=user, before=before, after=user_snapshot(user),
                 system_name=system_name)
    transaction.on_commit(lambda: announce_access_change(user.pk))
    return user


@transaction.atomic
def user_set_active(*, actor: UserLike | None, user: User, active: bool) -> User:
    """A deactivated user's sessions stop working at their next request (Django refuses
    inactive users), sockets included; nothing of theirs is deleted."""
    if user.is_active == active:
        return user
    before = user_snapshot(user)
    if not active:
        _guard_last_admin(actor=actor, user=user, losing_admin=user_role(user) is Role.ADMIN)
    user.is_active = active
    user.save(update_fields=["is_active"])
    audit_record(actor=actor, action="user.activate" if active else "user.deactivate", obj=user,
                 before=before, after=user_snapshot(user))
    transaction.on_commit(lambda: announce_access_change(user.pk))
    return user


def user_new_invite(*, actor: UserLike | None, user: User) -> str:
    """A fresh set-password link for a user who has not set one yet."""
    if user.has_usable_password():
        raise ValidationError({"user": f"{user.get_username()} has already set a password."})
    if ExternalIdentity.objects.filter(user=user).exists():
        raise ValidationError({"user": f"{user.get_username()} signs in through the identity provider: "
                                       "no local password to set."})
    audit_record(actor=actor, action="user.invite", obj=user)
    return user_invite_path(user)


def invited_user(uidb64: str, token: str) -> User | None:
    """The user an invite link names, if its token is still good (unused, not expired)."""
    try:
        user = User.objects.get(pk=int(urlsafe_base64_decode(uidb64).decode()))
    except (ValueError, TypeError, OverflowError, User.DoesNotExist):
        return None
    return user if user.is_active and default_token_generator.check_token(user, token) else None


def password_set_by_invite(*, user: User, form: SetPasswordForm) -> User:
    """The invited user's own password (the token dies with the old password hash)."""
    form.save()
    audit_record(actor=user, action="user.password_set", obj=user)
    # Sessions from before the new password no longer authenticate: their sockets close too.
    transaction.on_commit(lambda: announce_access_change(user.pk))
    return user
