"""The project's own pages: the dashboard, /healthz and the 400 handler."""

from __future__ import annotations

import logging

from django.core.cache import cache
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults
from django.views.decorators.cache import never_cache

from core.roles import Capability, role_required, user_can
from core.tasks import HEARTBEAT_CACHE_KEY
from portal.health import check_database, check_redis
from portal.selectors import dashboard_summary

logger = logging.getLogger(__name__)


@role_required(Capability.VIEW)
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "portal/dashboard.html", {
        "summary": dashboard_summary(), "heartbeat_at": cache.get(HEARTBEAT_CACHE_KEY),
    })


def _shows_details(request: HttpRequest) -> bool:
    """An admin signed in sees why a check failed; a database that is down cannot say who is
    signed in, and then nobody does."""
    try:
        return user_can(request.user, Capability.OPERATE)
    except Exception:
        return False


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: 200 when the database and Redis answer. The
    public answer says which check failed, never its error text (host, port, database user):
    that goes to the log, and to an admin who is signed in."""
    checks = {"database": check_database(), "redis": check_redis()}
    for problem in filter(None, checks.values()):
        logger.warning("healthz: %s", problem)
    details = _shows_details(request)
    body = {
        "status": "ok" if not any(checks.values()) else "unavailable",
        "checks": {name: "ok" if not problem else problem if details else "unavailable"
                   for name, problem in checks.items()},
    }
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400: a body over DATA_UPLOAD_MAX_MEMORY_SIZE on any page is 413 (Django answers
    every suspicious request 400); the API answers its own 413 (core.api)."""
    if isinstance(exception, RequestDataTooBig):
        return HttpResponse("The request body is larger than the limit.\n", status=413,
                            content_type="text/plain; charset=utf-8")
    return defaults.bad_request(request, exception or Exception())
