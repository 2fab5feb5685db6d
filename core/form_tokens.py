"""One-time form tokens for the forms that show a secret once (a new API key, a new personal
access token): each rendered form carries a token, spent by what the form creates, so a reload
of the page that showed the secret re-posts a spent token and creates nothing (the secret
itself is never kept, not even in the session)."""

from __future__ import annotations

import secrets

from django.http import HttpRequest

KEEP = 10  # a session's last rendered forms (other tabs) stay valid


def form_token_issue(request: HttpRequest, purpose: str) -> str:
    token = secrets.token_urlsafe(16)
    tokens = [*request.session.get(purpose, [])[-(KEEP - 1):], token]
    request.session[purpose] = tokens
    return token


def form_token_spend(request: HttpRequest, purpose: str, token: str) -> bool:
    tokens = list(request.session.get(purpose, []))
    if token not in tokens:
        return False
    tokens.remove(token)
    request.session[purpose] = tokens
    return True
