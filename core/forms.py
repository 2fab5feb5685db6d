"""The users page's forms: they only turn text into values; core.services checks and
saves, and its errors come back onto the fields."""

from __future__ import annotations

from typing import Any

from django import forms

from core.roles import ROLE_CAPABILITIES, Role

NO_ROLE = ""
ROLE_CHOICES = [(role.value, role.value) for role in ROLE_CAPABILITIES] + [(NO_ROLE, "no role")]


def style_widgets(form: forms.BaseForm) -> None:
    """The portal's one look for a form's fields (Bootstrap, small): every page's forms use it."""
    for field in form.fields.values():
        widget = field.widget
        if isinstance(widget, forms.CheckboxInput):
            widget.attrs.setdefault("class", "form-check-input")
        elif isinstance(widget, forms.Select):
            widget.attrs.setdefault("class", "form-select form-select-sm")
        else:
            widget.attrs.setdefault("class", "form-control form-control-sm")


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
        style_widgets(self)


class UserRoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES, required=False)
