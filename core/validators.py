"""The value rules every model field declares once: the model's full_clean applies them,
so the services (forms, API, Django shell), and the admin site refuse the same values with
the same message. Messages state the rule, never echo the value (it may be 300 digits)."""

from __future__ import annotations

import math
import re
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.deconstruct import deconstructible

CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tab, newline and carriage return are text
MAX_GIB = 1024.0 * 1024  # a pebibyte: far above any node, and keeps every budget sum finite


def has_control_characters(value: object) -> bool:
    """For names used in a lookup before any field is cleaned (PostgreSQL refuses a NUL)."""
    return isinstance(value, str) and bool(CONTROL.search(value))


@deconstructible
class NoControlCharacters:
    message = "Remove the NUL or control characters."

    def __call__(self, value: Any) -> None:
        if isinstance(value, str) and CONTROL.search(value):
            raise ValidationError(self.message, code="control_characters")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoControlCharacters)


@deconstructible
class JsonWithoutNul:
    """PostgreSQL's jsonb cannot hold a NUL in any key or string, nor NaN or Infinity."""

    message = "Remove NUL characters (\\u0000) and non-finite numbers (NaN, Infinity): they cannot be stored."

    def __call__(self, value: Any) -> None:
        if _has_nul(value):
            raise ValidationError(self.message, code="nul_character")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonWithoutNul)


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(key) or _has_nul(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(_has_nul(item) for item in value)
    if isinstance(value, float):
        return not math.isfinite(value)
    return False


@deconstructible
class FiniteNumber:
    """A float field: finite, within [low, high] (low excluded when `low_open`)."""

    def __init__(self, low: float, high: float, low_open: bool = False) -> None:
        self.low, self.high, self.low_open = low, high, low_open

    def __call__(self, value: Any) -> None:
        if value is None:
            return
        # Written out in full: "at most 1048576", never :g's "1.04858e+06".
        lower = f"above {self.low:.15g}" if self.low_open else f"at least {self.low:.15g}"
        message = f"Enter a number {lower} and at most {self.high:.15g}."
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValidationError(message, code="not_a_number")
        if not math.isfinite(value) or value < self.low or (self.low_open and value == self.low) or value > self.high:
            raise ValidationError(message, code="out_of_range")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FiniteNumber) and (self.low, self.high, self.low_open) == (
            other.low, other.high, other.low_open)


def int_range(low: int, high: int, what: str = "a whole number") -> list[Any]:
    message = f"Enter {what} from {low:,} to {high:,}."
    return [MinValueValidator(low, message=message), MaxValueValidator(high, message=message)]


TEXT = [NoControlCharacters()]
JSON = [JsonWithoutNul()]
PORT = int_range(1, 65535, "a port")
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
POSITIVE_INT = int_range(1, INT32_MAX)
POSITIVE_BIGINT = int_range(1, INT64_MAX)
GIB = [FiniteNumber(0, MAX_GIB)]
POSITIVE_GIB = [FiniteNumber(0, MAX_GIB, low_open=True)]
# vLLM reads it as a share of the GPU's memory, whether or not the KV size is fixed.
UTILIZATION = [FiniteNumber(0, 1, low_open=True)]


def whole_number(text: object, high: int = INT64_MAX) -> int | None:
    """A query or form value as a whole number from 0 to `high`, or None: ASCII digits only
    (str.isdigit() also accepts "²", which int() refuses), and never a number no column holds."""
    if not isinstance(text, str) or not text.isascii() or not text.isdigit() or len(text.lstrip("0")) > len(str(high)):
        return None  # past its digits, int() itself refuses 4,300+ digits with a ValueError
    number = int(text)
    return number if number <= high else None


def finite_number(value: object) -> bool:
    """A JSON number a float can hold: not a bool, not NaN or ±Infinity, not an integer past
    a float's range (float(10**400) raises OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def shown_bound(value: float) -> str:
    """A range's end as a person reads it in an error: 2,000,000 (not 2e+06), 0.1, 7,200."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"
