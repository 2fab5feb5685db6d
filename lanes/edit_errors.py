"""How the node and lane services gather field errors: every message for a field once, the
model's own checks after the services' rules."""

from __future__ import annotations

from collections.abc import Sequence

from django.core.exceptions import ValidationError

from lanes.models import Lane, Node

RESERVED_NAMES = ("new",)  # /nodes/new/ and /lanes/new/


def merge_error(errors: dict[str, list[str]], field: str, message: str) -> None:
    errors.setdefault(field, [])
    if message not in errors[field]:
        errors[field].append(message)


def full_clean_into(instance: Node | Lane, errors: dict[str, list[str]], exclude: Sequence[str] = ()) -> None:
    try:
        # Fields that already failed a rule keep that message only.
        instance.full_clean(exclude=[*exclude, *errors], validate_unique=True)
    except ValidationError as exc:
        for field, messages in exc.message_dict.items():
            for message in messages:
                merge_error(errors, field, message)
