"""Sign-in with the company's identity provider (OpenID Connect, mozilla-django-oidc): the
authorization-code flow with PKCE and a nonce, the ID token's signature checked against the
provider's JWKS, then its issuer, audience and subject here. The account is found by the
provider's (issuer, subject) (core.models.ExternalIdentity); at every sign-in the provider's
groups set the account's role and its mapped teams (core.oidc_map), audited, and a changed role
closes the account's open sockets (core.services.user_set_role). docs/guide-admin.md, "Single
sign-on", says what an admin configures and how collisions with local accounts are decided."""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import HttpRequest
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from core.audit import audit_record
from core.models import ExternalIdentity
from core.oidc_map import parse_group_map
from core.services import user_set_role, user_snapshot
from gateway.team_services import team_memberships_sync

logger = logging.getLogger(__name__)

PROVIDER_ACTOR = "the identity provider"  # who the audit log says acted at a sign-in
_NOT_IN_USERNAME = re.compile(r"[^\w.@+-]")


class SignInRefused(SuspiciousOperation):
    """A sign-in the provider vouched for that the portal refuses; its message is the page's."""


def groups_overage(claims: dict[str, Any]) -> bool:
    """The provider left the groups out and points elsewhere for them (OpenID Connect's
    distributed claims: `_claim_names` names the claim, `_claim_sources` says where to fetch
    it) — Microsoft Entra ID's *group overage*, for a user in more groups than its token
    holds (200 in a JWT). The portal does not fetch them: mapping no groups would silently
    drop the user's role and teams."""
    names = claims.get("_claim_names")
    return settings.OIDC_GROUPS_CLAIM not in claims and isinstance(names, dict) and settings.OIDC_GROUPS_CLAIM in names


def provider_groups(claims: dict[str, Any]) -> list[str]:
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return [value]
    return [group for group in value if isinstance(group, str)] if isinstance(value, list) else []


def provider_username(claims: dict[str, Any]) -> str:
    """The provider's user name (PORTAL_OIDC_USERNAME_CLAIM, else the e-mail, else the subject),
    in the characters a portal user name allows."""
    raw = claims.get(settings.OIDC_USERNAME_CLAIM) or claims.get("email") or claims["sub"]
    return _NOT_IN_USERNAME.sub("-", str(raw).strip())[:150]


def apply_provider_groups(user: User, claims: dict[str, Any]) -> None:
    """The role and the mapped teams the provider's groups give, now (every sign-in)."""
    group_map = parse_group_map(settings.OIDC_GROUP_MAP)
    groups = provider_groups(claims)
    user_set_role(actor=None, user=user, role=group_map.role_for(groups), system_name=PROVIDER_ACTOR,
                  keep_last_admin=False)
    missing = team_memberships_sync(user=user, wanted=group_map.teams_for(groups), managed=group_map.managed_teams,
                                    system_name=PROVIDER_ACTOR)
    if missing:
        logger.warning("PORTAL_OIDC_GROUP_MAP names team(s) that do not exist: %s", ", ".join(missing))
    email = str(claims.get("email") or "").strip()
    if email and email != user.email:
        before = user_snapshot(user)
        user.email = email
        user.save(update_fields=["email"])
        audit_record(actor=None, action="user.update", obj=user, before=before, after=user_snapshot(user),
                     system_name=PROVIDER_ACTOR)


def _may_link(user: User, claims: dict[str, Any]) -> bool:
    """A local account takes the provider's login only when configured, with the same e-mail
    the provider has verified, and never a superuser (break-glass stays local)."""
    email = str(claims.get("email") or "")
    return bool(settings.OIDC_LINK_LOCAL_ACCOUNTS and not user.is_superuser and user.email and email
                and claims.get("email_verified") is True and user.email.lower() == email.lower())


def first_sign_in(issuer: str, subject: str, claims: dict[str, Any]) -> User:
    username = provider_username(claims)
    user = User.objects.filter(username__iexact=username).first()
    if user is None:
        user = User.objects.create_user(username=username, email=str(claims.get("email") or ""))
        user.set_unusable_password()  # the provider's login only
        user.save(update_fields=["password"])
        audit_record(actor=None, action="user.create", obj=user, after=user_snapshot(user),
                     system_name=PROVIDER_ACTOR)
    elif ExternalIdentity.objects.filter(user=user).exists():
        raise SignInRefused(
            f"The portal account {username} belongs to another {settings.OIDC_PROVIDER_NAME} login "
            "(a different person, or the same name given again). Ask a portal admin.")
    elif not _may_link(user, claims):
        raise SignInRefused(
            f"The portal already has a local account named {username}, and your {settings.OIDC_PROVIDER_NAME} "
            "login is not linked to it. Ask a portal admin to rename or remove the local account, "
            "or to link accounts with matching verified e-mail addresses.")
    ExternalIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    audit_record(actor=None, action="user.link", obj=user, after={"issuer": issuer, "subject": subject},
                 system_name=PROVIDER_ACTOR)
    return user


class ProviderBackend(OIDCAuthenticationBackend):
    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback view passes a nonce: a local password login never comes here.
        if not settings.OIDC_ENABLED or request is None or "nonce" not in kwargs:
            return None
        user: User | None = super().authenticate(request, **kwargs)
        return user

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The library checks the signature (JWKS), the expiry and the nonce; the issuer and
        the audience (this client) are checked here."""
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if payload.get("iss") != settings.OIDC_ISSUER:
            raise SuspiciousOperation(f"ID token issuer {payload.get('iss')!r} is not PORTAL_OIDC_ISSUER")
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("ID token audience is not this client")
        if not payload.get("sub"):
            raise SuspiciousOperation("ID token has no subject")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The ID token's claims with the userinfo endpoint's on top (the same subject)."""
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if str(userinfo.get("sub")) != str(payload["sub"]):
            raise SuspiciousOperation("userinfo subject differs from the ID token's")
        return {**payload, **userinfo}

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User | None:
        claims = self.get_userinfo(access_token, id_token, payload)
        issuer, subject = str(payload.get("iss") or settings.OIDC_ISSUER), str(payload["sub"])
        try:
            try:
                return self._sign_in(issuer, subject, claims)
            except IntegrityError:  # the same person's first sign-in in two tabs at once: the other won
                return self._sign_in(issuer, subject, claims)
        except SignInRefused as exc:
            self.request.oidc_refusal = str(exc)
            raise

    @staticmethod
    @transaction.atomic
    def _sign_in(issuer: str, subject: str, claims: dict[str, Any]) -> User:
        identity = ExternalIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        if groups_overage(claims):  # refused before anything changes: the role and teams stay as they were
            logger.warning("OIDC sign-in of %s refused: the provider sent no %r claim, only a reference to fetch it "
                           "(group overage); its role and teams are left unchanged",
                           identity.user.username if identity else provider_username(claims), settings.OIDC_GROUPS_CLAIM)
            raise SignInRefused(
                f"{settings.OIDC_PROVIDER_NAME} did not send your groups (you are in more groups than its token "
                "holds), so the portal cannot tell your role. Ask a portal admin: the provider must send only "
                "the groups assigned to the portal, or its app roles.")
        user = identity.user if identity else first_sign_in(issuer, subject, claims)
        ExternalIdentity.objects.filter(user=user).update(last_login_at=timezone.now())
        if user.is_active:
            apply_provider_groups(user, claims)
        return user
