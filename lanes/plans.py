"""Launch, stop and status plans: pure functions from a lane revision and its nodes'
network reports to the exact ordered commands per node (DESIGN.md §7.3,
reference/spark-ops.md). No I/O here: the jobs app runs the steps, the lane page shows
them as a dry run, and golden tests pin them.

INTERFACE (agreed between lanes and jobs; implementation owned by the lanes app):
the jobs runner executes `plan.steps` in order:
  - kind "shell": run `command` with bash on `node` (the transport quotes nothing more:
    every value inside `command` is already shlex-quoted); if `skip_if` is set, run it
    first and skip the step when it exits 0 (idempotence: work already done);
    non-zero exit → the step fails; `on_failure == "warn"` logs a warning and goes on.
  - kind "wait_health": poll `url` (GET, from the worker) every `poll_s` until it
    returns 200 and, if `models_url` is set, that URL lists `expect_model`; between polls
    run `alive_check` on `node` and fail fast when it exits non-zero (process died);
    give up after `timeout_s`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

StepKind = Literal["shell", "wait_health"]
Phase = Literal["preflight", "containers", "ray", "serve", "wait", "stop", "status"]


@dataclass(frozen=True)
class NodeTarget:
    """What a plan knows about one node of the lane, in rank order (rank 0 = head)."""

    name: str
    address: str  # management address (SSH / API endpoint host)
    runtime: str = "docker"  # the node's container runtime command, split with shlex
    report: Mapping[str, Any] = field(default_factory=dict)  # last network report (jobs' network check)


@dataclass(frozen=True)
class PlanStep:
    key: str  # stable id, e.g. "containers.spark2"
    phase: Phase
    node: str
    title: str  # one line for humans
    command: str = ""  # kind "shell": one bash line, every value quoted
    kind: StepKind = "shell"
    skip_if: str | None = None
    on_failure: Literal["fail", "warn"] = "fail"
    timeout_s: float = 120.0
    # kind "wait_health"
    url: str = ""
    models_url: str = ""
    expect_model: str = ""
    alive_check: str = ""
    poll_s: float = 5.0


@dataclass(frozen=True)
class Plan:
    lane: str
    revision: int
    action: Literal["launch", "stop", "status"]
    steps: tuple[PlanStep, ...]
    warnings: tuple[str, ...] = ()

    def render(self) -> str:
        """The dry run an admin reads before confirming."""
        raise NotImplementedError


def render_launch_plan(config: Mapping[str, Any], nodes: Sequence[NodeTarget]) -> Plan:
    """`config` is a LaneRevision.config snapshot."""
    raise NotImplementedError


def render_stop_plan(config: Mapping[str, Any], nodes: Sequence[NodeTarget]) -> Plan:
    raise NotImplementedError


def render_status_plan(config: Mapping[str, Any], nodes: Sequence[NodeTarget]) -> Plan:
    raise NotImplementedError
