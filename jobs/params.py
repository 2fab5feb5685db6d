"""Job parameters, validated per kind: a bad one is refused naming the field and the rule."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError

from core.validators import finite_number, has_control_characters, shown_bound
from jobs.fabric.commands import COLLECTIVES, SAFE_MAX_BYTES
from jobs.models import JobKind
from jobs.registry import registered_kind

# name -> (kinds it applies to, minimum, maximum)
_NUMBERS: dict[str, tuple[tuple[str, ...], float, float]] = {
    "time_limit_s": (tuple(JobKind.values), 5, settings.JOBS_MAX_TIME_LIMIT_S),
    "wait_timeout_s": ((JobKind.LAUNCH, JobKind.RESTART), 1, 7_200),
    "wait_poll_s": ((JobKind.LAUNCH, JobKind.RESTART), 0.1, 120),
}
_TEXT = {"reason": 200}
# A lane job on one replica only (else every replica, one after another).
REPLICA_KINDS = (JobKind.LAUNCH, JobKind.STOP, JobKind.RESTART, JobKind.STATUS)
MAX_REPLICA_INDEX = 15
_DEVICE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_MATRIX_TESTS = ("write", "read", "send")
# name -> (kinds, minimum, maximum) for the fabric checks' whole numbers.
_FABRIC_INTEGERS: dict[str, tuple[tuple[str, ...], int, int]] = {
    "gid_index": ((JobKind.LATENCY_MATRIX, JobKind.LINK_BANDWIDTH), 0, 255),
    "size": ((JobKind.LATENCY_MATRIX,), 1, 65536),
    "iterations": ((JobKind.LATENCY_MATRIX, JobKind.LINK_BANDWIDTH), 100, 1_000_000),
    "base_port": ((JobKind.LATENCY_MATRIX, JobKind.LINK_BANDWIDTH), 1024, 64000),
    "min_bytes": ((JobKind.NCCL_TEST,), 1024, SAFE_MAX_BYTES),
    # Above 4 GiB refused: the playbook's 16 GB size allocates ~32 GB per node and can freeze a Spark.
    "max_bytes": ((JobKind.NCCL_TEST,), 1024, SAFE_MAX_BYTES),
}
_FABRIC_THRESHOLDS = {"min_busbw_gbps": (JobKind.NCCL_TEST,), "min_cable_gbps": (JobKind.LINK_BANDWIDTH,)}


def _fabric_param(kind: str, name: str, value: Any) -> tuple[Any, str]:
    """(clean value, error) for a fabric check's parameter; the error names the rule."""
    if name in _FABRIC_INTEGERS or name in _FABRIC_THRESHOLDS:
        return _fabric_number(kind, name, value)
    return _fabric_choice(kind, name, value)


def _fabric_number(kind: str, name: str, value: Any) -> tuple[Any, str]:
    if name in _FABRIC_INTEGERS:
        kinds, low, high = _FABRIC_INTEGERS[name]
        if kind not in kinds:
            return None, f"does not apply to a {kind} job"
        if isinstance(value, bool) or not isinstance(value, int):
            return None, "must be a whole number"
        if not low <= value <= high:
            return None, f"must be between {shown_bound(low)} and {shown_bound(high)}"
        return value, ""
    if name in _FABRIC_THRESHOLDS:
        if kind not in _FABRIC_THRESHOLDS[name]:
            return None, f"does not apply to a {kind} job"
        if not finite_number(value) or not 1 <= value <= 800:
            return None, "must be a number of Gb/s between 1 and 800"
        return float(value), ""
    return None, "unknown parameter"


def _fabric_choice(kind: str, name: str, value: Any) -> tuple[Any, str]:
    if name == "device":
        if kind != JobKind.LATENCY_MATRIX:
            return None, f"does not apply to a {kind} job"
        if not isinstance(value, str) or not _DEVICE.match(value):
            return None, "must be a RoCE device name such as rocep1s0f0"
        return value, ""
    if name == "tests":
        if kind != JobKind.LATENCY_MATRIX:
            return None, f"does not apply to a {kind} job"
        if not isinstance(value, list) or not value or any(item not in _MATRIX_TESTS for item in value):
            return None, f"must be a non-empty list of {', '.join(_MATRIX_TESTS)}"
        return [test for test in _MATRIX_TESTS if test in value], ""
    if name == "collective":
        if kind != JobKind.NCCL_TEST:
            return None, f"does not apply to a {kind} job"
        if not isinstance(value, str) or value not in COLLECTIVES:  # a list is not hashable
            return None, f"must be one of {', '.join(COLLECTIVES)}"
        return value, ""
    return None, "unknown parameter"


def default_time_limit(kind: str, params: dict[str, Any]) -> float:
    if kind in (JobKind.LAUNCH, JobKind.RESTART):
        wait = float(params.get("wait_timeout_s") or settings.JOBS_LAUNCH_WAIT_DEFAULT_S)
        return min(wait + settings.JOBS_DEFAULT_TIME_LIMIT_S, settings.JOBS_MAX_TIME_LIMIT_S)
    return min(float(settings.JOBS_DEFAULT_TIME_LIMIT_S), settings.JOBS_MAX_TIME_LIMIT_S)


def validate_params(kind: str, params: dict[str, Any]) -> dict[str, Any]:
    plugged = registered_kind(kind)
    if kind not in JobKind.values or plugged is None:
        raise ValidationError({"kind": f"must be one of {', '.join(JobKind.values)}"})
    errors: dict[str, str] = {}
    clean: dict[str, Any] = {}
    if plugged.validate is not None:
        clean, errors = plugged.validate({name: value for name, value in params.items() if name in plugged.params})
    for name, value in params.items():
        if value is None or name in plugged.params:
            continue
        if name in _NUMBERS or name == "replica" or name in _TEXT:
            cleaned, error = _job_param(kind, name, value)
            if not error:
                clean[name] = cleaned
        else:
            clean[name], error = _fabric_param(kind, name, value)
        if error:
            errors[name] = error
    if "min_bytes" in clean and "max_bytes" in clean and clean["min_bytes"] > clean["max_bytes"]:
        errors["min_bytes"] = "must not exceed max_bytes"
    if errors:
        raise ValidationError(errors)
    if kind in (JobKind.LAUNCH, JobKind.RESTART) and "wait_timeout_s" not in clean:
        pass  # the lane's own wait timeout applies (plan default 2400 s)
    clean.setdefault("time_limit_s", default_time_limit(kind, clean))
    return clean


def _job_param(kind: str, name: str, value: Any) -> tuple[Any, str]:
    """(clean value, error) for the parameters of every kind: time limits and waits, replica, reason."""
    if name in _NUMBERS:
        kinds, low, high = _NUMBERS[name]
        if kind not in kinds:
            return None, f"does not apply to a {kind} job"
        if not finite_number(value):  # NaN, Infinity, 10**400: float() cannot compare or hold them
            return None, "must be a number of seconds"
        if not low <= float(value) <= high:
            return None, f"must be between {shown_bound(low)} and {shown_bound(high)} seconds"
        return float(value), ""
    if name == "replica":
        if kind not in REPLICA_KINDS:
            return None, f"does not apply to a {kind} job"
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_REPLICA_INDEX:
            return None, f"must be a replica number from 0 to {MAX_REPLICA_INDEX}"
        return value, ""
    if not isinstance(value, str) or len(value) > _TEXT[name] or has_control_characters(value):
        return None, f"must be text of at most {_TEXT[name]} characters, without NUL or control characters"
    return value, ""
