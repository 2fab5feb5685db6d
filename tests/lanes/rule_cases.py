"""Each lane rule's accepted and refused case, shared by the service, form and API tests
(the same rules and messages everywhere)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GIB = 1024**3
IMAGE = "vllm/vllm-openai@sha256:" + "ab" * 32


def lane_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "newlane", "model_id": "org/model", "image": IMAGE, "tensor_parallel_size": 1, "executor": "ray",
        "api_port": 8000, "master_port": 29501, "container_name": "vllm_node", "max_model_len": 131072,
        "gpu_memory_utilization": 0.8, "weights_gib": 20.0, "runtime_overhead_gib": 6.0,
    }
    data.update(overrides)
    return data


SMALL = {"kv_cache_memory_bytes": 2 * GIB, "gpu_memory_utilization": None, "weights_gib": 2.0}
APART = {"api_port": 8001, "master_port": 29502, "container_name": "vllm_b"}


@dataclass
class RuleCase:
    id: str
    field: str
    message: str
    accepted: dict[str, Any]
    refused: dict[str, Any]
    nodes: list[str] = field(default_factory=lambda: ["spark1"])
    refused_nodes: list[str] | None = None
    other_lane: dict[str, Any] | None = None  # placed on spark1 first


CASES = [
    RuleCase("tp_equals_nodes", "tensor_parallel_size", "must equal the number of ranked nodes",
             {"tensor_parallel_size": 1}, {"tensor_parallel_size": 2}),
    RuleCase("memory_budget", "kv_cache_memory_bytes", "exceeds the node's 128 GiB",
             {"kv_cache_memory_bytes": 11 * GIB, "weights_gib": 100.0, "gpu_memory_utilization": None},
             {"kv_cache_memory_bytes": 30 * GIB, "weights_gib": 100.0, "gpu_memory_utilization": None}),
    RuleCase("gpu_memory_utilization_max", "gpu_memory_utilization", "0.87 froze both",
             {"gpu_memory_utilization": 0.87, "kv_cache_memory_bytes": 11 * GIB},
             {"gpu_memory_utilization": 0.87}),
    RuleCase("max_model_len_pinned", "max_model_len", "not 'auto'",
             {"max_model_len": 262144}, {"max_model_len": "auto"}),
    RuleCase("launcher_flag", "extra_args", "set by the launcher",
             {"extra_args": ["--async-scheduling"]}, {"extra_args": ["--async-scheduling", "--port=9000"]}),
    RuleCase("degraded_context_limit", "degraded_context_limit", "cannot exceed max_model_len",
             {"degraded_context_limit": 65536}, {"degraded_context_limit": 262144}),
    RuleCase("container_env_name", "container_env", "Not an environment variable name",
             {"container_env": {"NCCL_DEBUG": "WARN"}}, {"container_env": {"BAD NAME": "x"}}),
    RuleCase("shared_node_overflow", "nodes", "is also used by other",
             {**APART, "kv_cache_memory_bytes": 11 * GIB, "gpu_memory_utilization": None},
             {**APART, "kv_cache_memory_bytes": 11 * GIB, "gpu_memory_utilization": None},
             nodes=["spark2"], refused_nodes=["spark1"], other_lane={"gpu_memory_utilization": 0.85}),
    RuleCase("shared_node_api_port", "api_port", "already used by lane other on spark1",
             {**SMALL, **APART}, {**SMALL, "master_port": 29502, "container_name": "vllm_b"},
             other_lane=SMALL),
]
