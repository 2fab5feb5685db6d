"""A small, real OpenID Connect provider for the sign-in tests (django-oauth-toolkit), run in a
process of its own by tests/portal/test_oidc.py: its own settings and SQLite database, an RSA
signing key the test run generates (none is committed), users and groups made by its
management command, and the groups claim served by its claims hook (claims.py)."""

# A user in this group gets a token without its groups, as Entra ID's group overage (claims.py).
OVERAGE = "has-group-overage"
