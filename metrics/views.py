"""Metrics pages and the Prometheus exposition. Charts load their history once from the API
(metrics/api.py), then follow the dashboard socket's metrics.tick events (no polling)."""

from __future__ import annotations

import hmac
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from core.responses import csv_response
from core.roles import Capability, role_required, user_can
from gateway.models import ApiKey, RequestLog, Team
from gateway.selectors import request_log_list
from lanes.models import Lane, Node
from metrics.alerts import alert_acknowledge, thresholds_from_settings
from metrics.charts import CHART_RANGES, gateway_chart
from metrics.exposition import render_metrics
from metrics.forms import RequestLogFilterForm, UsageForm
from metrics.models import Alert, AlertState, TargetKind
from metrics.rules import RULE_LABELS, rule_table
from metrics.selectors import (
    GATEWAY_RANGES,
    LANE_CHARTS,
    NODE_CHARTS,
    SERIES_LABELS,
    gateway_live,
    gateway_summary,
    usage_table,
)

PAGE_SIZE = 50


@never_cache
def prometheus_metrics(request: HttpRequest) -> HttpResponse:
    """For Prometheus: `Authorization: Bearer <PORTAL_METRICS_TOKEN>`; off (404) without a token."""
    token = settings.METRICS_TOKEN
    if not token:
        raise Http404("PORTAL_METRICS_TOKEN is not set: /metrics is off.")
    sent = request.headers.get("Authorization", "")
    if not hmac.compare_digest(sent.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("A valid bearer token is required.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(render_metrics(), content_type="text/plain; version=0.0.4; charset=utf-8")


def _chart_context(kind: str, name: str, charts: Any) -> dict[str, Any]:
    return {
        "kind": kind, "name": name, "charts": [{"title": t, "series": list(s)} for t, s in charts],
        "ranges": [{"key": r.key, "label": r.label} for r in CHART_RANGES.values()],
        "series_labels": SERIES_LABELS,
    }


@role_required(Capability.VIEW)
def lane_charts(request: HttpRequest, name: str) -> HttpResponse:
    lane = get_object_or_404(Lane, name=name)
    return render(request, "metrics/charts.html", {**_chart_context(TargetKind.LANE, lane.name, LANE_CHARTS),
                                                   "state": lane.observed_state, "back": f"/lanes/{lane.name}/"})


@role_required(Capability.VIEW)
def node_charts(request: HttpRequest, name: str) -> HttpResponse:
    node = get_object_or_404(Node, name=name)
    return render(request, "metrics/charts.html", {**_chart_context(TargetKind.NODE, node.name, NODE_CHARTS),
                                                   "state": node.state, "back": f"/nodes/{node.name}/"})


@role_required(Capability.OPERATE)
def gateway_page(request: HttpRequest) -> HttpResponse:
    range_key = request.GET.get("range", "24h")
    if range_key not in GATEWAY_RANGES:
        range_key = "24h"
    return render(request, "metrics/gateway.html", {
        "live": gateway_live(), "summary": gateway_summary(range_key), "traffic": gateway_chart(),
        "ranges": list(GATEWAY_RANGES), "range": range_key,
    })


@role_required(Capability.OPERATE)
def usage_page(request: HttpRequest, fmt: str = "html") -> HttpResponse:
    form = UsageForm(request.GET or None)
    if request.GET and not form.is_valid():
        return render(request, "metrics/usage.html", {"form": form, "rows": []}, status=400)
    data = form.cleaned_data if request.GET else {}
    period, by, days = data.get("period") or "day", data.get("by") or "key", data.get("days") or 30
    rows = usage_table(period=period, group=by, since=timezone.now() - timedelta(days=days))
    if fmt == "csv":
        columns = ["period", by, "requests", "errors", "prompt_tokens", "completion_tokens"]
        return csv_response([columns, *([row[c] for c in columns] for row in rows)],
                            filename=f"usage-by-{by}-per-{period}.csv")
    return render(request, "metrics/usage.html", {"form": form, "rows": rows, "period": period, "by": by,
                                                  "days": days})


@role_required(Capability.OPERATE)
def requests_page(request: HttpRequest) -> HttpResponse:
    """The request log: the gateway's filters (key, lane, status, route, time range), newest
    first, PAGE_SIZE a page by keyset (no COUNT over a table of tens of millions of rows)."""
    form = RequestLogFilterForm(request.GET or None)
    context: dict[str, Any] = {"form": form, "keys": ApiKey.objects.order_by("name"),
                               "teams": Team.objects.order_by("name"), "rows": [], "next_before": None}
    if request.GET and not form.is_valid():
        return render(request, "metrics/requests.html", context, status=400)
    before = form.cleaned_data.get("before") if request.GET else None
    rows = list(request_log_list(filters=form.filters, limit=PAGE_SIZE + 1, before_id=before))
    context["rows"] = rows[:PAGE_SIZE]
    if len(rows) > PAGE_SIZE:
        query = request.GET.copy()
        query["before"] = str(rows[PAGE_SIZE - 1].id)
        context["next_before"] = query.urlencode()
    return render(request, "metrics/requests.html", context)


@role_required(Capability.OPERATE)
def requests_moved(request: HttpRequest) -> HttpResponse:
    """/gateway/requests/ (the gateway's former "Recent requests" page) is the request log
    now: its key, lane and status filters have the same names and meanings here."""
    query = request.GET.urlencode()
    return HttpResponsePermanentRedirect(reverse("metrics:requests") + (f"?{query}" if query else ""))


@role_required(Capability.OPERATE)
def request_detail(request: HttpRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(RequestLog.objects.select_related("key"), pk=pk)
    return render(request, "metrics/request_detail.html", {"row": row})


@role_required(Capability.VIEW)
def alerts_page(request: HttpRequest) -> HttpResponse:
    open_alerts = list(Alert.objects.filter(state=AlertState.OPEN).select_related("acknowledged_by")
                       .order_by("-opened_at"))
    history = list(Alert.objects.filter(state=AlertState.RESOLVED).select_related("acknowledged_by")
                   .order_by("-resolved_at")[:200])
    for alert in (*open_alerts, *history):
        alert.rule_label = RULE_LABELS.get(alert.rule, alert.rule)  # type: ignore[attr-defined]
    return render(request, "metrics/alerts.html", {
        "open": open_alerts,
        "history": history,
        "rule_labels": RULE_LABELS, "rules": rule_table(thresholds_from_settings()),
        "webhook_on": bool(settings.METRICS_ALERT_WEBHOOK_URL),
    })


@require_POST
@role_required(Capability.VIEW)
def alert_ack(request: HttpRequest, pk: int) -> HttpResponse:
    alert = get_object_or_404(Alert, pk=pk)
    if not user_can(request.user, Capability.OPERATE):
        raise PermissionDenied("Only an admin may acknowledge alerts.")
    back = str(request.POST.get("next") or "")  # read first: an oversized body is refused before the ack
    alert_acknowledge(alert=alert, actor=request.user)
    # Only a path of this site: not "//host" nor "/\\host" (browsers read both as another host),
    # nor one with a control character or a line break.
    local = back.startswith("/") and not any(ord(c) < 32 or c == "\x7f" for c in back) \
        and url_has_allowed_host_and_scheme(back, allowed_hosts=None, require_https=False)
    return redirect(back if local else "/monitor/alerts/")
