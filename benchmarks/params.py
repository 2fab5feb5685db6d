"""A benchmark job's parameters: validated in one place (the service, the API and the page
all come through jobs.params), each bad one refused naming the field and the rule."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils.dateparse import parse_datetime

from core.validators import finite_number, has_control_characters, shown_bound

TARGETS = ("direct", "gateway")
CACHE_MODES = ("cold", "cache_hit")
MAX_LEVELS = 32
MAX_REPLAY_WINDOW = timedelta(days=1)
REPLAY_FIELDS = ("since", "until", "lane", "speed")
DEFAULTS: dict[str, Any] = {
    "targets": ["direct"],
    "cache_mode": "cold",
    "warmup": 0,
    "timeout_s": 600.0,
    "output_tokens": 128,
    "prompt_tokens": 512,
}
# name -> (minimum, maximum, whole number?)
_NUMBERS: dict[str, tuple[float, float, bool]] = {
    "prompt_tokens": (1, 2_000_000, True),
    "output_tokens": (1, 65_536, True),
    "warmup": (0, 100, True),
    "requests_per_level": (1, 100_000, True),
    "duration_s": (1, 86_400, False),
    "timeout_s": (1, 7_200, False),
    "idle_timeout_s": (1, 7_200, False),
    # Goodput's bounds (set by the admin) and the width of the per-time-slice results.
    "slo_ttft_ms": (1, 3_600_000, False),
    "slo_tpot_ms": (0.01, 600_000, False),
    "slice_s": (0.1, 3_600, False),
}
BENCHMARK_PARAMS = (*_NUMBERS, "targets", "cache_mode", "concurrency", "request_rates", "replay", "label")


def _number(name: str, value: Any, errors: dict[str, str]) -> float | int | None:
    low, high, whole = _NUMBERS[name]
    if not finite_number(value):  # NaN, Infinity and 10**400 too: int() and float() raise on them
        errors[name] = "must be a whole number" if whole else "must be a number"
        return None
    if whole and value != int(value):
        errors[name] = "must be a whole number"
        return None
    if not low <= value <= high:
        errors[name] = f"must be between {shown_bound(low)} and {shown_bound(high)}"
        return None
    return int(value) if whole else float(value)


def _levels(name: str, value: Any, whole: bool, low: float, high: float, errors: dict[str, str]) -> list[Any] | None:
    if not isinstance(value, list) or not value:
        errors[name] = "must be a non-empty list"
        return None
    if len(value) > MAX_LEVELS:
        errors[name] = f"must have at most {MAX_LEVELS} levels"
        return None
    clean = []
    for item in value:
        if not finite_number(item) or (whole and item != int(item)):
            errors[name] = "every level must be a whole number" if whole else "every level must be a number"
            return None
        if not low <= item <= high:
            errors[name] = f"every level must be between {shown_bound(low)} and {shown_bound(high)}"
            return None
        clean.append(int(item) if whole else float(item))
    return clean


def validate_benchmark_params(params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """(clean parameters with defaults, errors by field)."""
    errors: dict[str, str] = {}
    clean: dict[str, Any] = dict(DEFAULTS)
    for name, value in params.items():
        if value is not None:
            _clean_one(name, value, clean, errors)
    _check_sweep_shape(params, clean, errors)
    return clean, errors


def _clean_one(name: str, value: Any, clean: dict[str, Any], errors: dict[str, str]) -> None:
    if name in _NUMBERS:
        number = _number(name, value, errors)
        if number is not None:
            clean[name] = number
    elif name == "targets":
        if not isinstance(value, list) or not value or any(item not in TARGETS for item in value) \
                or len(set(value)) != len(value):
            errors[name] = f"must be a list of distinct targets among {', '.join(TARGETS)}"
        else:
            clean[name] = [target for target in TARGETS if target in value]
    elif name == "cache_mode":
        if value not in CACHE_MODES:
            errors[name] = f"must be one of {', '.join(CACHE_MODES)}"
        else:
            clean[name] = value
    elif name in ("concurrency", "request_rates"):
        whole, low, high = (True, 1, 4096) if name == "concurrency" else (False, 0.001, 10_000)
        levels = _levels(name, value, whole, low, high, errors)
        if levels is not None:
            clean[name] = levels
    elif name == "replay":
        replay = _replay(value, errors)
        if replay is not None:
            clean[name] = replay
    elif name == "label":
        if not isinstance(value, str) or len(value) > 100 or has_control_characters(value):
            errors[name] = "must be text of at most 100 characters, without NUL or control characters"
        else:
            clean[name] = value.strip()


def _moment(value: Any) -> datetime | None:
    parsed = parse_datetime(value) if isinstance(value, str) and len(value) <= 64 else None
    return parsed if parsed is not None and parsed.tzinfo is not None else None


def _replay(value: Any, errors: dict[str, str]) -> dict[str, Any] | None:
    """A window of the request log to replay: since/until (ISO 8601 with a time zone), an
    optional lane the rows were served by, and a speed (2 = twice as fast, 0.5 = half)."""
    if not isinstance(value, dict):
        errors["replay"] = "must be an object with since and until"
        return None
    unknown = sorted(set(value) - set(REPLAY_FIELDS))
    if unknown:
        errors["replay"] = f"unknown field {unknown[0]!r} (fields: {', '.join(REPLAY_FIELDS)})"
        return None
    since, until = _moment(value.get("since")), _moment(value.get("until"))
    if since is None or until is None:
        which = "since" if since is None else "until"
        errors["replay"] = f"{which} must be an ISO 8601 date-time with a time zone"
        return None
    if not since < until <= since + MAX_REPLAY_WINDOW:
        errors["replay"] = "until must be after since, at most a day later"
        return None
    lane = value.get("lane")
    if lane is not None and (not isinstance(lane, str) or not 1 <= len(lane) <= 63 or has_control_characters(lane)):
        errors["replay"] = "lane must be a lane name (1 to 63 characters)"
        return None
    speed = value.get("speed", 1.0)
    if not finite_number(speed) or not 0.01 <= speed <= 100:
        errors["replay"] = "speed must be a number between 0.01 and 100"
        return None
    return {"since": since.isoformat(), "until": until.isoformat(), "lane": lane, "speed": float(speed)}


def _check_sweep_shape(params: dict[str, Any], clean: dict[str, Any], errors: dict[str, str]) -> None:
    """What to sweep (concurrency, rates or a replay) and how long a level lasts (requests or
    a duration; a replay lasts its window)."""
    if params.get("replay") is not None:
        for other in ("concurrency", "request_rates", "requests_per_level", "duration_s"):
            if params.get(other) is not None:
                errors[other] = "a replay sends the window's requests on their own schedule: leave it out"
        return
    if "concurrency" in params and "request_rates" in params and params["request_rates"] is not None \
            and params["concurrency"] is not None:
        errors["request_rates"] = "give either concurrency levels or request rates, not both"
    elif "concurrency" not in clean and "request_rates" not in clean and not {"concurrency", "request_rates"} & set(errors):
        errors["concurrency"] = "give the concurrency levels (or request rates, or a replay) to sweep"
    if "requests_per_level" in params and "duration_s" in params and params["requests_per_level"] is not None \
            and params["duration_s"] is not None:
        errors["duration_s"] = "give either requests per level or a duration, not both"
    elif "request_rates" in clean and "requests_per_level" not in clean and "duration_s" not in clean \
            and not {"requests_per_level", "duration_s"} & set(errors):
        errors["requests_per_level"] = "at Poisson arrivals, give requests per level or a duration"
    # Without either, a concurrency level is one wave: as many requests as its concurrency.


@dataclass(frozen=True)
class Level:
    position: int
    target: str
    concurrency: int | None
    request_rate: float | None


def plan_levels(params: dict[str, Any]) -> list[Level]:
    """Each concurrency (or rate) for each target in turn, so direct and gateway figures of a
    level are taken back to back, under the same conditions."""
    values: list[tuple[int | None, float | None]] = (
        [(None, None)] if params.get("replay")  # one replay per target
        else [(None, rate) for rate in params["request_rates"]] if params.get("request_rates")
        else [(int(c), None) for c in params["concurrency"]]
    )
    levels: list[Level] = []
    for concurrency, rate in values:
        for target in params["targets"]:
            levels.append(Level(len(levels), target, concurrency, rate))
    return levels
