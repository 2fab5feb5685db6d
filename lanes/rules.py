"""Lane rules: pure, named checks of a lane config snapshot (the same dict a
LaneRevision stores). Errors block saving; warnings are shown. Each result names the
field it is about, so forms put the message next to the field and the API answers 422
naming it. The field lessons behind each rule are in seeds 002-004.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from lanes.memory import VLLM_DEFAULT_GPU_MEMORY_UTILIZATION, KvPool, NodeBudget, NodeFacts, kv_pool, node_budget

SAFE_GPU_MEMORY_UTILIZATION = 0.85  # 0.87 froze both Sparks (GPU memory is OS memory on a Spark)
# Flags the launcher sets itself; a lane passing them would fight the plan.
LAUNCHER_FLAGS = (
    "--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless", "--tensor-parallel-size",
    "--port", "--distributed-executor-backend",
)
LAUNCHER_SHORT_FLAGS = {"-tp": "--tensor-parallel-size", "-n": "--nnodes", "-r": "--node-rank"}
# Flags that have their own lane field: set them there so rules and budget see them.
FIELD_FLAGS = {
    "--max-model-len": "max_model_len", "--kv-cache-memory-bytes": "kv_cache_memory_bytes",
    "--gpu-memory-utilization": "gpu_memory_utilization", "--max-num-seqs": "max_num_seqs",
    "--max-num-batched-tokens": "max_num_batched_tokens", "--kv-cache-dtype": "kv_cache_dtype",
    "--speculative-config": "speculative_config", "--max-cudagraph-capture-size": "max_cudagraph_capture_size",
    "--served-model-name": "served_model_name", "--host": "", "--revision": "model_revision",
    "--scheduling-policy": "scheduling_policy",
}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")

Level = Literal["error", "warning", "info"]


@dataclass(frozen=True)
class RuleResult:
    code: str
    field: str
    level: Level
    message: str


@dataclass(frozen=True)
class OtherLane:
    """Another lane placed on one of this lane's nodes."""

    name: str
    footprint_gib: float
    api_port: int
    master_port: int
    container_name: str


@dataclass
class LaneCheck:
    results: list[RuleResult] = field(default_factory=list)
    budgets: list[NodeBudget] = field(default_factory=list)
    kv_pool: KvPool | None = None

    @property
    def errors(self) -> list[RuleResult]:
        return [r for r in self.results if r.level == "error"]

    @property
    def warnings(self) -> list[RuleResult]:
        return [r for r in self.results if r.level == "warning"]

    def errors_by_field(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for result in self.errors:
            found.setdefault(result.field, []).append(result.message)
        return found


# ---------------------------------------------------------------- the rules


class UnknownField(Exception):  # noqa: N818 (not an error of the lane: a rule that cannot be evaluated)
    """A rule read a field whose value is not known (it failed its own check)."""


class KnownConfig(Mapping[str, Any]):
    """A config whose `unknown` fields (those that failed their own checks) cannot be read: a
    rule that reads one is skipped, so a form shows every rule that the valid fields decide on
    the first submit, and never a rule error made up from a default or an old value."""

    def __init__(self, config: Mapping[str, Any], unknown: frozenset[str]) -> None:
        self._config, self._unknown = config, unknown

    def __getitem__(self, key: str) -> Any:
        if key in self._unknown:
            raise UnknownField(key)
        return self._config[key]

    def __iter__(self) -> Any:
        return iter(self._config)

    def __len__(self) -> int:
        return len(self._config)


def _known(results: Any) -> Any:
    """A rule's results, or nothing when it read an unknown field."""
    try:
        return results()
    except UnknownField:
        return []


def check_lane(
    config: Mapping[str, Any],
    nodes: Sequence[NodeFacts] | None,
    other_lanes_by_node: Mapping[str, Sequence[OtherLane]] | None = None,
    *, unknown: frozenset[str] = frozenset(),
) -> LaneCheck:
    """Every rule, in a stable order. `nodes` in rank order (None: not known, the rules on
    them are skipped); `other_lanes_by_node` maps a node name to the other lanes placed on
    it; `unknown`: fields whose values failed their own checks (KnownConfig)."""
    others = other_lanes_by_node or {}
    config = KnownConfig(config, unknown) if unknown else config
    check = LaneCheck()
    if nodes is not None:
        check.results.extend(_known(lambda: rule_tp_equals_node_count(config, nodes)))
    for rule in (rule_max_model_len_pinned, rule_degraded_context_limit, rule_gpu_memory_utilization,
                 rule_launcher_flags, rule_container_env, rule_image_pinned, rule_speculative_capture_size):
        check.results.extend(_known(lambda rule=rule: rule(config)))
    memory = min((n.memory_gib for n in nodes or ()), default=128.0)
    check.budgets = _known(lambda: [
        node_budget(config, node, [(o.name, o.footprint_gib) for o in others.get(node.name, ())]) for node in nodes or ()
    ])
    if nodes is not None:
        check.results.extend(_known(lambda: rule_memory_budget(config, check.budgets)))
        check.results.extend(rule_shared_nodes(check.budgets))
        check.results.extend(_known(lambda: rule_shared_node_ports(config, others)))
    check.kv_pool = _known(lambda: kv_pool(config, node_memory_gib=memory)) or None
    if check.kv_pool is not None:
        check.results.extend(rule_kv_pool(check.kv_pool))
    return check


def rule_tp_equals_node_count(config: Mapping[str, Any], nodes: Sequence[NodeFacts]) -> list[RuleResult]:
    tp = int(config.get("tensor_parallel_size") or 0)
    if tp < 1:
        return [RuleResult("tp_positive", "tensor_parallel_size", "error", "Tensor-parallel size must be at least 1.")]
    if tp != len(nodes):
        return [RuleResult(
            "tp_equals_nodes", "tensor_parallel_size", "error",
            f"Tensor-parallel size {tp} must equal the number of ranked nodes ({len(nodes)}): "
            "one GB10 GPU per Spark.",
        )]
    return []


def rule_max_model_len_pinned(config: Mapping[str, Any]) -> list[RuleResult]:
    value = config.get("max_model_len")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return []
    return [RuleResult(
        "max_model_len_pinned", "max_model_len", "error",
        "max_model_len must be pinned to a positive number of tokens, not 'auto': auto shrank "
        "1,048,576 to 937,472 between two starts and crashed the second one.",
    )]


def rule_degraded_context_limit(config: Mapping[str, Any]) -> list[RuleResult]:
    limit, max_len = config.get("degraded_context_limit"), config.get("max_model_len")
    if limit and isinstance(max_len, int) and int(limit) > max_len:
        return [RuleResult("degraded_context_limit", "degraded_context_limit", "error",
                           f"The degraded context limit ({limit:,}) cannot exceed max_model_len ({max_len:,}).")]
    return []


ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def rule_container_env(config: Mapping[str, Any]) -> list[RuleResult]:
    env = config.get("container_env") or {}
    if not isinstance(env, Mapping):
        return [RuleResult("container_env_object", "container_env", "error",
                           "Container env must be an object of NAME: value.")]
    bad = [str(key) for key in env if not ENV_NAME.match(str(key))]
    if bad:
        return [RuleResult("container_env_name", "container_env", "error",
                           f"Not an environment variable name: {', '.join(repr(b) for b in bad)}.")]
    if any(not isinstance(value, str | int | float) or isinstance(value, bool) for value in env.values()):
        return [RuleResult("container_env_value", "container_env", "error",
                           "Container env values must be strings or numbers.")]
    return []


def rule_gpu_memory_utilization(config: Mapping[str, Any]) -> list[RuleResult]:
    util = config.get("gpu_memory_utilization")
    # The range holds even with kv_cache_memory_bytes set: the value is still rendered
    # into the plan, and vLLM refuses anything outside (0, 1] at launch.
    if util is not None and not 0 < float(util) <= 1:
        return [RuleResult("gpu_memory_utilization_range", "gpu_memory_utilization", "error",
                           "gpu_memory_utilization must be above 0 and at most 1.")]
    if config.get("kv_cache_memory_bytes"):
        return []
    effective = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION if util is None else float(util)
    if effective > SAFE_GPU_MEMORY_UTILIZATION:
        told = f"{effective:g}" if util is not None else f"vLLM's default {effective:g} (none set)"
        return [RuleResult(
            "gpu_memory_utilization_max", "gpu_memory_utilization", "error",
            f"gpu_memory_utilization {told} is above 0.85 without kv_cache_memory_bytes: 0.87 froze both "
            "Sparks in the field (GPU memory is OS memory on a Spark). Set kv_cache_memory_bytes "
            "or use 0.85 or less.",
        )]
    return []


def _flag_name(arg: str) -> str:
    name = arg.split("=", 1)[0]
    return LAUNCHER_SHORT_FLAGS.get(name, name)


def rule_launcher_flags(config: Mapping[str, Any]) -> list[RuleResult]:
    results: list[RuleResult] = []
    args = config.get("extra_args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return [RuleResult("extra_args_list", "extra_args", "error", "Extra args must be a list of strings.")]
    for arg in args:
        name = _flag_name(arg)
        if name in LAUNCHER_FLAGS:
            results.append(RuleResult(
                "launcher_flag", "extra_args", "error",
                f"{arg.split('=', 1)[0]} is set by the launcher (node ranks, ports, executor and TP come from "
                "the lane's nodes and settings); remove it from the extra args.",
            ))
        elif name in FIELD_FLAGS:
            where = FIELD_FLAGS[name]
            results.append(RuleResult(
                "field_flag", "extra_args", "error",
                f"{name} has its own setting" + (f" ({where})" if where else " (the launcher sets it)")
                + ": set it there so the rules and the memory budget see it.",
            ))
    return results


def rule_image_pinned(config: Mapping[str, Any]) -> list[RuleResult]:
    image = str(config.get("image") or "")
    if not image:
        return [RuleResult("image_required", "image", "error", "The container image is required.")]
    if not DIGEST.search(image):
        return [RuleResult(
            "image_pinned", "image", "warning",
            "The image is not pinned by digest (repo@sha256:…): a moving tag can put different "
            "bits on different nodes.",
        )]
    return []


def speculative_tokens(config: Mapping[str, Any]) -> int:
    spec = config.get("speculative_config")
    if isinstance(spec, Mapping):
        value = spec.get("num_speculative_tokens")
        if isinstance(value, int) and value > 0:
            return value
    return 0


def rule_speculative_capture_size(config: Mapping[str, Any]) -> list[RuleResult]:
    k = speculative_tokens(config)
    spec = config.get("speculative_config")
    if spec not in (None, "", {}) and not isinstance(spec, Mapping):
        return [RuleResult("speculative_config_json", "speculative_config", "error",
                           "speculative_config must be a JSON object.")]
    capture, seqs = config.get("max_cudagraph_capture_size"), config.get("max_num_seqs")
    if not k or not capture or not seqs:
        return []
    wanted = int(seqs) * (1 + k)  # uniform decode batch with k speculative tokens
    if int(capture) < wanted:
        return [RuleResult(
            "cudagraph_capture_below", "max_cudagraph_capture_size", "warning",
            f"max_cudagraph_capture_size {capture} is below max_num_seqs × (1+k) = {seqs} × {1 + k} = {wanted}: "
            "decode falls out of CUDA graphs once more requests run (−60% tok/s measured). Use "
            f"{wanted}.",
        )]
    if int(capture) > wanted:
        return [RuleResult(
            "cudagraph_capture_above", "max_cudagraph_capture_size", "warning",
            f"max_cudagraph_capture_size {capture} is above max_num_seqs × (1+k) = {wanted}: the extra "
            "shapes can never be dispatched and only slow the start-up.",
        )]
    return []


def rule_memory_budget(config: Mapping[str, Any], budgets: Sequence[NodeBudget]) -> list[RuleResult]:
    results: list[RuleResult] = []
    for b in budgets:
        if not config.get("kv_cache_memory_bytes") and b.kv_gib <= 0:
            results.append(RuleResult(
                "memory_budget_no_kv", "gpu_memory_utilization", "error",
                f"On {b.node}: weights/TP ({b.weights_gib:.1f} GiB) + overhead ({b.overhead_gib:g} GiB) leave "
                "no KV cache inside gpu_memory_utilization × memory.",
            ))
        lane_total = b.lane_gib + b.reserve_gib
        if lane_total > b.memory_gib:
            field_name = "kv_cache_memory_bytes" if config.get("kv_cache_memory_bytes") else "weights_gib"
            results.append(RuleResult(
                "memory_budget", field_name, "error",
                f"On {b.node}: weights/TP {b.weights_gib:.1f} + KV {b.kv_gib:.1f} + overhead {b.overhead_gib:g} "
                f"+ OS reserve {b.reserve_gib:g} = {lane_total:.1f} GiB exceeds the node's {b.memory_gib:g} GiB.",
            ))
    return results


def rule_shared_nodes(budgets: Sequence[NodeBudget]) -> list[RuleResult]:
    results: list[RuleResult] = []
    for b in budgets:
        if b.other_lanes and b.lane_gib + b.reserve_gib <= b.memory_gib < b.used_gib:
            names = ", ".join(f"{lane} {gib:.1f} GiB" for lane, gib in b.other_lanes)
            results.append(RuleResult(
                "shared_node_overflow", "nodes", "error",
                f"{b.node} is also used by {names}: with this lane's {b.lane_gib:.1f} GiB and the OS reserve "
                f"{b.reserve_gib:g} GiB that is {b.used_gib:.1f} GiB, more than its {b.memory_gib:g} GiB.",
            ))
    return results


def rule_shared_node_ports(
    config: Mapping[str, Any], others: Mapping[str, Sequence[OtherLane]]
) -> list[RuleResult]:
    """Lanes sharing a node share its host network: ports and container names must differ."""
    results: list[RuleResult] = []
    mine = {
        "api_port": int(config.get("api_port") or 8000), "master_port": int(config.get("master_port") or 29501),
        "container_name": str(config.get("container_name") or "vllm_node"),
    }
    for node, lanes in sorted(others.items()):
        for other in lanes:
            theirs = {"api_port": other.api_port, "master_port": other.master_port,
                      "container_name": other.container_name}
            for key, value in mine.items():
                if theirs[key] == value:
                    results.append(RuleResult(
                        f"shared_node_{key}", key, "error",
                        f"{key} {value} is already used by lane {other.name} on {node} (lanes on one node "
                        "share its host network and container names).",
                    ))
    return results


def rule_kv_pool(pool: KvPool) -> list[RuleResult]:
    if pool.tokens is None:
        return [RuleResult("kv_pool_unknown", "kv_bytes_per_token", "info",
                           "Set KV bytes per token to see how many tokens the KV pool holds.")]
    message = (f"The KV pool ({pool.kv_gib:.1f} GiB per node) holds {pool.tokens:,} tokens: "
               f"{pool.sessions:g} concurrent full-context session(s).")
    if pool.sessions is not None and pool.sessions < 1:
        return [RuleResult(
            "kv_pool_too_small", "max_model_len", "warning",
            message + " That is less than one max_model_len request: vLLM refuses to start "
            "(\"KV cache needed 10.06 GiB, had 10.03\").",
        )]
    return [RuleResult("kv_pool", "kv_bytes_per_token", "info", message)]
