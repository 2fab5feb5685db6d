"""The guardian's part of a launch (lanes.liveness rules): the memory guard while the engine
starts, and the smoke prompt before the lane turns serving.

Seed 004: at 0.87 both Sparks froze and needed a power cycle; start-up is when memory falls
fastest. So while a launch waits for health, every node of the lane is read at a short
interval, and below the floor the engine on that node is stopped gracefully (the stop plan's
SIGINT, wait, SIGKILL: its container stays for inspection) before the node wedges."""

from __future__ import annotations

import json
import shlex
import time

import httpx
from django.conf import settings

from core.http import http_client
from jobs.runner import JobContext, JobFailed
from jobs.transports import NodeEndpoint, TransportError
from lanes.liveness import SMOKE_MAX_TOKENS, SMOKE_PROMPT, SMOKE_RULE, memory_floor_problem, smoke_problem
from lanes.plan_shell import MEMINFO_COMMAND
from lanes.plans import Plan, PlanStep

KIB_PER_GIB = 1024 * 1024
GRACEFUL_STOP_STEPS = ("stop.sigint.", "stop.wait.", "stop.kill.")
SMOKE_TIMEOUT_S = 60.0


def graceful_stop_steps(plan: Plan, node: str) -> list[PlanStep]:
    """The stop plan's SIGINT, wait and SIGKILL of the engine that runs on `node` (a Ray
    engine's are on its head); nothing if the plan does not use that node."""
    if node not in plan.nodes:
        return []
    return [step for step in plan.steps if step.key.startswith(GRACEFUL_STOP_STEPS)]


class MemoryFloorReached(JobFailed):
    """The memory guard stopped the engine on a node: the launch fails with that reason."""


class LaunchMemoryGuard:
    """Called by the health wait at every poll; reads the nodes at most every interval."""

    def __init__(self, ctx: JobContext, endpoints: dict[str, NodeEndpoint], stop_plan: Plan) -> None:
        self.ctx = ctx
        self.endpoints = endpoints
        self.stop_plan = stop_plan
        self.floor = float(settings.GUARDIAN_MEMORY_FLOOR_GIB)
        self.interval = float(settings.GUARDIAN_MEMORY_INTERVAL_S)
        self.last = 0.0

    @property
    def enabled(self) -> bool:
        return self.floor > 0

    def __call__(self) -> None:
        if not self.enabled or time.monotonic() - self.last < self.interval:
            return
        self.last = time.monotonic()
        for name, endpoint in self.endpoints.items():
            available = self.read_gib(endpoint)
            problem = (
                None
                if available is None
                else memory_floor_problem(node=name, available_gib=available, floor_gib=self.floor)
            )
            if problem:
                self.stop_engine(name)
                raise MemoryFloorReached(f"memory guard: {problem}; stopped the engine on {name}")

    def read_gib(self, endpoint: NodeEndpoint) -> float | None:
        try:
            result = self.ctx.run(endpoint, MEMINFO_COMMAND, timeout_s=10, capture=True, quiet=True)
        except TransportError as exc:
            self.ctx.log(f"memory guard: cannot read MemAvailable ({exc})", node=endpoint.name, stream="stderr")
            return None
        fields = " ".join(result.stdout).split()
        if not result.ok or not fields:
            return None
        return float(fields[0]) / KIB_PER_GIB

    def stop_engine(self, node: str) -> None:
        self.ctx.log(f"memory guard: stopping the engine on {node} before the node wedges", node=node)
        for step in graceful_stop_steps(self.stop_plan, node):
            try:
                self.ctx.run(self.endpoints[step.node], step.command, timeout_s=step.timeout_s)
            except TransportError as exc:
                self.ctx.log(f"memory guard: {step.title} failed ({exc})", node=step.node, stream="stderr")


def smoke_check(ctx: JobContext, plan: Plan) -> str:
    """The deterministic prompt, once healthy: returns what the engine said, or fails the
    launch with the sample. Sent straight to the engine (not through the gateway)."""
    wait = next((step for step in plan.steps if step.kind == "wait_health"), None)
    if wait is None or not settings.GUARDIAN_SMOKE:
        return ""
    text = _smoke_answer(wait)
    problem = smoke_problem(text)
    sample = json.dumps(text[:200])
    if problem:
        raise JobFailed(f"smoke test: {problem} ({SMOKE_RULE}); sample: {sample}")
    ctx.log(f"smoke test: the engine answers {sample}", node=wait.node, stream="stdout")
    return text


def _smoke_answer(wait: PlanStep) -> str:
    base = wait.url.removesuffix("/health")
    body = {
        "model": wait.expect_model,
        "messages": [{"role": "user", "content": SMOKE_PROMPT}],
        "max_tokens": SMOKE_MAX_TOKENS,
        "temperature": 0,
    }
    try:
        with http_client(timeout=SMOKE_TIMEOUT_S) as client:
            response = client.post(f"{base}/v1/chat/completions", json=body)
        if response.status_code != 200:
            raise JobFailed(
                f"smoke test: {base}/v1/chat/completions answered {response.status_code}: "
                f"{shlex.quote(response.text[:200])}"
            )
        content = response.json()["choices"][0]["message"].get("content")
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise JobFailed(f"smoke test: no answer from {base} ({type(exc).__name__}: {exc})") from None
    return str(content or "")
