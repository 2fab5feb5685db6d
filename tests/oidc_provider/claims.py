"""The provider's claims hook: user name, e-mail and the user's groups (the `groups` claim
the portal maps to roles and teams), in the ID token and at the userinfo endpoint. A user in
the group OVERAGE gets what Microsoft Entra ID sends for a user in more groups than its
token holds: no `groups`, a distributed claim pointing at where to fetch them."""

from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator

from tests.oidc_provider import OVERAGE


class GroupsClaimValidator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "profile", "email_verified": "email",
                        "_claim_names": "profile", "_claim_sources": "profile"}

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        claims = {"preferred_username": user.username, "email": user.email, "email_verified": bool(user.email)}
        groups = sorted(user.groups.values_list("name", flat=True))
        if OVERAGE in groups:  # as Entra ID's v2.0 tokens say it
            return {**claims, "_claim_names": {"groups": "src1"}, "_claim_sources": {"src1": {
                "endpoint": f"https://graph.microsoft.com/v1.0/users/{user.pk}/getMemberObjects"}}}
        return {**claims, "groups": groups}
