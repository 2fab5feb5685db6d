"""Job parameters, validated per kind: a bad one is refused naming the field and the rule."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from benchmarks.params import BENCHMARK_PARAMS, validate_benchmark_params
from jobs.models import JobKind

# name -> (kinds it applies to, minimum, maximum)
_NUMBERS: dict[str, tuple[tuple[str, ...], float, float]] = {
    "time_limit_s": (tuple(JobKind.values), 5, 86_400),
    "wait_timeout_s": ((JobKind.LAUNCH, JobKind.RESTART), 1, 7_200),
    "wait_poll_s": ((JobKind.LAUNCH, JobKind.RESTART), 0.1, 120),
}
_TEXT = {"reason": 200}


def default_time_limit(kind: str, params: dict[str, Any]) -> float:
    if kind in (JobKind.LAUNCH, JobKind.RESTART):
        wait = float(params.get("wait_timeout_s") or settings.JOBS_LAUNCH_WAIT_DEFAULT_S)
        return wait + settings.JOBS_DEFAULT_TIME_LIMIT_S
    return float(settings.JOBS_DEFAULT_TIME_LIMIT_S)


def validate_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    if kind not in JobKind.values:
        raise ValidationError({"kind": f"must be one of {', '.join(JobKind.values)}"})
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {}
    if kind == JobKind.BENCHMARK:
        clean, errors = validate_benchmark_params(
            {name: value for name, value in params.items() if name in BENCHMARK_PARAMS})
    for name, value in params.items():
        if value is None or (kind == JobKind.BENCHMARK and name in BENCHMARK_PARAMS):
            continue
        if name in _NUMBERS:
            kinds, low, high = _NUMBERS[name]
            if kind not in kinds:
                errors[name] = f"does not apply to a {kind} job"
            elif isinstance(value, bool) or not isinstance(value, int | float):
                errors[name] = "must be a number of seconds"
            elif not low <= float(value) <= high:
                errors[name] = f"must be between {low:g} and {high:g} seconds"
            else:
                clean[name] = float(value)
        elif name in _TEXT:
            if not isinstance(value, str) or len(value) > _TEXT[name]:
                errors[name] = f"must be text of at most {_TEXT[name]} characters"
            else:
                clean[name] = value
        else:
            errors[name] = "unknown parameter"
    if errors:
        raise ValidationError(errors)
    if kind in (JobKind.LAUNCH, JobKind.RESTART) and "wait_timeout_s" not in clean:
        pass  # the lane's own wait timeout applies (plan default 2400 s)
    clean.setdefault("time_limit_s", default_time_limit(kind, clean))
    return clean
