"""The provider's claims hook: user name, e-mail and the user's groups (the `groups` claim
the portal maps to roles and teams), in the ID token and at the userinfo endpoint."""

from __future__ import annotations

from typing import Any

from oauth2_provider.oauth2_validators import OAuth2Validator


class GroupsClaimValidator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "profile", "email_verified": "email"}

    def get_additional_claims(self, request: Any) -> dict[str, Any]:
        user = request.user
        return {"preferred_username": user.username, "email": user.email, "email_verified": bool(user.email),
                "groups": sorted(user.groups.values_list("name", flat=True))}
