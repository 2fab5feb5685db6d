"""Personal access tokens for the management API: created (the secret shown once), revoked,
and resolved to their owner on each request (core.api.RoleAuth). Creation and revocation are
audited; the secret never is, nor logged."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from core.audit import audit_record
from core.models import PersonalAccessToken
from core.roles import Capability, UserLike, user_can

TOKEN_PREFIX = "pat-spark-"
VISIBLE_PREFIX_LEN = len(TOKEN_PREFIX) + 6
MAX_DAYS = 366
LAST_USED_EVERY = timedelta(minutes=1)  # last_used_at is written at most this often per token


def token_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedToken:
    token: PersonalAccessToken
    secret: str  # shown once, never stored


def access_token_create(*, user: UserLike, name: str, expires_in_days: int = 90) -> CreatedToken:
    if not isinstance(user, User):
        raise PermissionDenied("Log in to create a token.")
    errors: dict[str, list[str]] = {}
    name = (name or "").strip()
    if not name or len(name) > 100 or any(ord(ch) < 32 for ch in name):
        errors["name"] = ["Give the token a name of 1 to 100 printable characters (e.g. the script that uses it)."]
    if not 1 <= expires_in_days <= MAX_DAYS:
        errors["expires_in_days"] = [f"Must be from 1 to {MAX_DAYS} days."]
    if errors:
        raise ValidationError(errors)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = PersonalAccessToken.objects.create(
            user=user, name=name, prefix=secret[:VISIBLE_PREFIX_LEN], secret_hash=token_hash(secret),
            expires_at=timezone.now() + timedelta(days=expires_in_days))
        audit_record(actor=user, action="access_token.create", obj=token,
                     after={"name": name, "prefix": token.prefix, "expires_at": token.expires_at.isoformat()})
    return CreatedToken(token=token, secret=secret)


def access_token_revoke(*, actor: UserLike, token: PersonalAccessToken) -> PersonalAccessToken:
    """Its owner or an admin; refused at the next request."""
    if not (isinstance(actor, User) and actor.pk == token.user_id) and not user_can(actor, Capability.OPERATE):
        raise PermissionDenied("Only the token's owner or an admin may revoke it.")
    if token.revoked_at is None:
        with transaction.atomic():
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            audit_record(actor=actor, action="access_token.revoke", obj=token, before={"revoked": False},
                         after={"revoked": True, "owner": token.user.get_username()})
    return token


def access_token_user(secret: str) -> User | None:
    """The active owner of a live token, or None (unknown, revoked, expired, owner inactive)."""
    if not secret.startswith(TOKEN_PREFIX):
        return None
    digest = token_hash(secret)
    token = PersonalAccessToken.objects.filter(secret_hash=digest).select_related("user").first()
    now = timezone.now()
    if (token is None or not hmac.compare_digest(token.secret_hash, digest) or token.revoked_at is not None
            or token.expires_at <= now or not token.user.is_active):
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_EVERY:
        PersonalAccessToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user
