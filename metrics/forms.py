"""Filters of the request log and the usage table: bad input is a clear error naming the
field, never a 500."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from core.validators import INT64_MAX
from gateway.models import RouteReason
from gateway.selectors import LogFilters
from metrics.selectors import USAGE_GROUPS, USAGE_PERIODS


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
            )
        except ValidationError as exc:
            for field, messages in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, messages)
        return data


class UsageForm(forms.Form):
    period = forms.ChoiceField(choices=[(p, p) for p in USAGE_PERIODS], initial="day", required=False)
    by = forms.ChoiceField(choices=[(g, g) for g in USAGE_GROUPS], initial="key", required=False)
    days = forms.IntegerField(min_value=1, max_value=400, initial=30, required=False)
