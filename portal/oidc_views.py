"""The sign-in pages of single sign-on (portal.oidc): the login page's "Sign in with …" button,
the start of the flow (to the provider, with state, nonce and PKCE) and its callback. With
single sign-on off both flow URLs answer 404; a refused sign-in is a page that says why."""

from __future__ import annotations

import logging
from typing import Any

import requests
from django.conf import settings
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

logger = logging.getLogger(__name__)


class Login(LoginView):
    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context.update(oidc_enabled=settings.OIDC_ENABLED, oidc_provider_name=settings.OIDC_PROVIDER_NAME,
                       local_superusers_only=settings.OIDC_ENABLED and settings.OIDC_LOCAL_LOGIN_SUPERUSERS_ONLY)
        return context


def refused(request: HttpRequest, reason: str, status: int = 403) -> HttpResponse:
    return render(request, "registration/oidc_refused.html",
                  {"reason": reason, "provider_name": settings.OIDC_PROVIDER_NAME}, status=status)


class Authenticate(OIDCAuthenticationRequestView):
    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("Single sign-on is not configured.")
        response: HttpResponse = super().get(request)
        return response


class Callback(OIDCAuthenticationCallbackView):
    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ENABLED:
            raise Http404("Single sign-on is not configured.")
        try:
            response: HttpResponse = super().get(request)
        except SuspiciousOperation as exc:
            # A state this browser never started, a replayed one, a nonce or signature that does not
            # match: refused, nothing signed in.
            logger.warning("single sign-on refused: %s", exc)
            return refused(request, getattr(request, "oidc_refusal", None)
                           or "The sign-in could not be verified (its state, nonce or token did not match). "
                              "Start again from the login page.", status=400)
        except requests.HTTPError as exc:
            # A refused token or userinfo request (a wrong client secret, an expired code). The
            # library's message carries the provider's answer, never the secret: logged by status only.
            status = exc.response.status_code if exc.response is not None else None
            logger.warning("single sign-on: the identity provider answered HTTP %s to %s", status,
                           exc.response.url if exc.response is not None else "a request")
            return refused(request, f"{settings.OIDC_PROVIDER_NAME} refused the portal's request (HTTP {status}). "
                                    "Try again; if it persists, ask a portal admin to check the client settings.",
                           status=502)
        except requests.RequestException as exc:
            logger.warning("single sign-on: the identity provider did not answer: %s", type(exc).__name__)
            return refused(request, f"{settings.OIDC_PROVIDER_NAME} did not answer. Try again later.", status=502)
        return response

    def login_failure(self) -> HttpResponse:
        error = self.request.GET.get("error")
        if error:
            return refused(self.request, f"{settings.OIDC_PROVIDER_NAME} did not sign you in ({error[:100]}).")
        refusal = getattr(self.request, "oidc_refusal", None)  # portal.oidc refused the account
        if refusal:
            return refused(self.request, refusal)
        user = getattr(self, "user", None)
        if user is not None and not user.is_active:
            return refused(self.request, "This portal account is deactivated. Ask a portal admin.")
        return refused(self.request, "The sign-in could not be completed. Start again from the login page.")
