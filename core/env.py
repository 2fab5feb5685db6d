"""Typed readers for environment variables: every setting comes from here, and a bad
value stops the process with a message naming the variable and the rule. Every name a
reader is asked for is recorded, so that `unknown_variables` can tell a typo (or a variable
that is no longer a setting) from one that is read."""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterable, Mapping
from typing import TypeVar
from urllib.parse import urlparse
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.core.exceptions import ImproperlyConfigured

N = TypeVar("N", int, float)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}

# Every name the readers were asked for in this process (the settings module asks at import).
_READ: set[str] = set()


def _raw(name: str) -> str | None:
    _READ.add(name)
    value = os.environ.get(name)
    return None if value is None else value.strip()


def env_str(name: str, default: str | None = None) -> str:
    value = _raw(name)
    if value is None or value == "":
        if default is None:
            raise ImproperlyConfigured(f"{name}: required, but not set")
        return default
    return value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}: must be one of 1/0, true/false, yes/no, on/off; got {value!r}")


def _env_number(
    name: str, default: N, parse: type[N], rule: str, minimum: N | None, maximum: N | None
) -> N:
    value = _raw(name)
    if value is None or value == "":
        result = default
    else:
        try:
            result = parse(value)
        except ValueError:
            raise ImproperlyConfigured(f"{name}: must be {rule}; got {value!r}") from None
    if minimum is not None and result < minimum:
        raise ImproperlyConfigured(f"{name}: must be at least {minimum}; got {result}")
    if maximum is not None and result > maximum:
        raise ImproperlyConfigured(f"{name}: must be at most {maximum}; got {result}")
    return result


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    return _env_number(name, default, int, "a whole number", minimum, maximum)


def env_float(
    name: str, default: float, *, minimum: float | None = None, maximum: float | None = None
) -> float:
    return _env_number(name, default, float, "a number", minimum, maximum)


def env_list(name: str, default: list[str]) -> list[str]:
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_url(name: str, default: str | None, *, schemes: tuple[str, ...]) -> str:
    value = env_str(name, default)
    parsed = urlparse(value)
    if parsed.scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name}: must be a URL starting with one of {', '.join(s + '://' for s in schemes)}; "
            f"got {value!r}"
        )
    if parsed.scheme not in ("sqlite",) and not parsed.hostname and "unix" not in parsed.scheme:
        raise ImproperlyConfigured(f"{name}: the URL has no host; got {value!r}")
    return value


def env_time_zone(name: str, default: str) -> str:
    """An IANA time zone name (Europe/Berlin, UTC) this machine's zone database knows."""
    value = env_str(name, default)
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ImproperlyConfigured(f"{name}: must be an IANA time zone such as Europe/Berlin or UTC; "
                                   f"got {value!r}") from None
    return value


def env_json_object(name: str, file_name: str) -> dict[str, object]:
    """A JSON object, given inline in `name` or in the file that `file_name` names (not both);
    {} when neither is set."""
    inline, path = env_str(name, ""), env_str(file_name, "")
    if inline and path:
        raise ImproperlyConfigured(f"{name}, {file_name}: set one of them, not both")
    where, text = name, inline
    if path:
        where = f"{file_name} ({path})"
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise ImproperlyConfigured(f"{where}: cannot be read: {exc.strerror}") from None
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{where}: must be a JSON object; not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{where}: must be a JSON object; got a {type(value).__name__}")
    return value


def names_read() -> frozenset[str]:
    """The names the readers have been asked for so far in this process."""
    return frozenset(_READ)


def unknown_variables(
    environ: Mapping[str, str], known: Iterable[str], retired: Mapping[str, str], *, prefix: str = "PORTAL_"
) -> list[str]:
    """One message per variable of `environ` whose name starts with `prefix` and is not in
    `known`: a retired one says what replaced it (`retired`: name -> why it is gone), any other is
    unknown, with the closest known name when one is close (a typo must not be silently ignored)."""
    known_names = {name for name in known if name.startswith(prefix)}
    # Compared without the shared prefix: with it, any two names look alike.
    by_tail = {name[len(prefix):]: name for name in known_names}
    messages = []
    for name in sorted(environ):
        if not name.startswith(prefix) or name in known_names:
            continue
        if name in retired:
            messages.append(f"{name}: {retired[name]}; remove it from the environment")
            continue
        close = difflib.get_close_matches(name[len(prefix):], sorted(by_tail), n=1)
        hint = f"; did you mean {by_tail[close[0]]}?" if close else ""
        messages.append(f"{name}: unknown setting, ignored{hint}")
    return messages
