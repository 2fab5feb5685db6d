"""Filters of the request log and the usage table: bad input is a clear error naming the
field, never a 500."""

from __future__ import annotations

from django import forms

from core.validators import INT64_MAX
from gateway.models import RouteReason
from metrics.selectors import USAGE_GROUPS, USAGE_PERIODS


class RequestLogFilterForm(forms.Form):
    key = forms.IntegerField(required=False, min_value=1, max_value=INT64_MAX, label="API key")
    lane = forms.SlugField(required=False, max_length=63)
    status = forms.IntegerField(required=False, min_value=100, max_value=599, label="HTTP status")
    route = forms.ChoiceField(required=False, choices=[("", "any route"), *RouteReason.choices])
    since = forms.DateTimeField(required=False, label="From (UTC)")
    until = forms.DateTimeField(required=False, label="To (UTC)")
    before = forms.IntegerField(required=False, min_value=1, max_value=INT64_MAX, widget=forms.HiddenInput)

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            self.add_error("until", "Must be after From.")
        return data


class UsageForm(forms.Form):
    period = forms.ChoiceField(choices=[(p, p) for p in USAGE_PERIODS], initial="day", required=False)
    by = forms.ChoiceField(choices=[(g, g) for g in USAGE_GROUPS], initial="key", required=False)
    days = forms.IntegerField(min_value=1, max_value=400, initial=30, required=False)
