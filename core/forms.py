"""The users page's forms: they only turn text into values; core.services checks and
saves, and its errors come back onto the fields."""

from __future__ import annotations

from typing import Any

from django import forms

from core.roles import ROLE_CAPABILITIES, Role

NO_ROLE = ""
ROLE_CHOICES = [(role.value, role.value) for role in ROLE_CAPABILITIES] + [(NO_ROLE, "no role")]


def role_from_choice(value: str) -> Role | None:
    return Role(value) if value else None


class UserCreateForm(forms.Form):
    username = forms.CharField(max_length=150, label="User name")
    email = forms.EmailField(required=False)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=Role.VIEWER.value)
    password = forms.CharField(
        required=False, strip=False, widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}),
        help_text="Leave empty to invite: you get a one-time link where they set their own.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            css = "form-select form-select-sm" if isinstance(field.widget, forms.Select) else "form-control form-control-sm"
            field.widget.attrs.setdefault("class", css)


class UserRoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES, required=False)
