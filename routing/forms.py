from __future__ import annotations

from typing import Any

from django import forms

from core.forms import style_widgets
from lanes.selectors import lane_list
from routing.imports import FORMATS
from routing.models import Aggregation


class PrototypeForm(forms.Form):
    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))
    label = forms.CharField(max_length=64, help_text="e.g. long_reasoning")
    enabled = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        style_widgets(self)


class ImportForm(forms.Form):
    file = forms.FileField()
    format = forms.ChoiceField(choices=[(f, f.upper()) for f in FORMATS])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        style_widgets(self)


class VersionForm(forms.Form):
    threshold = forms.FloatField(min_value=0, max_value=1, help_text="Cosine similarity a label must reach.")
    aggregation = forms.ChoiceField(choices=Aggregation.choices)
    probability_floor = forms.FloatField(
        min_value=0, max_value=1, required=False, label="Probability floor",
        help_text="Learned aggregation: below this probability for the best lane, the default lane.")
    top_k = forms.IntegerField(min_value=1, max_value=50, label="top-k", help_text="For the mean of the top-k.")
    label_lanes = forms.CharField(widget=forms.Textarea(attrs={"rows": 9}), label="Label → lane",
                                  help_text="One `label = lane` per line.")
    default_lane = forms.ChoiceField(help_text="Below the threshold.")
    note = forms.CharField(max_length=200, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["default_lane"].choices = [(n, n) for n in lane_list().values_list("name", flat=True)]  # type: ignore[attr-defined]
        style_widgets(self)

    def clean_label_lanes(self) -> dict[str, str]:
        mapping: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["label_lanes"].splitlines(), start=1):
            if not line.strip():
                continue
            label, sep, lane = line.partition("=")
            if not sep or not label.strip() or not lane.strip():
                raise forms.ValidationError(f"Line {number}: write `label = lane`.")
            mapping[label.strip()] = lane.strip()
        return mapping


def label_lanes_text(mapping: dict[str, str]) -> str:
    return "\n".join(f"{label} = {lane}" for label, lane in sorted(mapping.items()))


class PlaygroundForm(forms.Form):
    prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}), max_length=20_000)
    version = forms.ChoiceField(required=False)

    def __init__(self, *args: Any, versions: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["version"].choices = versions  # type: ignore[attr-defined]
        style_widgets(self)
