"""Metrics pages and the Prometheus exposition. Charts load their history once from the API
(metrics/api.py), then follow the dashboard socket's metrics.tick events (no polling)."""

from __future__ import annotations

import hmac
import itertools
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponsePermanentRedirect
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from core.responses import csv_stream_response
from core.roles import Capability, role_required, user_can
from gateway.models import ApiKey, RequestLog, Team
from gateway.selectors import request_log_list, teams_visible_to, usage_key_ids
from lanes.models import Lane, Node
from metrics.alerts import alert_acknowledge, thresholds_from_settings
from metrics.charts import CHART_RANGES, gateway_chart
from metrics.exposition import render_metrics
from metrics.forms import CostModelForm, RequestLogFilterForm, UsageForm
from metrics.models import Alert, AlertState, TargetKind
from metrics.rules import RULE_LABELS, rule_table
from metrics.selectors import (
    GATEWAY_RANGES,
    LANE_CHARTS,
    NODE_CHARTS,
    SERIES_LABELS,
    gateway_live,
    gateway_summary,
)
from metrics.usage import (
    COST_FIELDS,
    USAGE_COLUMNS,
    UsageQuery,
    cost_model,
    cost_model_set,
    usage_series,
    usage_table,
    usage_table_rows,
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


@role_required(Capability.VIEW)
def usage_page(request: HttpRequest, fmt: str = "html") -> HttpResponseBase:
    """Usage over time (charts per team, key, lane or model, hour or day buckets, with cost)
    and per period (the table). Admins see every key's; others their teams' keys only."""
    form = UsageForm(request.GET)
    context: dict[str, Any] = {"form": form, "rows": [], "teams": teams_visible_to(request.user)}
    if not form.is_valid():
        return render(request, "metrics/usage.html", context, status=400)
    data = form.cleaned_data
    key_ids = usage_key_ids(request.user, team_id=data["team"])
    since = timezone.now() - timedelta(days=data["days"])
    period, by = data["period"], data["by"]
    if fmt == "csv":
        columns = ["period", by, *USAGE_COLUMNS]
        rows = usage_table_rows(period=period, group=by, since=since, key_ids=key_ids)
        return csv_stream_response(itertools.chain([columns], ([row[c] for c in columns] for row in rows)),
                                   filename=f"usage-by-{by}-per-{period}.csv")
    series = usage_series(UsageQuery(bucket=data["bucket"], by=data["chart"], days=data["days"], key_ids=key_ids))
    return render(request, "metrics/usage.html", {
        **context, "rows": usage_table(period=period, group=by, since=since, key_ids=key_ids), "period": period,
        "by": by, "days": data["days"], "series": series, "key_ids": None if key_ids is None else sorted(key_ids),
        "user_can_operate": user_can(request.user, Capability.OPERATE),
        "cost_form": CostModelForm(initial={name: getattr(cost_model(), name) for name in COST_FIELDS}),
        "query_string": urlencode({"bucket": data["bucket"], "by": data["chart"], "days": data["days"],
                                   **({"team": data["team"]} if data["team"] else {})})})


@require_POST
@role_required(Capability.OPERATE)
def cost_model_page(request: HttpRequest) -> HttpResponse:
    """The usage page's cost model form (admins): validated by the model's rules, audited."""
    form = CostModelForm(request.POST)
    if form.is_valid():
        try:
            cost_model_set(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            messages.success(request, "Cost model saved: every cost on the usage page uses it now.")
            return redirect("metrics:usage")
    return render(request, "metrics/cost_model.html", {"form": form}, status=400)


@role_required(Capability.OPERATE)
def requests_page(request: HttpRequest, fmt: str = "html") -> HttpResponseBase:
    """The request log: the gateway's filters (request id, key, team, lane, status, route,
    time range, words of stored prompts), newest first, PAGE_SIZE a page by keyset (no COUNT
    over a table of tens of millions of rows); as CSV every matching row, streamed."""
    form = RequestLogFilterForm(request.GET or None)
    context: dict[str, Any] = {"form": form, "keys": ApiKey.objects.order_by("name"),
                               "teams": Team.objects.order_by("name"), "rows": [], "next_before": None}
    if request.GET and not form.is_valid():
        return render(request, "metrics/requests.html", context, status=400)
    before = form.cleaned_data.get("before") if request.GET else None
    if fmt == "csv":
        matching = request_log_list(filters=form.filters, limit=None, before_id=before).iterator(chunk_size=2000)
        return csv_stream_response(itertools.chain([REQUEST_CSV_COLUMNS], (request_csv_row(row) for row in matching)),
                                   filename="requests.csv")
    rows = list(request_log_list(filters=form.filters, limit=PAGE_SIZE + 1, before_id=before))
    context["rows"] = rows[:PAGE_SIZE]
    if len(rows) > PAGE_SIZE:
        query = request.GET.copy()
        query["before"] = str(rows[PAGE_SIZE - 1].id)
        context["next_before"] = query.urlencode()
    return render(request, "metrics/requests.html", context)


REQUEST_CSV_COLUMNS = ["created_at", "request_id", "key", "endpoint", "requested_model", "lane", "replica",
                       "route_reason", "status", "error_code", "stream", "prompt_tokens", "completion_tokens",
                       "usage_source", "ttft_ms", "latency_ms", "upstream_ms", "queue_ms", "prompt_text"]


def request_csv_row(row: RequestLog) -> list[object]:
    values = {name: getattr(row, name) for name in REQUEST_CSV_COLUMNS if name not in ("created_at", "key")}
    return [row.created_at.isoformat(), row.request_id, row.key.name if row.key else "",
            *(values[name] for name in REQUEST_CSV_COLUMNS[3:])]


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
