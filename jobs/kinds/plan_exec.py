"""Executing a lanes plan (lanes/plans.py docstring): shell steps with skip_if and
on_failure, wait_health polling from the worker with a fail-fast alive check."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from core.http import http_client
from jobs.models import JobStep, StepState
from jobs.runner import JobContext, JobFailed
from jobs.transports import NodeEndpoint, TransportError
from lanes.models import Node
from lanes.plans import Plan, PlanStep, check_image_ids


class StepFailed(JobFailed):
    def __init__(self, step: PlanStep, message: str) -> None:
        super().__init__(message)
        self.step = step


HEALTH_POLL_TIMEOUT_S = 5.0


def health_probe(client: httpx.Client, url: str, models_url: str, expect_model: str) -> tuple[bool, str]:
    """One poll: (healthy, what we saw)."""
    try:
        health = client.get(url)
        if health.status_code != 200:
            return False, f"/health answered {health.status_code}"
        if not models_url:
            return True, "/health 200"
        models = client.get(models_url)
        if models.status_code != 200:
            return False, f"/v1/models answered {models.status_code}"
        ids = [m.get("id") for m in models.json().get("data", []) if isinstance(m, dict)]
        if expect_model and expect_model not in ids:
            return False, f"/v1/models lists {ids}, not {expect_model!r} yet"
        return True, f"/health 200, /v1/models lists {expect_model or ids}"
    except (httpx.HTTPError, ValueError, json.JSONDecodeError) as exc:
        return False, f"not answering yet ({type(exc).__name__})"


class PlanRunner:
    def __init__(self, ctx: JobContext, nodes: list[Node], skip: Callable[[PlanStep], str] | None = None) -> None:
        self.ctx = ctx
        self.skip = skip  # a kind's own reason to skip a step ("" = run it)
        self.endpoints: dict[str, NodeEndpoint] = {node.name: ctx.endpoint(node) for node in nodes}
        self.collected: dict[str, dict[str, str]] = {}
        self.outcomes: dict[str, str] = {}  # step key -> final step state
        # Called at every health poll (the launch's memory guard: jobs.kinds.lane_guard).
        self.watch: Callable[[], None] | None = None
        self.watch_interval_s = float("inf")

    def declare(self, plan: Plan) -> list[JobStep]:
        for warning in plan.warnings:
            self.ctx.log(f"warning: {warning}")
        return self.ctx.declare_steps([(s.key, s.phase, s.node, s.title) for s in plan.steps])

    def run(self, plan: Plan, rows: list[JobStep], on_phase: Any = None) -> None:
        phase = None
        for step, row in zip(plan.steps, rows, strict=True):
            if step.phase != phase and on_phase is not None:
                phase = step.phase
                on_phase(step)
            self.run_step(step, row)
        images = self.collected.get("image_id")
        if images and len(images) > 1:
            problem = check_image_ids(images)
            if problem:
                raise JobFailed(problem)

    def run_step(self, step: PlanStep, row: JobStep) -> None:
        ctx = self.ctx
        endpoint = self.endpoints[step.node]
        with ctx.step(row):
            try:
                reason = self.skip(step) if self.skip is not None else ""
                if reason:
                    ctx.log(f"skipped: {reason}", node=step.node)
                    row.state = StepState.SKIPPED
                    self.outcomes[step.key] = row.state
                    return
                if step.skip_if:
                    check = ctx.run(endpoint, step.skip_if, timeout_s=min(step.timeout_s, 60), quiet=True)
                    if check.ok:
                        ctx.log(f"skipped: already done ({step.skip_if})", node=step.node)
                        row.state = StepState.SKIPPED
                        self.outcomes[step.key] = row.state
                        return
                if step.kind == "wait_health":
                    self.wait_health(step, endpoint)
                else:
                    if step.quiet:
                        ctx.log(f"{step.title} (output kept, not logged)", node=step.node)
                    result = ctx.run(endpoint, step.command, stdin=step.stdin or None, timeout_s=step.timeout_s,
                                     capture=bool(step.collect), quiet=step.quiet)
                    row.exit_code = result.exit_code
                    if step.collect:
                        self.collected.setdefault(step.collect, {})[step.node] = "\n".join(result.stdout)
                    if not result.ok:
                        raise StepFailed(step, f"{step.title} [{step.node}]: exited {result.exit_code}")
                self.outcomes[step.key] = StepState.SUCCEEDED
            except StepFailed as exc:
                if step.on_failure != "warn":
                    self.outcomes[step.key] = StepState.FAILED
                    raise
                ctx.log(f"warning: {exc} (on failure: warn, going on)", node=step.node)
                row.detail = str(exc)[:2000]
                row.state = StepState.WARNED
                self.outcomes[step.key] = row.state

    def show_engine_log(self, step: PlanStep, endpoint: NodeEndpoint) -> None:
        """Why the engine died (seed 004's second start failed after loading) belongs on the
        job page, not only in `docker logs` on the node."""
        if not step.logs_on_failure:
            return
        self.ctx.log(f"the engine's last lines ($ {step.logs_on_failure}):", node=step.node)
        try:
            self.ctx.run(endpoint, step.logs_on_failure, timeout_s=30, quiet=False)
        except TransportError as exc:
            self.ctx.log(f"could not read the engine's log: {exc}", node=step.node, stream="stderr")

    def wait_health(self, step: PlanStep, endpoint: NodeEndpoint) -> None:
        with http_client(timeout=HEALTH_POLL_TIMEOUT_S) as client:
            self._poll_health(client, step, endpoint)

    def _poll_health(self, client: httpx.Client, step: PlanStep, endpoint: NodeEndpoint) -> None:
        ctx = self.ctx
        deadline = time.monotonic() + step.timeout_s
        last = ""
        polls = 0
        while True:
            ok, seen = health_probe(client, step.url, step.models_url, step.expect_model)
            if ok:
                ctx.log(f"healthy: {seen}", node=step.node, stream="stdout")
                return
            if self.watch is not None:
                self.watch()
            polls += 1
            if seen != last or polls % 6 == 0:
                ctx.log(f"waiting: {seen}", node=step.node)
                last = seen
            if step.alive_check:
                alive = ctx.run(endpoint, step.alive_check, timeout_s=30, quiet=True)
                if not alive.ok:
                    self.show_engine_log(step, endpoint)
                    raise StepFailed(step, f"the vLLM process on {step.node} died before becoming healthy "
                                           f"(`{step.alive_check}` exited {alive.exit_code})")
            if time.monotonic() >= deadline:
                self.show_engine_log(step, endpoint)
                raise StepFailed(step, f"not healthy after {step.timeout_s:g}s: {seen}")
            ctx.sleep(min(step.poll_s, self.watch_interval_s, max(deadline - time.monotonic(), 0.05)))
