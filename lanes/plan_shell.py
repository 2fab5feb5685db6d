"""The shell lines of the launch, stop and status plans (lanes.plans), built from quoted
parts only: every value that reaches a shell goes through `shlex.quote`, and names that
reach a shell must be slugs. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lanes.memory import lane_footprint_gib

GIB = 1024**3
RAY_OBJECT_STORE_BYTES = GIB  # dashaun's RAY_OBJECT_STORE_BYTES
SLUG = re.compile(r"^[-a-zA-Z0-9_]+$")
SYSFS = '"${SPARK_SYSFS:-/sys}"'  # sparksim points these at a node's fake tree (runtime contract)
PROCFS = '"${SPARK_PROCFS:-/proc}"'



@dataclass(frozen=True)
class NodeTarget:
    """What a plan knows about one node of the lane, in rank order (rank 0 = head)."""

    name: str
    address: str  # management address (SSH / API endpoint host)
    runtime: str = "docker"  # the node's container runtime command, split with shlex
    report: Mapping[str, Any] = field(default_factory=dict)  # last network report (jobs' network check)
    memory_gib: float = 128.0  # for the MemAvailable preflight


def q(value: object) -> str:
    return shlex.quote(str(value))


def slug(value: object, what: str) -> str:
    text = str(value)
    if not SLUG.match(text):
        raise ValueError(f"{what} must be a slug (letters, digits, - and _), got {text!r}")
    return text


class Raw(str):
    """A fixed shell fragment written here (never a user value): joined unquoted."""


def join(parts: Sequence[object]) -> str:
    return " ".join(part if isinstance(part, Raw) else q(part) for part in parts)


def runtime_argv(target: Target) -> list[str]:
    return shlex.split(target.node.runtime) or ["docker"]


def docker(target: Target, *args: object) -> str:
    return join([*runtime_argv(target), *args])


def quiet(command: str) -> str:
    return f"{command} >/dev/null 2>&1"


def negate(command: str) -> str:
    return f"! {command}"


def human_bytes(value: int) -> str:
    """vLLM reads an uppercase suffix as binary (11G = 11 GiB), as the field's `11G` does."""
    for suffix, size in (("T", 1024**4), ("G", GIB), ("M", 1024**2), ("K", 1024)):
        if value % size == 0:
            return f"{value // size}{suffix}"
    return str(value)


@dataclass(frozen=True)
class Fabric:
    ip: str
    eth_if: str
    ib_hca: tuple[str, ...]
    gid_index: int | None
    mtu: int | None
    has_report: bool


def fabric_of(node: NodeTarget) -> Fabric:
    report = node.report or {}
    fabric_ip = str(report.get("fabric_ip") or "")
    eth_if = str(report.get("eth_if") or "")
    if not fabric_ip or not eth_if:
        return Fabric(node.address, "", (), None, None, False)
    devices = [d for d in report.get("devices") or [] if isinstance(d, Mapping)]
    mtu = next((int(d["mtu"]) for d in devices if d.get("netdev") == eth_if and d.get("mtu")), None)
    gid = report.get("gid_index")
    return Fabric(
        fabric_ip, eth_if, tuple(str(h) for h in report.get("ib_hca") or []),
        int(gid) if gid is not None else None, mtu, True,
    )


def fabric_env(fabric: Fabric) -> dict[str, str]:
    """The NCCL/UCX/MPI fabric variables from a node's network report: what a lane's
    containers and the fabric tests (nccl-tests over mpirun) both run with."""
    env: dict[str, str] = {}
    if fabric.has_report:
        for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES",
                    "OMPI_MCA_btl_tcp_if_include", "MN_IF_NAME"):
            env[key] = fabric.eth_if
        env["NCCL_IB_DISABLE"] = "0"
        if fabric.ib_hca:
            env["NCCL_IB_HCA"] = ",".join(fabric.ib_hca)
        if fabric.gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(fabric.gid_index)  # computed by the network check, never hard-coded
    env["NCCL_IGNORE_CPU_AFFINITY"] = "1"
    return env


@dataclass(frozen=True)
class Target:
    node: NodeTarget
    rank: int
    fabric: Fabric

    @property
    def role(self) -> str:
        return "head" if self.rank == 0 else "worker"


@dataclass(frozen=True)
class LaneView:
    """A revision's config read once, with defaults, for the three plans."""

    config: Mapping[str, Any]
    targets: tuple[Target, ...]
    warnings: tuple[str, ...]

    @classmethod
    def from_config(cls, config: Mapping[str, Any], nodes: Sequence[NodeTarget]) -> LaneView:
        if not nodes:
            raise ValueError("a plan needs at least one node")
        slug(config["name"], "lane name")
        slug(config.get("container_name") or "vllm_node", "container name")
        for node in nodes:
            slug(node.name, "node name")
        targets = tuple(Target(node, rank, fabric_of(node)) for rank, node in enumerate(nodes))
        warnings = [
            f"{t.node.name} has no network report: using its management address {t.node.address} "
            "for the IPs and leaving the NCCL fabric variables to the lane's container env"
            for t in targets if not t.fabric.has_report
        ]
        tp = int(config.get("tensor_parallel_size") or 1)
        if tp != len(nodes):
            warnings.append(f"tensor-parallel size {tp} differs from the {len(nodes)} ranked node(s)")
        return cls(config, targets, tuple(warnings))

    # --- plain settings
    @property
    def name(self) -> str:
        return str(self.config["name"])

    @property
    def revision(self) -> int:
        return int(self.config.get("revision") or 0)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(t.node.name for t in self.targets)

    @property
    def container(self) -> str:
        return str(self.config.get("container_name") or "vllm_node")

    @property
    def image(self) -> str:
        return str(self.config["image"])

    @property
    def tp(self) -> int:
        return int(self.config.get("tensor_parallel_size") or 1)

    @property
    def mode(self) -> str:
        """"ray" for a Ray lane on several nodes; "native" for native multi-node and one node."""
        return "ray" if self.config.get("executor") == "ray" and len(self.targets) > 1 else "native"

    @property
    def api_port(self) -> int:
        return int(self.config.get("api_port") or 8000)

    @property
    def master_port(self) -> int:
        return int(self.config.get("master_port") or 29501)

    @property
    def public_name(self) -> str:
        return str(self.config.get("served_model_name") or self.config["name"])

    @property
    def wait_timeout_s(self) -> float:
        return float(self.config.get("wait_timeout_s") or 2400.0)

    @property
    def wait_poll_s(self) -> float:
        return float(self.config.get("wait_poll_s") or 5.0)

    def min_free_gib(self, target: Target) -> float:
        """What this lane takes on one node (weights/TP + KV + overhead): MemAvailable must
        cover it before launch (a warning, as in start.sh)."""
        return round(lane_footprint_gib(self.config, node_memory_gib=target.node.memory_gib), 1)

    # --- container env and vLLM arguments
    def container_env(self, target: Target) -> dict[str, str]:
        fabric = target.fabric
        env: dict[str, str] = {}
        for key in ("VLLM_HOST_IP", "RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS"):
            env[key] = fabric.ip
        env.update(fabric_env(fabric))
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        env["RAY_memory_monitor_refresh_ms"] = "0"
        env["RAY_num_prestart_python_workers"] = "0"
        env["RAY_object_store_memory"] = str(RAY_OBJECT_STORE_BYTES)
        # The lane's own env last: it goes on the container so Ray workers inherit it.
        for key, value in (self.config.get("container_env") or {}).items():
            env[str(key)] = str(value)
        return env

    def serve_args(self, target: Target) -> list[str]:
        c = self.config
        args = ["vllm", "serve", str(c["model_id"]), "--host", "0.0.0.0", "--port", str(self.api_port),
                "--served-model-name", self.public_name, "--tensor-parallel-size", str(self.tp)]
        if c.get("model_revision"):
            args += ["--revision", str(c["model_revision"])]
        args += ["--max-model-len", str(c["max_model_len"])]  # pinned: "auto" shrank 1M to 937,472
        if c.get("kv_cache_memory_bytes"):
            args += ["--kv-cache-memory-bytes", human_bytes(int(c["kv_cache_memory_bytes"]))]
        if c.get("gpu_memory_utilization") is not None:
            args += ["--gpu-memory-utilization", f"{float(c['gpu_memory_utilization']):g}"]
        for key in ("max_num_seqs", "max_num_batched_tokens"):
            if c.get(key):
                args += [f"--{key.replace('_', '-')}", str(c[key])]
        if c.get("kv_cache_dtype"):
            args += ["--kv-cache-dtype", str(c["kv_cache_dtype"])]
        if c.get("scheduling_policy") == "priority":  # fcfs is vLLM's default
            args += ["--scheduling-policy", "priority"]
        for key in ("enable_prefix_caching", "enable_chunked_prefill"):
            if c.get(key) is not None:
                flag = key.replace("_", "-")
                args.append(f"--{flag}" if c[key] else f"--no-{flag}")
        if c.get("speculative_config"):
            args += ["--speculative-config", json.dumps(c["speculative_config"], separators=(",", ":"))]
        if c.get("max_cudagraph_capture_size"):
            args += ["--max-cudagraph-capture-size", str(c["max_cudagraph_capture_size"])]
        args += [str(arg) for arg in c.get("extra_args") or []]
        if len(self.targets) > 1:
            if self.mode == "ray":
                args += ["--distributed-executor-backend", "ray"]
            else:
                head = self.targets[0]
                args += ["--nnodes", str(len(self.targets)), "--node-rank", str(target.rank),
                         "--master-addr", head.fabric.ip, "--master-port", str(self.master_port)]
                if target.rank > 0:
                    args.append("--headless")
        return args


def docker_run(lane: LaneView, target: Target, cmd: Sequence[str]) -> str:
    parts: list[object] = [
        "run", "-d", "--name", lane.container, "--privileged", "--ipc=host", "--network", "host",
        "--gpus", "all", "--ulimit", "nofile=1048576:1048576", "--ulimit", "memlock=-1",
        "--label", f"dgx-spark.role={target.role}", "--label", f"dgx-spark.model={lane.config['model_id']}",
        "--label", f"spark-lanes.lane={lane.name}", "--label", f"spark-lanes.revision={lane.revision}",
    ]
    for env_key, value in lane.container_env(target).items():
        parts += ["-e", f"{env_key}={value}"]
    # The HF cache and the compile caches live on the host, so restarts reuse them.
    for cache in (".cache/huggingface", ".cache/vllm", ".cache/flashinfer", ".triton"):
        parts += ["-v", Raw(f'"$HOME/{cache}:/root/{cache}"')]
    # No --rm: a crashed container stays inspectable. The entrypoint is reset so the
    # command runs as given (keep-alive `sleep infinity`, or `vllm serve ...`).
    parts += ["--entrypoint", "", lane.image, *cmd]
    return docker(target, *parts)


def replace_container(target: Target, run_command: str) -> str:
    # A stopped or "Dead" container of the same name would make `docker run` fail (exit 125):
    # this step only runs when the container is not running, so clear the name first.
    return f"{quiet(docker(target, 'rm', '-f', target_container(run_command)))}; {run_command}"


def target_container(run_command: str) -> str:
    parts = shlex.split(run_command)
    return parts[parts.index("--name") + 1]


def container_running(target: Target, container: str) -> str:
    state = docker(target, "inspect", "--format", "{{.State.Status}}", container)
    return f'[ "$({state} 2>/dev/null)" = running ]'


def container_exists(target: Target, container: str) -> str:
    return quiet(docker(target, "inspect", "--format", "{{.State.Status}}", container))


# MemAvailable and swap in use (kB), read from the node's /proc (or a simulated Spark's).
MEMINFO_COMMAND = (
    "awk '/^MemAvailable:/ {a=$2} /^SwapTotal:/ {t=$2} /^SwapFree:/ {f=$2} END {print a+0, t-f}' "
    '"${SPARK_PROCFS:-/proc}"/meminfo'
)


def vllm_running(target: Target, container: str) -> str:
    return docker(target, "exec", container, "pgrep", "-f", "vllm serve")


def ray_head_args(lane: LaneView, head: Target) -> list[str]:
    return ["ray", "start", "--block", "--head", f"--port={lane.master_port}", f"--node-ip-address={head.fabric.ip}",
            "--num-cpus=2", f"--object-store-memory={RAY_OBJECT_STORE_BYTES}", "--include-dashboard=false",
            "--disable-usage-stats"]


def ray_worker_args(lane: LaneView, head: Target, worker: Target) -> list[str]:
    return ["ray", "start", "--block", f"--address={head.fabric.ip}:{lane.master_port}",
            f"--node-ip-address={worker.fabric.ip}", "--num-cpus=2",
            f"--object-store-memory={RAY_OBJECT_STORE_BYTES}", "--disable-usage-stats"]


def ray_ready_wait(head: Target, container: str, tp: int, timeout_s: int) -> str:
    status = docker(head, "exec", container, "ray", "status")
    count = q('/ GPU/ { split($1, a, "/"); n = a[2] + 0 } END { print n + 0 }')
    return (
        f"deadline=$((SECONDS + {timeout_s})); "
        f"until [ \"$({status} 2>/dev/null | awk {count})\" = {q(tp)} ]; do "
        f"if [ $SECONDS -ge $deadline ]; then echo {q(f'Ray did not report {tp} GPU(s) within {timeout_s} s')} >&2; "
        f"{status} >&2; exit 1; fi; sleep 2; done; echo {q(f'Ray reports {tp} GPU(s)')}"
    )


def wait_vllm_exit(target: Target, container: str, timeout_s: int) -> str:
    running = quiet(vllm_running(target, container))
    return (
        f"deadline=$((SECONDS + {timeout_s})); while {running}; do "
        f"if [ $SECONDS -ge $deadline ]; then echo {q(f'vLLM still running after {timeout_s} s')} >&2; exit 1; fi; "
        "sleep 2; done; echo 'vLLM exited'"
    )


def roce_active_check(devices: Sequence[str]) -> str:
    names = " ".join(q(device) for device in devices)
    return (
        f"for d in {names}; do s=$(cat {SYSFS}/class/infiniband/\"$d\"/ports/1/state 2>/dev/null); "
        'case "$s" in *ACTIVE*) echo "$d $s";; *) echo "$d is not ACTIVE: ${s:-no such device}" >&2; exit 1;; esac; done'
    )


def mem_available_check(min_gib: float) -> str:
    if min_gib <= 0:
        report = '/^MemAvailable:/ { printf "MemAvailable %.1f GiB\\n", $2 / 1048576 }'
        return f"awk {q(report)} {PROCFS}/meminfo"
    program = (
        '/^MemAvailable:/ { gib = $2 / 1048576; printf "MemAvailable %.1f GiB (want %s GiB)\\n", gib, want; '
        "exit !(gib >= want) }"
    )
    return f"awk -v want={q(f'{min_gib:g}')} {q(program)} {PROCFS}/meminfo"


def compaction_check() -> str:
    return (
        f"v=$(cat {PROCFS}/sys/vm/compaction_proactiveness); echo \"vm.compaction_proactiveness=$v\"; "
        '[ "$v" = 0 ]'
    )


def ping(head: Target, worker: Target) -> str:
    if head.fabric.has_report and worker.fabric.has_report:
        size = (head.fabric.mtu or 1500) - 28  # don't-fragment ping at MTU-28, through the fabric link
        return join(["ping", "-M", "do", "-s", size, "-c", 3, "-W", 2, "-I", head.fabric.eth_if, worker.fabric.ip])
    return join(["ping", "-c", 3, "-W", 2, worker.fabric.ip])
