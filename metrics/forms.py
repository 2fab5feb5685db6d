"""Filters of the request log and the usage table: bad input is a clear error naming the
field, never a 500."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from core.validators import INT64_MAX
from gateway.models import RouteReason
from gateway.selectors import LogFilters
from metrics.usage import BUCKETS, USAGE_BY, USAGE_GROUPS, USAGE_PERIODS, UsageQuery


class RequestLogFilterForm(forms.Form):
    """The request log page's query string, read into the gateway's one filter (LogFilters,
    which also holds the status rule and the time range's): `filters` once valid."""

    key = forms.IntegerField(required=False, min_value=1, max_value=INT64_MAX, label="API key")
    team = forms.IntegerField(required=False, min_value=1, max_value=INT64_MAX, label="Team")
    lane = forms.SlugField(required=False, max_length=63)
    status = forms.CharField(required=False, max_length=16, label="Status")
    route = forms.ChoiceField(required=False, choices=[("", "any route"), *RouteReason.choices])
    since = forms.DateTimeField(required=False, label="From (UTC)")
    until = forms.DateTimeField(required=False, label="To (UTC)")
    request_id = forms.CharField(required=False, max_length=40, label="Request id")
    text = forms.CharField(required=False, max_length=200, label="Prompt contains", strip=False)
    before = forms.IntegerField(required=False, min_value=1, max_value=INT64_MAX, widget=forms.HiddenInput)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filters = LogFilters()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # Fields that did not parse are left out, so the rules of the others still speak.
        try:
            self.filters = LogFilters(
                key_id=data.get("key"), team_id=data.get("team"), lane=data.get("lane") or "", status=(data.get("status") or "").strip(),
                route=data.get("route") or "", since=data.get("since"), until=data.get("until"),
                request_id=(data.get("request_id") or "").strip(), text=data.get("text") or "",
            )
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, messages)
        return data


class UsageForm(forms.Form):
    """The usage page's query string: the table's period and grouping, the charts' bucket and
    grouping, the days both cover, a team (its keys only). `query` once valid (UsageQuery
    holds the charts' rules: hour buckets cover at most 2 days, 6 hours 90)."""

    period = forms.ChoiceField(choices=[(p, p) for p in USAGE_PERIODS], initial="day", required=False)
    by = forms.ChoiceField(choices=[(g, g) for g in USAGE_GROUPS], initial="key", required=False)
    days = forms.IntegerField(min_value=1, max_value=400, initial=30, required=False)
    bucket = forms.ChoiceField(choices=[(b, b) for b in BUCKETS], initial="day", required=False)
    chart = forms.ChoiceField(choices=[(b, b) for b in USAGE_BY], initial="key", required=False, label="charts by")
    team = forms.IntegerField(required=False, min_value=1, max_value=INT64_MAX)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name in ("period", "by", "bucket", "chart"):
            data[name] = data.get(name) or self.fields[name].initial
        if "days" in data:
            data["days"] = data["days"] or 30
            try:
                UsageQuery(bucket=data["bucket"], by=data["chart"], days=data["days"])
            except ValidationError as exc:
                for field, messages in exc.message_dict.items():
                    self.add_error(field if field in self.fields else None, messages)
        return data


class CostModelForm(forms.Form):
    """The cost model's fields; their ranges are the model's (metrics.usage.cost_model_set)."""

    currency = forms.CharField(max_length=3)
    node_hour_amortization = forms.FloatField(label="Amortization per node-hour")
    watts_per_node = forms.FloatField(label="Power per node (W)")
    price_per_kwh = forms.FloatField(label="Price per kWh")
