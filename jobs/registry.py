"""Job kinds plug into the runner here: the one sanctioned way for an app above jobs to add
a kind of job. Each app registers its kinds in its AppConfig.ready() (jobs its own in
jobs/apps.py, benchmarks the benchmark in benchmarks/apps.py); jobs never imports them.

A kind brings its run function and, if it takes parameters of its own, their names and the
validator that cleans them (the shared ones, time_limit_s and reason, stay jobs' own). It may
also bring how it is relaunched (when starting one is more than a job row: the benchmark's
run row and its `benchmark.start` audit event) and what must happen when a job of it ends in
any final state, `lost` included (the benchmark revokes its run's gateway key)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from core.roles import UserLike
from jobs.models import Job
from jobs.runner import KindFunc

logger = logging.getLogger(__name__)

# (params of this kind's own) -> (clean params with defaults, errors by field)
ParamsValidator = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, str]]]
# (the ended job, the user) -> the new job
Relauncher = Callable[[Job, UserLike | None], Job]
# (the job's id): called once the job is in a final state, whichever process wrote it
EndedHook = Callable[[int], None]


@dataclass(frozen=True)
class RegisteredKind:
    run: KindFunc
    params: frozenset[str] = frozenset()
    validate: ParamsValidator | None = None
    relaunch: Relauncher | None = None
    ended: EndedHook | None = None


KINDS: dict[str, RegisteredKind] = {}


def register_kind(kind: str, run: KindFunc, *, params: Iterable[str] = (),
                  validate: ParamsValidator | None = None, relaunch: Relauncher | None = None,
                  ended: EndedHook | None = None) -> None:
    KINDS[kind] = RegisteredKind(run=run, params=frozenset(params), validate=validate, relaunch=relaunch,
                                 ended=ended)


def kind_ended(job: Job) -> None:
    """The kind's clean-up after a final state; a failing hook is logged, never raised (the
    job's state is written already, and the reaper must go on to the next job)."""
    entry = KINDS.get(job.kind)
    if entry is None or entry.ended is None:
        return
    try:
        entry.ended(job.pk)
    except Exception:
        logger.exception("job %s: the %s kind's clean-up after %s failed", job.pk, job.kind, job.state)


def registered_kind(kind: str) -> RegisteredKind | None:
    return KINDS.get(kind)


def kind_runners() -> dict[str, KindFunc]:
    return {kind: entry.run for kind, entry in KINDS.items()}
