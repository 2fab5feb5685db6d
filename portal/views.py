from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from portal.health import check_database, check_redis
from portal.roles import Capability, role_required
from portal.selectors import dashboard_summary


@role_required(Capability.VIEW)
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "portal/dashboard.html", {"summary": dashboard_summary()})


@never_cache
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for load balancers and compose: 200 when the database and Redis answer."""
    checks = {"database": check_database(), "redis": check_redis()}
    body = {
        "status": "ok" if not any(checks.values()) else "unavailable",
        "checks": {name: (problem or "ok") for name, problem in checks.items()},
    }
    return JsonResponse(body, status=200 if body["status"] == "ok" else 503)
