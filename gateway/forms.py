from __future__ import annotations

from django import forms

from lanes.models import Lane


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    allowed_lanes = forms.MultipleChoiceField(required=False, help_text="None selected = every lane.")
    default_route = forms.ChoiceField(initial="auto")
    rpm_limit = forms.IntegerField(required=False, label="Requests / minute")
    tpm_limit = forms.IntegerField(required=False, label="Tokens / minute")
    max_parallel = forms.IntegerField(required=False, label="Max in flight")
    fair_weight = forms.IntegerField(required=False, min_value=1, label="Share of a full lane",
                                     help_text="Weight against other keys waiting for a full lane; empty = 1.")
    priority = forms.ChoiceField(choices=[("interactive", "interactive"), ("batch", "batch")], initial="interactive",
                                 required=False,
                                 help_text="On a full lane, interactive goes first; batch uses the slack.")
    expires_at = forms.DateTimeField(required=False, help_text="YYYY-MM-DD HH:MM (UTC); empty = never.")
    log_prompts = forms.BooleanField(required=False, label="Store prompt text in the request log")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        names = list(Lane.objects.values_list("name", flat=True))
        self.fields["allowed_lanes"].choices = [(n, n) for n in names]  # type: ignore[attr-defined]
        self.fields["default_route"].choices = [("auto", "auto (router)"), *[(n, n) for n in names]]  # type: ignore[attr-defined]
        for field in self.fields.values():  # Bootstrap looks, like the portal's other forms
            widget = field.widget
            if isinstance(widget, forms.CheckboxInput):
                widget.attrs["class"] = "form-check-input"
            elif isinstance(widget, forms.Select):
                widget.attrs["class"] = "form-select form-select-sm"
            else:
                widget.attrs["class"] = "form-control form-control-sm"
