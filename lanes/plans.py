"""Launch, stop and status plans: pure functions from a lane revision and its nodes'
network reports to the exact ordered commands per node (docs/runtime-contract.md).
No I/O here: the jobs app runs the steps, the lane page shows
them as a dry run, and golden tests pin them.

The jobs runner executes `plan.steps` in order:
  - kind "shell": run `command` with bash on `node` (the transport quotes nothing more:
    every value inside `command` is already shlex-quoted); if `skip_if` is set, run it
    first and skip the step when it exits 0 (idempotence: work already done);
    non-zero exit → the step fails; `on_failure == "warn"` logs a warning and goes on.
  - kind "wait_health": poll `url` (GET, from the worker) every `poll_s` until it
    returns 200 and, if `models_url` is set, that URL lists `expect_model`; between polls
    run `alive_check` on `node` and fail fast when it exits non-zero (process died);
    give up after `timeout_s`.
  - `collect`: a name under which the runner keeps the step's stdout. Steps collected as
    "image_id" (one per node) are compared with `check_image_ids` once they have all run;
    a mismatch fails the launch ("the same image Id on every node": both nodes run identical bits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.conf import settings

from lanes import plan_shell as sh
from lanes.model_files import inventory_script, wanted_revision, weights_check_command
from lanes.plan_shell import NodeTarget

StepKind = Literal["shell", "wait_health"]
Phase = Literal["preflight", "containers", "ray", "serve", "wait", "stop", "status"]

RAY_READY_TIMEOUT_S = 120  # start.sh: GPUs in `ray status` must equal TP within 120 s
SERVE_WAIT_TIMEOUT_S = 2400.0  # dashaun's WAIT_TIMEOUT (healthy ~244 s after serve in the field)
STOP_GRACE_S = 120  # stop.sh: SIGINT, wait 120 s, then SIGKILL
ENGINE_LOG_TAIL_LINES = 40  # enough for a vLLM traceback's last frames and its error line


@dataclass(frozen=True)
class PlanStep:
    key: str  # stable id, e.g. "containers.spark2"
    phase: Phase
    node: str
    title: str  # one line for humans
    command: str = ""  # kind "shell": one bash line, every value quoted
    stdin: str = ""  # a fixed script the command reads (`bash -s`), shown in full by the plan API
    kind: StepKind = "shell"
    skip_if: str | None = None
    on_failure: Literal["fail", "warn"] = "fail"
    timeout_s: float = 120.0
    # kind "wait_health"
    url: str = ""
    models_url: str = ""
    expect_model: str = ""
    alive_check: str = ""
    # The memory guard (the guardian's launch part): between polls, read on every listed node.
    guard_check: str = ""
    guard_nodes: tuple[str, ...] = ()
    logs_on_failure: str = ""  # the engine's last lines, shown when it dies or never gets healthy
    poll_s: float = 5.0
    collect: str = ""
    quiet: bool = False  # the output is collected, not logged (the inventory read)


@dataclass(frozen=True)
class Plan:
    lane: str
    revision: int
    action: Literal["launch", "stop", "status"]
    steps: tuple[PlanStep, ...]
    warnings: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()  # rank order, for the dry run's header

    def render(self) -> str:
        """The dry run an admin reads before confirming."""
        ranks = ", ".join(
            f"{name} ({'head, ' if rank == 0 else ''}rank {rank})" for rank, name in enumerate(self.nodes)
        )
        lines = [f"{self.action.capitalize()} plan for lane {self.lane}, revision {self.revision}"]
        if ranks:
            lines.append(f"Nodes: {ranks}")
        for warning in self.warnings:
            lines.append(f"WARNING: {warning}")
        phase = None
        for number, step in enumerate(self.steps, start=1):
            if step.phase != phase:
                phase = step.phase
                lines.extend(["", f"== {phase}"])
            lines.append(f"{number:>2}. [{step.node}] {step.title}  ({step.key})")
            if step.skip_if:
                lines.append(f"      skip if: {step.skip_if}")
            if step.kind == "shell":
                lines.append(f"      $ {wrap_command(step.command)}")
                if step.stdin:
                    lines.append(f"      (with a read-only script of {len(step.stdin.splitlines())} lines on stdin; "
                                 "the plan API shows it in full)")
            else:
                lines.append(f"      poll GET {step.url} every {step.poll_s:g} s until 200")
                if step.models_url:
                    lines.append(f"      then GET {step.models_url} lists {step.expect_model!r}")
                if step.alive_check:
                    lines.append(f"      fail fast unless: {step.alive_check}")
                if step.guard_check:
                    lines.append(f"      memory guard on {', '.join(step.guard_nodes)}: below "
                                 f"{settings.GUARDIAN_MEMORY_FLOOR_GIB:g} GiB MemAvailable, stop that node's "
                                 f"engine (SIGINT, wait, SIGKILL); read with: {step.guard_check}")
                if step.logs_on_failure:
                    lines.append(f"      on failure, show: {step.logs_on_failure}")
            extras = [f"timeout {step.timeout_s:g} s"]
            if step.on_failure == "warn":
                extras.append("on failure: warn and go on")
            if step.collect:
                extras.append(f"collects {step.collect}")
            lines.append(f"      ({'; '.join(extras)})")
        return "\n".join(lines) + "\n"


def wrap_command(command: str, width: int = 100, indent: str = "          ") -> str:
    """For reading only: break a long line before options (outside quotes) with `\\`
    continuations, which bash reads as the same command."""
    if len(command) <= width:
        return command
    out: list[str] = []
    quote = ""
    line_length = 0
    for index, char in enumerate(command):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == " " and command[index + 1:index + 2] == "-" and line_length > width // 2:
            out.append(" \\\n" + indent)
            line_length = len(indent)
            continue
        out.append(char)
        line_length += 1
    return "".join(out)


def check_image_ids(outputs: Mapping[str, str]) -> str | None:
    """The runner's comparison of the "image_id" steps: node -> that step's stdout. Returns
    an error message when a node has no Id or the Ids differ, else None."""
    ids = {node: (text.strip().splitlines() or [""])[-1].strip() for node, text in outputs.items()}
    missing = sorted(node for node, value in ids.items() if not value.startswith("sha256:"))
    if missing:
        return f"image missing or unreadable on {', '.join(missing)}"
    if len(set(ids.values())) > 1:
        listed = ", ".join(f"{node} {value[:19]}…" for node, value in sorted(ids.items()))
        return f"image Id differs between nodes ({listed}): pull the same digest on every node"
    return None


# ---------------------------------------------------------------- launch


def render_launch_plan(config: Mapping[str, Any], nodes: Sequence[NodeTarget]) -> Plan:
    """`config` is a LaneRevision.config snapshot."""
    lane = sh.LaneView.from_config(config, nodes)
    steps: list[PlanStep] = []
    steps += _preflight_steps(lane)
    if lane.mode == "ray":
        steps += _ray_steps(lane)
    else:
        steps += _native_steps(lane)
    steps.append(_wait_step(lane))
    return Plan(lane.name, lane.revision, "launch", tuple(steps), tuple(lane.warnings), lane.node_names)


def _preflight_steps(lane: sh.LaneView) -> list[PlanStep]:
    steps: list[PlanStep] = []
    for target in lane.targets:
        node = target.node.name
        steps.append(PlanStep(f"preflight.ssh.{node}", "preflight", node, "node reachable (SSH) and its kernel",
                              command="uname -sr", timeout_s=30))
        steps.append(PlanStep(
            f"preflight.image.{node}", "preflight", node, "image present (by its digest when the lane pins one); its Id must match on every node",
            command=sh.docker(target, "image", "inspect", "--format", "{{.Id}}", lane.image),
            timeout_s=30, collect="image_id",
        ))
        steps.append(PlanStep(
            f"preflight.inventory.{node}", "preflight", node,
            "read the node's inventory (HF cache, the lane's image, free disk) for its page",
            command="bash -s", stdin=inventory_script([lane.image], sh.docker(target)), on_failure="warn", timeout_s=120,
            collect="inventory", quiet=True,
        ))
        steps.append(_weights_step(lane, node))
        if target.fabric.ib_hca:
            steps.append(PlanStep(
                f"preflight.roce.{node}", "preflight", node,
                f"RoCE devices ACTIVE: {', '.join(target.fabric.ib_hca)}",
                command=sh.roce_active_check(target.fabric.ib_hca), timeout_s=30,
            ))
        steps.append(PlanStep(
            f"preflight.memory.{node}", "preflight", node,
            f"MemAvailable at least {lane.min_free_gib(target):g} GiB (what this lane takes on the node)",
            command=sh.mem_available_check(lane.min_free_gib(target)), on_failure="warn", timeout_s=30,
        ))
        steps.append(PlanStep(
            f"preflight.compaction.{node}", "preflight", node,
            "vm.compaction_proactiveness is 0 (linked to kernel crashes under RoCE)",
            command=sh.compaction_check(), on_failure="warn", timeout_s=30,
        ))
    head = lane.targets[0]
    for worker in lane.targets[1:]:
        steps.append(PlanStep(
            f"preflight.ping.{worker.node.name}", "preflight", head.node.name,
            f"head pings {worker.node.name} at {worker.fabric.ip}",
            command=sh.ping(head, worker), on_failure="fail" if head.fabric.has_report else "warn", timeout_s=30,
        ))
    return steps


def _weights_step(lane: sh.LaneView, node: str) -> PlanStep:
    """The lane's model at its revision, whole, in this rank's HF cache (lanes.model_files)."""
    model, revision = str(lane.config.get("model_id") or ""), str(lane.config.get("model_revision") or "")
    return PlanStep(
        f"preflight.weights.{node}", "preflight", node,
        f"weights of {model} at {wanted_revision(revision)} complete in the HF cache",
        command=weights_check_command(model, revision), timeout_s=60,
    )


def _ray_steps(lane: sh.LaneView) -> list[PlanStep]:
    steps: list[PlanStep] = []
    for target in lane.targets:
        steps.append(PlanStep(
            f"containers.{target.node.name}", "containers", target.node.name,
            f"keep-alive container {lane.container} (rank {target.rank}, {target.role})",
            command=sh.replace_container(target, sh.docker_run(lane, target, ["sleep", "infinity"])),
            skip_if=sh.container_running(target, lane.container), timeout_s=300,
        ))
    head = lane.targets[0]
    steps.append(PlanStep(
        f"ray.head.{head.node.name}", "ray", head.node.name, f"Ray head on {head.fabric.ip}:{lane.master_port}",
        command=sh.docker(head, "exec", "-d", lane.container, *sh.ray_head_args(lane, head)),
        skip_if=sh.quiet(sh.docker(head, "exec", lane.container, "ray", "status")),
    ))
    for worker in lane.targets[1:]:
        steps.append(PlanStep(
            f"ray.worker.{worker.node.name}", "ray", worker.node.name,
            f"Ray worker joins {head.fabric.ip}:{lane.master_port}",
            command=sh.docker(worker, "exec", "-d", lane.container, *sh.ray_worker_args(lane, head, worker)),
            skip_if=sh.quiet(sh.docker(worker, "exec", lane.container, "pgrep", "-f", "ray start")),
        ))
    steps.append(PlanStep(
        "ray.ready", "ray", head.node.name, f"Ray reports {lane.tp} GPU(s) (= tensor-parallel size)",
        command=sh.ray_ready_wait(head, lane.container, lane.tp, RAY_READY_TIMEOUT_S),
        timeout_s=RAY_READY_TIMEOUT_S + 30,
    ))
    steps.append(PlanStep(
        f"serve.{head.node.name}", "serve", head.node.name, "vllm serve on the head (Ray executor)",
        command=sh.docker(head, "exec", "-d", lane.container, *lane.serve_args(head)),
        skip_if=sh.quiet(sh.vllm_running(head, lane.container)),
    ))
    return steps


def _native_steps(lane: sh.LaneView) -> list[PlanStep]:
    # Native multi-node: workers first (--headless), the head last (eugr's launch-cluster.sh).
    order = [*lane.targets[1:], lane.targets[0]]
    steps: list[PlanStep] = []
    for target in order:
        what = "single-node" if len(lane.targets) == 1 else (
            "head, last" if target.rank == 0 else f"worker rank {target.rank}, headless"
        )
        steps.append(PlanStep(
            f"serve.{target.node.name}", "serve", target.node.name, f"container {lane.container} running vllm serve ({what})",
            command=sh.replace_container(target, sh.docker_run(lane, target, lane.serve_args(target))),
            skip_if=sh.container_running(target, lane.container), timeout_s=300,
        ))
    return steps


def _wait_step(lane: sh.LaneView) -> PlanStep:
    head = lane.targets[0]
    base = f"http://{head.node.address}:{lane.api_port}"
    return PlanStep(
        "wait.health", "wait", head.node.name, f"wait for /health and /v1/models to list {lane.public_name!r}",
        kind="wait_health", url=f"{base}/health", models_url=f"{base}/v1/models", expect_model=lane.public_name,
        alive_check=sh.vllm_running(head, lane.container), timeout_s=lane.wait_timeout_s, poll_s=lane.wait_poll_s,
        guard_check=sh.MEMINFO_COMMAND if settings.GUARDIAN_MEMORY_FLOOR_GIB > 0 else "",
        guard_nodes=tuple(target.node.name for target in lane.targets) if settings.GUARDIAN_MEMORY_FLOOR_GIB > 0 else (),
        logs_on_failure=sh.docker(head, "logs", "--tail", ENGINE_LOG_TAIL_LINES, lane.container),
    )


# ---------------------------------------------------------------- stop and status


def render_stop_plan(config: Mapping[str, Any], nodes: Sequence[NodeTarget]) -> Plan:
    lane = sh.LaneView.from_config(config, nodes)
    vllm_nodes = lane.targets[:1] if lane.mode == "ray" else lane.targets
    steps: list[PlanStep] = []
    for target in vllm_nodes:
        node, not_running = target.node.name, sh.negate(sh.quiet(sh.vllm_running(target, lane.container)))
        steps.append(PlanStep(
            f"stop.sigint.{node}", "stop", node, "SIGINT to vLLM (graceful shutdown)",
            command=sh.docker(target, "exec", lane.container, "pkill", "-INT", "-f", "vllm serve"),
            skip_if=not_running, on_failure="warn", timeout_s=30,
        ))
        steps.append(PlanStep(
            f"stop.wait.{node}", "stop", node, f"wait up to {STOP_GRACE_S} s for vLLM to exit",
            command=sh.wait_vllm_exit(target, lane.container, STOP_GRACE_S),
            skip_if=not_running, on_failure="warn", timeout_s=STOP_GRACE_S + 30,
        ))
        steps.append(PlanStep(
            f"stop.kill.{node}", "stop", node, "SIGKILL vLLM if it is still there",
            command=sh.docker(target, "exec", lane.container, "pkill", "-KILL", "-f", "vllm serve"),
            skip_if=not_running, on_failure="warn", timeout_s=30,
        ))
    for target in lane.targets:
        steps.append(PlanStep(
            f"stop.remove.{target.node.name}", "stop", target.node.name, f"remove container {lane.container}",
            command=sh.docker(target, "rm", "-f", lane.container),
            skip_if=sh.negate(sh.container_exists(target, lane.container)), timeout_s=60,
        ))
    return Plan(lane.name, lane.revision, "stop", tuple(steps), tuple(lane.warnings), lane.node_names)


STATUS_FORMAT = '{{.State.Status}} {{.State.StartedAt}} {{index .Config.Labels "spark-lanes.revision"}}'


def running_revision(inspected: str) -> int | None:
    """The revision a running container was launched with, from STATUS_FORMAT's output."""
    words = inspected.split()
    if len(words) < 3 or words[0] != "running" or not words[2].isdigit():
        return None
    return int(words[2])


def render_status_plan(config: Mapping[str, Any], nodes: Sequence[NodeTarget]) -> Plan:
    lane = sh.LaneView.from_config(config, nodes)
    steps: list[PlanStep] = []
    for target in lane.targets:
        node = target.node.name
        steps.append(PlanStep(
            f"status.container.{node}", "status", node, f"container {lane.container}: state, start time, revision",
            # the revision label the launch set: a status job after a lost launch says what runs
            command=sh.docker(target, "inspect", "--format", STATUS_FORMAT, lane.container),
            on_failure="warn", timeout_s=30, collect="container_state",
        ))
        if lane.mode != "ray" or target.rank == 0:
            steps.append(PlanStep(
                f"status.vllm.{node}", "status", node, "vLLM process",
                command=sh.vllm_running(target, lane.container), on_failure="warn", timeout_s=30,
                collect="vllm_pid",
            ))
        steps.append(PlanStep(
            f"status.memory.{node}", "status", node, "MemAvailable",
            command=sh.mem_available_check(0), on_failure="warn", timeout_s=30, collect="mem_available",
        ))
    head = lane.targets[0]
    if lane.mode == "ray":
        steps.append(PlanStep(
            "status.ray", "status", head.node.name, "Ray nodes and GPUs",
            command=sh.docker(head, "exec", lane.container, "ray", "status"), on_failure="warn", timeout_s=30,
            collect="ray_status",
        ))
    base = f"http://{head.node.address}:{lane.api_port}"
    steps.append(PlanStep(
        "status.health", "status", head.node.name, f"/health and /v1/models list {lane.public_name!r}",
        kind="wait_health", url=f"{base}/health", models_url=f"{base}/v1/models", expect_model=lane.public_name,
        on_failure="warn", timeout_s=10, poll_s=2,
    ))
    return Plan(lane.name, lane.revision, "status", tuple(steps), tuple(lane.warnings), lane.node_names)
