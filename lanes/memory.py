"""Lane memory arithmetic, in GiB per node: what the weights, the KV cache and the runtime
take (a Spark's GPU memory is its OS memory), the budget bar's numbers, how many tokens the
KV pool holds, and memory sizes as people write them ("11G")."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GIB = 1024**3
VLLM_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class NodeFacts:
    name: str
    memory_gib: float = 128.0
    os_reserve_gib: float = 8.0


@dataclass(frozen=True)
class NodeBudget:
    """One node's memory for the budget bar (GiB)."""

    node: str
    memory_gib: float
    weights_gib: float
    kv_gib: float
    overhead_gib: float
    reserve_gib: float
    other_lanes: tuple[tuple[str, float], ...] = ()

    @property
    def lane_gib(self) -> float:
        return self.weights_gib + self.kv_gib + self.overhead_gib

    @property
    def used_gib(self) -> float:
        return self.lane_gib + self.reserve_gib + sum(gib for _, gib in self.other_lanes)

    @property
    def free_gib(self) -> float:
        return self.memory_gib - self.used_gib

    def percent(self, gib: float) -> float:
        return round(100 * gib / self.memory_gib, 1) if self.memory_gib else 0.0

    def reported_shortfall(self, available_gib: float, *, margin_gib: float) -> str:
        """What the node reports against the budget, once an engine runs: the node's memory in use
        (its size less MemAvailable) above the budget's use by more than the margin means the
        budget is wrong (weights guessed for an unknown model, a KV setting vLLM did not take)."""
        in_use = self.memory_gib - available_gib
        short = in_use - self.used_gib
        if short <= margin_gib:
            return ""
        return (f"{self.node} reports {in_use:.1f} GiB in use (MemAvailable {available_gib:.1f} GiB) but the "
                f"budget counts {self.used_gib:.1f} GiB: the budget is short by {short:.1f} GiB; check the "
                "lane's weights size and KV cache setting")


@dataclass(frozen=True)
class KvPool:
    kv_gib: float
    tokens: int | None  # per replica (one pool across the TP ranks)
    sessions: float | None  # concurrent full-context (max_model_len) sessions



def _num(config: Mapping[str, Any], key: str) -> float:
    value = config.get(key)
    return float(value) if value not in (None, "") else 0.0


def kv_cache_gib(config: Mapping[str, Any], *, node_memory_gib: float) -> float:
    """KV cache per node: fixed by kv_cache_memory_bytes (vLLM then ignores the utilization),
    else what gpu_memory_utilization × memory leaves after weights and overhead."""
    if config.get("kv_cache_memory_bytes"):
        return _num(config, "kv_cache_memory_bytes") / GIB
    util = config.get("gpu_memory_utilization")
    util = VLLM_DEFAULT_GPU_MEMORY_UTILIZATION if util is None else float(util)
    return max(util * node_memory_gib - weights_per_node_gib(config) - _num(config, "runtime_overhead_gib"), 0.0)


def weights_per_node_gib(config: Mapping[str, Any]) -> float:
    tp = max(int(config.get("tensor_parallel_size") or 1), 1)
    return _num(config, "weights_gib") / tp


def lane_footprint_gib(config: Mapping[str, Any], *, node_memory_gib: float) -> float:
    """What the lane takes on each of its nodes: weights/TP + KV + runtime overhead."""
    return (
        weights_per_node_gib(config) + kv_cache_gib(config, node_memory_gib=node_memory_gib)
        + _num(config, "runtime_overhead_gib")
    )


def node_budget(
    config: Mapping[str, Any], node: NodeFacts, other_lanes: Sequence[tuple[str, float]] = ()
) -> NodeBudget:
    return NodeBudget(
        node=node.name, memory_gib=node.memory_gib, weights_gib=weights_per_node_gib(config),
        kv_gib=kv_cache_gib(config, node_memory_gib=node.memory_gib),
        overhead_gib=_num(config, "runtime_overhead_gib"), reserve_gib=node.os_reserve_gib,
        other_lanes=tuple(other_lanes),
    )


def kv_pool(config: Mapping[str, Any], *, node_memory_gib: float) -> KvPool:
    kv_gib = kv_cache_gib(config, node_memory_gib=node_memory_gib)
    per_token = config.get("kv_bytes_per_token")
    if not per_token:
        return KvPool(kv_gib, None, None)
    # Each TP rank holds its share of every token, so one node's pool / per-node bytes per
    # token is the lane's capacity (seed 004: 11 GiB per node held 1,146,448 tokens).
    tokens = int(kv_gib * GIB // int(per_token))
    max_len = int(config.get("max_model_len") or 0)
    return KvPool(kv_gib, tokens, round(tokens / max_len, 2) if max_len > 0 else None)


MEMORY_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def parse_memory_bytes(value: object) -> int | None:
    """Bytes from an int or "11G" / "11 GiB" (binary units, as vLLM reads "11G")."""
    if value in (None, ""):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = MEMORY_SIZE.match(str(value))
    if not match:  # the message never echoes the value: it may be 300 digits
        raise ValueError("Enter a size such as 11G or 11811160064 (bytes).")
    number, unit = match.groups()
    size = float(number) * 1024 ** "_KMGT".index(unit.upper() or "_")
    if not size < 2**63:  # also inf: "9" * 400 is a float too large to hold
        raise ValueError("Enter a size such as 11G or 11811160064 (bytes), below 8 EiB.")
    return int(size)
