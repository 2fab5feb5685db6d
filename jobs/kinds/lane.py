"""Lane kinds: launch, stop, status, restart. They run the lanes app's plans and keep the
lane's observed state in step with each phase (saved, then broadcast)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from jobs.kinds.plan_exec import PlanRunner, StepFailed
from jobs.models import Job, JobKind
from jobs.runner import JobCancelled, JobContext, JobFailed, JobTimedOut
from jobs.transports import TransportError
from lanes.crypto import CredentialError, decrypt_secret
from lanes.models import Lane, LaneState, Node
from lanes.plans import Plan, PlanStep, render_launch_plan, render_status_plan, render_stop_plan
from lanes.secrets import SECRET_MARK, marked_names
from lanes.selectors import plan_targets
from lanes.services import lane_set_desired_state, lane_set_observed_state

# Job parameters that may tune a launch (validated in jobs.params).
CONFIG_OVERRIDES = ("wait_timeout_s", "wait_poll_s")


class LaneJob:
    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx
        job = ctx.job
        if job.lane is None or job.lane_revision is None:
            raise JobFailed("this job has no lane revision to run")
        self.lane: Lane = job.lane
        self.config: dict[str, Any] = dict(job.lane_revision.config)
        for key in CONFIG_OVERRIDES:
            if job.params.get(key) is not None:
                self.config[key] = job.params[key]
        names = list(self.config.get("nodes") or [n.name for n in self.lane.ranked_nodes()])
        try:
            self.targets = plan_targets(names)
        except ValueError as exc:
            raise JobFailed(f"the lane's {exc}") from None
        by_name = {node.name: node for node in Node.objects.filter(name__in=names)}
        self.nodes = [by_name[name] for name in names]
        ctx.sink.add_secrets(self.secret_values())
        if job.kind in (JobKind.LAUNCH, JobKind.RESTART):  # only a launch puts them on a container
            ctx.secret_env = self.decrypt_secret_env()
            ctx.sink.add_secrets(ctx.secret_env.values())
        self.runner = PlanRunner(ctx, self.nodes)

    def secret_values(self) -> list[str]:
        """Plain env values that still look secret (a revision saved before secrets were separated)."""
        env = self.config.get("container_env") or {}
        return [str(v) for k, v in env.items()
                if v != SECRET_MARK and any(w in k.upper() for w in ("TOKEN", "SECRET", "PASSWORD", "KEY"))]

    def decrypt_secret_env(self) -> dict[str, str]:
        """The secrets this revision's plan marks, decrypted here in the worker and nowhere else."""
        wanted = marked_names(self.config.get("container_env") or {})
        stored = Lane.objects.filter(pk=self.lane.pk).values_list("secret_env", flat=True).first() or {}
        missing = [name for name in wanted if name not in stored]
        if missing:
            raise JobFailed(f"secret env {', '.join(missing)} was cleared after revision {self.config.get('revision')}: "
                            "set it again on the lane before launching")
        try:
            return {name: decrypt_secret(stored[name]) for name in wanted}
        except CredentialError as exc:
            raise JobFailed(str(exc)) from None

    def render(self, renderer: Callable[..., Plan]) -> Plan:
        try:
            return renderer(self.config, self.targets)
        except (ValueError, KeyError) as exc:
            raise JobFailed(f"the plan cannot be rendered: {exc}") from None

    def set_state(self, state: str, reason: str) -> None:
        lane_set_observed_state(lane=self.lane, state=state, reason=reason)
        self.ctx.log(f"lane {self.lane.name}: {state}" + (f" ({reason})" if reason else ""))

    # --- kinds --------------------------------------------------------------------------
    def launch(self, plan: Plan | None = None, rows: list[Any] | None = None) -> dict[str, Any]:
        job_id = self.ctx.job.pk
        if plan is None or rows is None:
            plan = self.render(render_launch_plan)
            rows = self.runner.declare(plan)
        self.set_state(LaneState.STARTING, f"launch #{job_id}: preflight")
        current: dict[str, PlanStep] = {}

        def on_phase(step: PlanStep) -> None:
            current["step"] = step
            if step.phase != "preflight":
                self.set_state(LaneState.STARTING, f"launch #{job_id}: {step.phase}")

        try:
            self.runner.run(plan, rows, on_phase=on_phase)
        except (JobCancelled, JobTimedOut) as exc:
            step = current.get("step")
            started = step is not None and step.phase != "preflight"  # preflight only reads
            self.undo_launch("cancelled" if isinstance(exc, JobCancelled) else "timed out", started=started)
            raise
        except (JobFailed, TransportError) as exc:
            failed = exc.step if isinstance(exc, StepFailed) else current.get("step")
            reason = str(exc)
            if failed is not None and failed.phase in ("containers", "ray", "serve", "wait"):
                reason = f"{reason}; {self.left_for_inspection()}"
            self.ctx.log(reason)
            self.set_state(LaneState.FAILED, reason)
            raise JobFailed(reason) from None
        self.set_state(LaneState.SERVING, f"launch #{job_id}: /health and /v1/models answer")
        return {"lane": self.lane.name, "revision": plan.revision, "state": LaneState.SERVING}

    def undo_launch(self, what: str, *, started: bool) -> None:
        """A cancelled or timed-out launch never leaves a lane that says `failed` while its
        engine runs: it stops what it started, or (the admin's choice when cancelling) leaves
        it running and says so."""
        job_id = self.ctx.job.pk
        if not started:
            lane_set_desired_state(lane=self.lane, state="stopped", actor=None)
            self.set_state(LaneState.STOPPED, f"launch #{job_id} {what} in preflight: nothing was started")
            return
        keep = what == "cancelled" and bool(
            Job.objects.filter(pk=job_id).values_list("cancel_keep_running", flat=True).first())
        if keep:
            self.set_state(LaneState.FAILED, f"launch #{job_id} cancelled; the engine may still be running: "
                                             f"{self.left_for_inspection()}")
            return
        self.ctx.log(f"launch {what}: stopping what it started")
        with self.ctx.cleanup(settings.JOBS_CANCEL_CLEANUP_S):
            plan = self.render(render_stop_plan)
            rows = self.runner.declare(plan)
            self.set_state(LaneState.STOPPING, f"launch #{job_id} {what}: stopping what it started")
            try:
                self.runner.run(plan, rows)
            except (JobFailed, TransportError) as exc:
                self.set_state(LaneState.FAILED, f"launch #{job_id} {what}; stopping what it started failed: {exc}; "
                                                 f"{self.left_for_inspection()}")
                return
        lane_set_desired_state(lane=self.lane, state="stopped", actor=None)
        self.set_state(LaneState.STOPPED, f"launch #{job_id} {what}: stopped what it started")

    def left_for_inspection(self) -> str:
        container = self.config.get("container_name") or "vllm_node"
        nodes = ", ".join(node.name for node in self.nodes)
        return (f"containers {container} left on {nodes} for inspection "
                f"(`docker logs {container}`; Stop removes them)")

    def stop(self, plan: Plan | None = None, rows: list[Any] | None = None) -> dict[str, Any]:
        job_id = self.ctx.job.pk
        if plan is None or rows is None:
            plan = self.render(render_stop_plan)
            rows = self.runner.declare(plan)
        self.set_state(LaneState.STOPPING, f"stop #{job_id}")
        try:
            self.runner.run(plan, rows)
        except (JobFailed, TransportError) as exc:
            self.set_state(LaneState.FAILED, f"stop #{job_id} failed: {exc}")
            raise JobFailed(str(exc)) from None
        self.set_state(LaneState.STOPPED, f"stop #{job_id}: containers removed")
        return {"lane": self.lane.name, "state": LaneState.STOPPED}

    def restart(self) -> dict[str, Any]:
        stop_plan = self.render(render_stop_plan)
        launch_plan = self.render(render_launch_plan)
        stop_rows = self.runner.declare(stop_plan)
        launch_rows = self.runner.declare(launch_plan)
        self.stop(stop_plan, stop_rows)
        return self.launch(launch_plan, launch_rows)

    def status(self) -> dict[str, Any]:
        plan = self.render(render_status_plan)

        def no_container_no_health(step: PlanStep) -> str:
            # Polling /health of a lane with no container anywhere would only wait out its timeout.
            if step.kind != "wait_health":
                return ""
            inspected = [s.key for s in plan.steps if s.collect == "container_state"]
            found = [key for key in inspected if self.runner.outcomes.get(key) == "succeeded"]
            return "" if found or not inspected else "no container on any node"

        self.runner.skip = no_container_no_health
        rows = self.runner.declare(plan)
        self.runner.run(plan, rows)
        outcomes = self.runner.outcomes
        containers = {node: text.strip() for node, text in self.runner.collected.get("container_state", {}).items()}
        for step in plan.steps:
            if step.collect == "container_state" and outcomes.get(step.key) != "succeeded":
                containers[step.node] = ""
        healthy = any(outcomes.get(s.key) == "succeeded" for s in plan.steps if s.kind == "wait_health")
        vllm_alive = any(outcomes.get(s.key) == "succeeded" for s in plan.steps if s.collect == "vllm_pid")
        state, reason = reconcile_lane_state(containers, vllm_alive, healthy, self.lane.observed_state)
        self.lane.refresh_from_db(fields=["observed_state"])
        if state != self.lane.observed_state:
            self.set_state(state, f"status #{self.ctx.job.pk}: {reason}")
        else:
            self.ctx.log(f"lane {self.lane.name} is {state}: {reason}")
        return {"lane": self.lane.name, "state": state, "reason": reason, "containers": containers}


def reconcile_lane_state(
    containers: dict[str, str], vllm_alive: bool, healthy: bool, current: str
) -> tuple[str, str]:
    """What really runs → the lane's observed state. `containers` maps node → `docker
    inspect` output ("running 2026-…Z", "exited …") or "" when there is none."""
    running = sorted(node for node, text in containers.items() if text.startswith("running"))
    present = sorted(node for node, text in containers.items() if text)
    if healthy and len(running) == len(containers):
        if current == LaneState.DEGRADED:  # the RDMA watchdog owns degraded mode
            return LaneState.DEGRADED, "serving, still degraded"
        return LaneState.SERVING, "/health and /v1/models answer"
    if not present:
        return LaneState.STOPPED, "no container on any node"
    if healthy:
        return LaneState.FAILED, f"answers, but containers are not running on {', '.join(sorted(set(containers) - set(running)))}"
    if running and vllm_alive and current in (LaneState.STARTING, LaneState.SERVING):
        return LaneState.STARTING, "vLLM is running but not healthy yet"
    if running and vllm_alive:
        return LaneState.FAILED, "vLLM runs but does not answer /health"
    return LaneState.FAILED, f"containers on {', '.join(present)} but no healthy vLLM"


def run_launch(ctx: JobContext) -> dict[str, Any]:
    return LaneJob(ctx).launch()


def run_stop(ctx: JobContext) -> dict[str, Any]:
    return LaneJob(ctx).stop()


def run_restart(ctx: JobContext) -> dict[str, Any]:
    return LaneJob(ctx).restart()


def run_status(ctx: JobContext) -> dict[str, Any]:
    return LaneJob(ctx).status()
