"""The project's own pages: the dashboard, /healthz and the 400 handler."""

from __future__ import annotations

from django.core.cache import cache
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults
from django.views.decorators.cache import never_cache

from core.roles import Capability, role_required
from core.tasks import HEARTBEAT_CACHE_KEY
from portal.health import check_database, check_redis
from portal.selectors import dashboard_summary


@role_required(Capability.VIEW)
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "portal/dashboard.html", {
        "summary": dashboard_summary(), "heartbeat_at": cache.get(HEARTBEAT_CACHE_KEY),
    })


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:  # noqa: ARG001 (a Django view)
    """Liveness for load balancers and compose: 200 when the database and Redis answer."""
    checks = {"database": check_database(), "redis": check_redis()}
    body = {
        "status": "ok" if not any(checks.values()) else "unavailable",
        "checks": {name: (problem or "ok") for name, problem in checks.items()},
    }
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400: a body over DATA_UPLOAD_MAX_MEMORY_SIZE on any page is 413 (Django answers
    every suspicious request 400); the API answers its own 413 (core.api)."""
    if isinstance(exception, RequestDataTooBig):
        return HttpResponse("The request body is larger than the limit.\n", status=413,
                            content_type="text/plain; charset=utf-8")
    return defaults.bad_request(request, exception or Exception())
