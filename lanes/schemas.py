"""In/Out schemas of the nodes and lanes API. A node's private key goes in, never out:
the output says only whether one is set."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema

from core.api import InSchema
from lanes.selectors import ReplicaView


class NodeIn(InSchema):
    name: str
    address: str
    transport: str = "ssh"
    ssh_port: int = 22
    ssh_user: str = "spark"
    ssh_private_key: str | None = None
    ssh_host_key: str = ""
    runtime_command: str = "docker"
    sim_dir: str = ""
    memory_gib: float = 128.0
    os_reserve_gib: float = 8.0
    labels: list[str] = []
    state: str = "unknown"


class NodePatch(InSchema):
    name: str | None = None
    address: str | None = None
    transport: str | None = None
    ssh_port: int | None = None
    ssh_user: str | None = None
    ssh_private_key: str | None = None
    clear_private_key: bool = False
    ssh_host_key: str | None = None
    runtime_command: str | None = None
    sim_dir: str | None = None
    memory_gib: float | None = None
    os_reserve_gib: float | None = None
    labels: list[str] | None = None
    state: str | None = None


class HostKeyIn(InSchema):
    host_key_line: str


class NodeOut(Schema):
    name: str
    address: str
    transport: str
    ssh_port: int
    ssh_user: str
    has_private_key: bool
    ssh_host_key: str
    ssh_host_key_fingerprint: str
    ssh_host_key_pending: str
    runtime_command: str
    sim_dir: str
    memory_gib: float
    os_reserve_gib: float
    labels: list[Any]
    state: str
    last_seen: datetime | None
    network_report: dict[str, Any]
    network_checked_at: datetime | None
    lanes: list[str]


class ReplicaIn(InSchema):
    nodes: list[str]  # rank order: the first is the replica's head
    api_port: int | None = None  # None: the lane's


class LaneIn(InSchema):
    name: str
    model_id: str
    model_revision: str = ""
    served_model_name: str = ""
    image: str
    nodes: list[str] = []  # a lane of one replica
    replicas: list[ReplicaIn] | None = None  # or each replica's nodes (then `nodes` is not read)
    tensor_parallel_size: int = 1
    executor: str = "ray"
    api_port: int = 8000
    master_port: int = 29501
    container_name: str = "vllm_node"
    max_model_len: int | str  # "auto" is refused by the rules, with their message
    kv_cache_memory_bytes: int | str | None = None  # bytes, or "11G"
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str = ""
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    speculative_config: dict[str, Any] | None = None
    max_cudagraph_capture_size: int | None = None
    extra_args: list[str] = []
    container_env: dict[str, str] = {}
    # NAME → value sets or replaces a secret (write-only: never returned); NAME → null or "" clears it.
    secret_env: dict[str, str | None] | None = None
    weights_gib: float = 0.0
    kv_bytes_per_token: int | None = None
    runtime_overhead_gib: float = 6.0
    fallback: str | None = None
    degraded_context_limit: int | None = None
    gateway_slots: int | None = None  # requests the gateway sends one replica at once (None: max_num_seqs)
    scheduling_policy: str = "fcfs"  # vLLM's --scheduling-policy: fcfs or priority


class LanePatch(InSchema):
    name: str | None = None
    model_id: str | None = None
    model_revision: str | None = None
    served_model_name: str | None = None
    image: str | None = None
    nodes: list[str] | None = None  # replica 0's
    replicas: list[ReplicaIn] | None = None  # every replica (a removed one must be stopped)
    tensor_parallel_size: int | None = None
    executor: str | None = None
    api_port: int | None = None
    master_port: int | None = None
    container_name: str | None = None
    max_model_len: int | str | None = None
    kv_cache_memory_bytes: int | str | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    kv_cache_dtype: str | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    speculative_config: dict[str, Any] | None = None
    max_cudagraph_capture_size: int | None = None
    extra_args: list[str] | None = None
    container_env: dict[str, str] | None = None
    secret_env: dict[str, str | None] | None = None
    weights_gib: float | None = None
    kv_bytes_per_token: int | None = None
    runtime_overhead_gib: float | None = None
    fallback: str | None = None
    degraded_context_limit: int | None = None
    gateway_slots: int | None = None  # requests the gateway sends one replica at once (None: max_num_seqs)
    scheduling_policy: str | None = None  # fcfs or priority


class RuleOut(Schema):
    code: str
    field: str
    level: str
    message: str


class BudgetOut(Schema):
    node: str
    memory_gib: float
    weights_gib: float
    kv_gib: float
    overhead_gib: float
    reserve_gib: float
    other_lanes_gib: float
    free_gib: float


class KvPoolOut(Schema):
    kv_gib: float
    tokens: int | None
    sessions: float | None


class LaneOut(Schema):
    name: str
    model_id: str
    model_revision: str
    served_model_name: str
    public_model_name: str
    image: str
    nodes: list[str]
    tensor_parallel_size: int
    executor: str
    api_port: int
    master_port: int
    container_name: str
    max_model_len: int
    kv_cache_memory_bytes: int | None
    gpu_memory_utilization: float | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    kv_cache_dtype: str
    enable_prefix_caching: bool | None
    enable_chunked_prefill: bool | None
    speculative_config: dict[str, Any] | None
    max_cudagraph_capture_size: int | None
    extra_args: list[str]
    container_env: dict[str, Any]
    secret_env: dict[str, str]  # NAME → "set": values are never returned
    weights_gib: float
    kv_bytes_per_token: int | None
    runtime_overhead_gib: float
    fallback: str | None
    degraded_context_limit: int | None
    gateway_slots: int | None
    scheduling_policy: str
    current_context_limit: int
    desired_state: str
    observed_state: str
    state_reason: str  # why it is in that state (the job, or the health watcher, that said so)
    state_changed_at: datetime | None
    revision: int
    base_url: str
    replicas: list[ReplicaView]  # the selector's dataclass: one list of fields for the page and the API
    rules: list[RuleOut]
    budgets: list[BudgetOut]
    kv_pool: KvPoolOut | None


class RevisionOut(Schema):
    number: int
    created_at: datetime
    created_by: str | None
    config: dict[str, Any]
    changes: dict[str, list[Any]]


class PlanStepOut(Schema):
    key: str
    phase: str
    node: str
    title: str
    kind: str
    command: str
    stdin: str
    skip_if: str | None
    on_failure: str
    timeout_s: float
    url: str
    models_url: str
    expect_model: str
    alive_check: str
    guard_check: str
    guard_nodes: list[str]
    poll_s: float
    collect: str


class ReplicaPlanOut(Schema):
    replica: int
    warnings: list[str]
    steps: list[PlanStepOut]
    text: str


class PlanOut(Schema):
    lane: str
    revision: int
    action: str
    warnings: list[str]
    steps: list[PlanStepOut]  # replica 0's (a lane of one replica: its only plan)
    text: str  # every replica's plan, one after another
    replicas: list[ReplicaPlanOut]
