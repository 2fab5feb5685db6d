"""Lane kinds: launch, stop, status, restart. They run the lanes app's plans and keep the
lane's observed state in step with each phase (saved, then broadcast)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from redis.exceptions import RedisError

from jobs.kinds.lane_guard import LaunchMemoryGuard, MemoryFloorReached, smoke_check
from jobs.kinds.plan_exec import PlanRunner, StepFailed
from jobs.models import Job, JobKind
from jobs.runner import JobCancelled, JobContext, JobFailed, JobTimedOut
from jobs.transports import TransportError
from jobs.weights.scan import save_launch_inventories
from lanes.crypto import CredentialError, decrypt_secret
from lanes.lane_states import lane_set_desired_state, lane_set_observed_state
from lanes.models import Lane, LaneReplica, LaneState, Node
from lanes.plans import Plan, PlanStep, render_launch_plan, render_status_plan, render_stop_plan, running_revision
from lanes.replica_health import replica_in_flight
from lanes.secrets import SECRET_MARK, marked_names
from lanes.selectors import plan_targets, replica_configs

# Job parameters that may tune a launch (validated in jobs.params).
CONFIG_OVERRIDES = ("wait_timeout_s", "wait_poll_s")
# How long a replica being stopped may take to finish the requests already sent to it.
DRAIN_TIMEOUT_S = 600.0


class LaneJob:
    """One engine of a lane: the lane itself (a lane of one replica, `replica` None: its
    state is the lane's) or one replica of several (its own state; the lane's follows)."""

    def __init__(self, ctx: JobContext, config: dict[str, Any] | None = None, replica: int | None = None) -> None:
        self.ctx = ctx
        job = ctx.job
        if job.lane is None or job.lane_revision is None:
            raise JobFailed("this job has no lane revision to run")
        self.lane: Lane = job.lane
        self.replica = replica
        self.config: dict[str, Any] = dict(config if config is not None else job.lane_revision.config)
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

    @property
    def label(self) -> str:
        return f"lane {self.lane.name}" + (f" replica {self.replica}" if self.replica is not None else "")

    def set_state(self, state: str, reason: str) -> None:
        lane_set_observed_state(lane=self.lane, state=state, reason=reason, replica=self.replica)
        self.ctx.log(f"{self.label}: {state}" + (f" ({reason})" if reason else ""))

    def drain(self) -> None:
        """Before a replica of several stops: it is marked stopping (every gateway stops
        choosing it as soon as it reloads the lane), then the job waits until the requests
        already sent to it have finished, so a rolling change drops none."""
        if self.replica is None:
            return
        settle = settings.GATEWAY_LANE_CACHE_TTL_S + 2 * settings.GATEWAY_HEALTH_SYNC_S
        self.ctx.log(f"{self.label}: draining (gateways stop sending to it; waiting for requests in flight)")
        self.ctx.sleep(settle)
        deadline = time.monotonic() + float(self.ctx.job.params.get("drain_timeout_s") or DRAIN_TIMEOUT_S)
        quiet = 0
        while quiet < 2:  # two reads in a row, a sync interval apart: no worker still counts one
            try:
                left = replica_in_flight(self.lane.name, self.replica)
            except RedisError as exc:
                self.ctx.log(f"{self.label}: cannot read the gateways' requests in flight ({exc}); stopping it anyway")
                return
            quiet = quiet + 1 if left == 0 else 0
            if left and time.monotonic() > deadline:
                self.ctx.log(f"{self.label}: {left} request(s) still in flight after the drain timeout; stopping it")
                return
            self.ctx.sleep(settings.GATEWAY_HEALTH_SYNC_S * 2)
        self.ctx.log(f"{self.label}: drained")

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

        guard = LaunchMemoryGuard(self.ctx, self.runner.endpoints, self.render(render_stop_plan))
        if guard.enabled:
            self.runner.watch, self.runner.watch_interval_s = guard, guard.interval
        try:
            self.runner.run(plan, rows, on_phase=on_phase)
            smoke_check(self.ctx, plan)
        except MemoryFloorReached as exc:
            self.set_state(LaneState.FAILED, str(exc))
            raise
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
        finally:
            # What the preflight read of each rank: the node pages show it, launch or not.
            save_launch_inventories(self.runner.collected.get("inventory", {}), self.nodes,
                                    str(self.config.get("image") or ""))
        self.set_state(LaneState.SERVING, f"launch #{job_id}: /health and /v1/models answer"
                       + (", the smoke prompt has a sane answer" if settings.GUARDIAN_SMOKE else ""))
        return self.result(revision=plan.revision, state=LaneState.SERVING)

    def undo_launch(self, what: str, *, started: bool) -> None:
        """A cancelled or timed-out launch never leaves a lane that says `failed` while its
        engine runs: it stops what it started, or (the admin's choice when cancelling) leaves
        it running and says so."""
        job_id = self.ctx.job.pk
        if not started:
            if self.replica is None:
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
        if self.replica is None:
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
        self.drain()
        try:
            self.runner.run(plan, rows)
        except (JobFailed, TransportError) as exc:
            self.set_state(LaneState.FAILED, f"stop #{job_id} failed: {exc}")
            raise JobFailed(str(exc)) from None
        self.set_state(LaneState.STOPPED, f"stop #{job_id}: containers removed")
        return self.result(state=LaneState.STOPPED)

    def result(self, **values: Any) -> dict[str, Any]:
        return {"lane": self.lane.name, **({"replica": self.replica} if self.replica is not None else {}), **values}

    def declare_restart(self) -> Callable[[], dict[str, Any]]:
        stop_plan = self.render(render_stop_plan)
        launch_plan = self.render(render_launch_plan)
        stop_rows = self.runner.declare(stop_plan)
        launch_rows = self.runner.declare(launch_plan)

        def run() -> dict[str, Any]:
            self.stop(stop_plan, stop_rows)
            return self.launch(launch_plan, launch_rows)
        return run

    def restart(self) -> dict[str, Any]:
        return self.declare_restart()()

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
        state, reason = reconcile_lane_state(containers, vllm_alive, healthy, self.current_state())
        if state != self.current_state():
            self.set_state(state, f"status #{self.ctx.job.pk}: {reason}")
        else:
            self.ctx.log(f"{self.label} is {state}: {reason}")
        # What runs, from the containers' revision label: after a lost launch the status job is
        # the only record of it (jobs/drift.py reads running_revision).
        found = {running_revision(text) for text in containers.values() if text.startswith("running")}
        revision = found.pop() if len(found) == 1 else None
        if revision is not None:
            self.ctx.log(f"{self.label} runs revision {revision}")
        return self.result(state=state, reason=reason, containers=containers, running_revision=revision)

    def current_state(self) -> str:
        self.lane.refresh_from_db(fields=["observed_state"])
        if self.replica is None:
            return self.lane.observed_state
        row = LaneReplica.objects.filter(lane=self.lane, index=self.replica).first()
        return row.observed_state if row is not None else LaneState.STOPPED


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


def lane_jobs(ctx: JobContext) -> list[LaneJob]:
    """The engines a lane job acts on: the lane of one replica, the replica the job names,
    or every replica in order."""
    job = ctx.job
    if job.lane_revision is None:
        raise JobFailed("this job has no lane revision to run")
    configs = replica_configs(job.lane_revision.config)
    if len(configs) == 1:
        return [LaneJob(ctx)]
    chosen = job.params.get("replica")
    indexes = [chosen] if isinstance(chosen, int) else list(range(len(configs)))
    if any(index >= len(configs) for index in indexes):
        raise JobFailed(f"revision {job.lane_revision.number} has no replica {chosen}")
    return [LaneJob(ctx, configs[index], index) for index in indexes]


def rolling(ctx: JobContext, action: Callable[[LaneJob], dict[str, Any]],
            engines: list[LaneJob] | None = None) -> dict[str, Any]:
    """One replica after another: each one done (a launch: healthy) before the next starts,
    so the lane keeps serving through a change; a failure stops the roll there."""
    engines = engines if engines is not None else lane_jobs(ctx)
    if len(engines) == 1:
        return action(engines[0])
    results = []
    for engine in engines:
        ctx.log(f"── {engine.label}")
        results.append(action(engine))
    lane = engines[0].lane
    lane.refresh_from_db(fields=["observed_state"])
    return {"lane": lane.name, "state": lane.observed_state, "replicas": results}


def run_launch(ctx: JobContext) -> dict[str, Any]:
    return rolling(ctx, LaneJob.launch)


def run_stop(ctx: JobContext) -> dict[str, Any]:
    return rolling(ctx, LaneJob.stop)


def run_restart(ctx: JobContext) -> dict[str, Any]:
    engines = lane_jobs(ctx)
    if len(engines) == 1:
        return engines[0].restart()
    runs = {id(engine): engine.declare_restart() for engine in engines}  # every step shown at once
    return rolling(ctx, lambda engine: runs[id(engine)](), engines)


def run_status(ctx: JobContext) -> dict[str, Any]:
    return rolling(ctx, LaneJob.status)
