"""Job kinds plug into the runner here: the one sanctioned way for an app above jobs to add
a kind of job. Each app registers its kinds in its AppConfig.ready() (jobs its own in
jobs/apps.py, benchmarks the benchmark in benchmarks/apps.py); jobs never imports them.

A kind brings its run function and, if it takes parameters of its own, their names and the
validator that cleans them (the shared ones, time_limit_s and reason, stay jobs' own)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jobs.runner import KindFunc

# (params of this kind's own) -> (clean params with defaults, errors by field)
ParamsValidator = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, str]]]


@dataclass(frozen=True)
class RegisteredKind:
    run: KindFunc
    params: frozenset[str] = frozenset()
    validate: ParamsValidator | None = None


KINDS: dict[str, RegisteredKind] = {}


def register_kind(kind: str, run: KindFunc, *, params: Iterable[str] = (),
                  validate: ParamsValidator | None = None) -> None:
    KINDS[kind] = RegisteredKind(run=run, params=frozenset(params), validate=validate)


def registered_kind(kind: str) -> RegisteredKind | None:
    return KINDS.get(kind)


def kind_runners() -> dict[str, KindFunc]:
    return {kind: entry.run for kind, entry in KINDS.items()}
