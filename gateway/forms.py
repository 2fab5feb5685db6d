from __future__ import annotations

from django import forms
from django.contrib.auth.models import User

from core.forms import style_widgets
from gateway.models import BudgetPeriod, Team
from lanes.models import Lane


class ApiKeyForm(forms.Form):
    name = forms.CharField(max_length=100)
    team = forms.ModelChoiceField(Team.objects.all(), required=False, empty_label="no team",
                                  help_text="Its lanes bound the key's.")
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
    log_prompts = forms.BooleanField(
        required=False, label="Store prompts (secrets redacted)",
        help_text="In the request log (searchable), for router replay and for judged comparisons of a shadow draft.")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        names = list(Lane.objects.values_list("name", flat=True))
        self.fields["allowed_lanes"].choices = [(n, n) for n in names]  # type: ignore[attr-defined]
        self.fields["default_route"].choices = [("auto", "auto (router)"), *[(n, n) for n in names]]  # type: ignore[attr-defined]
        style_widgets(self)


class TeamForm(forms.Form):
    """A team's fields as the page edits them; gateway.team_services checks them (team_create, team_update)."""

    name = forms.CharField(max_length=100)
    allowed_lanes = forms.MultipleChoiceField(required=False, help_text="None selected = every lane.")
    members = forms.MultipleChoiceField(required=False)
    fair_weight = forms.IntegerField(required=False, min_value=1, label="Share of a full lane",
                                     help_text="Weight against other teams waiting for a full lane (empty: unchanged, "
                                               "1 for a new team); its keys share it by their own weights.")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["allowed_lanes"].choices = [(n, n) for n in Lane.objects.values_list("name", flat=True)]  # type: ignore[attr-defined]
        self.fields["members"].choices = [  # type: ignore[attr-defined]
            (n, n) for n in User.objects.filter(is_active=True).order_by("username").values_list("username", flat=True)]
        style_widgets(self)


class BudgetForm(forms.Form):
    """A budget on a team's page: the team's own, or one of its keys'."""

    target = forms.ChoiceField(label="For")
    period = forms.ChoiceField(choices=BudgetPeriod.choices, initial=BudgetPeriod.DAY)
    prompt_tokens = forms.IntegerField(required=False, label="Prompt tokens")
    completion_tokens = forms.IntegerField(required=False, label="Completion tokens")
    total_tokens = forms.IntegerField(required=False, label="Total tokens")

    def __init__(self, *args: object, team: Team, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["target"].choices = [  # type: ignore[attr-defined]
            ("team", "the team (all its keys)"), *[(str(key.pk), f"key {key.name}") for key in team.keys.all()]]
        style_widgets(self)

    def budget_owner(self) -> dict[str, int]:
        target = self.cleaned_data["target"]
        return {"key": int(target)} if target != "team" else {}
