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


# Sections of DESIGN.md not built yet: their pages say so plainly
# instead of a 404 or a page that pretends.
PLANNED_SECTIONS = {
    "routing": {
        "title": "Routing",
        "summary": "The semantic router (prototypes, test a prompt, evaluate a draft, publish, roll back) is not built yet.",
        "today": [
            'API clients that send model="auto" are routed to the lane named by PORTAL_GATEWAY_DEFAULT_LANE '
            "(or the first serving lane when it is unset); the response headers x-spark-lane and "
            "x-spark-route-reason say so.",
            "A lane's name or served model name in `model` always goes to that lane.",
            "Gateway traffic, API keys and request logs are on the Gateway page.",
        ],
    },
    "benchmarks": {
        "title": "Benchmarks",
        "summary": "Benchmark jobs (concurrency sweeps, cold and cache-hit runs, side-by-side results) are not built yet.",
        "today": [
            "Each lane's live state and its jobs (launch, stop, status, network check) are on the Lanes and Jobs pages.",
            "bench/sparksim_load.py measures a simulated engine under 200 streams; bench/gateway_overhead.py "
            "measures the gateway; their latest figures are in the README.",
        ],
    },
}


@role_required(Capability.VIEW)
def planned_page(request: HttpRequest, section: str) -> HttpResponse:
    return render(request, "portal/planned.html", {"section": PLANNED_SECTIONS[section]})
