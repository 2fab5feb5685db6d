"""The field reports' real lane configurations (seeds 000 and 004) as lane config
snapshots, and network reports shaped like jobs' network check writes them
(docs/runtime-contract.md), for golden plans and rule tests."""

from __future__ import annotations

from typing import Any

from lanes.plans import NodeTarget

GIB = 1024**3
IMAGE = "ghcr.io/eugr/spark-vllm-b12x@sha256:" + "4f" * 32
ALL_HCA = ["rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1"]


def base_config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": "lane", "revision": 1, "model_id": "org/model", "model_revision": "", "served_model_name": "",
        "image": IMAGE, "tensor_parallel_size": 1, "executor": "ray", "api_port": 8000, "master_port": 29501,
        "container_name": "vllm_node", "max_model_len": 131072, "kv_cache_memory_bytes": None,
        "gpu_memory_utilization": 0.85, "max_num_seqs": None, "max_num_batched_tokens": None,
        "kv_cache_dtype": "", "enable_prefix_caching": None, "enable_chunked_prefill": None,
        "speculative_config": None, "max_cudagraph_capture_size": None, "extra_args": [], "container_env": {},
        "weights_gib": 20.0, "kv_bytes_per_token": None, "runtime_overhead_gib": 6.0, "fallback": None,
        "degraded_context_limit": None, "nodes": ["spark1"],
    }
    config.update(overrides)
    return config


def deepseek_ray() -> dict[str, Any]:
    """Seed 004: DeepSeek-V4-Flash over Ray on two Sparks."""
    return base_config(
        name="deepseek", revision=3, model_id="deepseek-ai/DeepSeek-V4-Flash-0731", tensor_parallel_size=2,
        executor="ray", max_model_len=1048576, kv_cache_memory_bytes=11 * GIB, gpu_memory_utilization=None,
        weights_gib=145.3,  # "about 156 GB of weights"
        kv_bytes_per_token=10302,  # 11 GiB held 1,146,448 tokens
        degraded_context_limit=524288, fallback="qwen", nodes=["spark1", "spark2"],
    )


def deepseek_tp4_native() -> dict[str, Any]:
    """Seed 003's configuration: TP=4 native multi-node with DSpark speculative decoding."""
    return base_config(
        name="deepseek-tp4", revision=1, model_id="deepseek-ai/DeepSeek-V4-Flash-0731", tensor_parallel_size=4,
        executor="native", max_model_len=1048576, gpu_memory_utilization=0.85, kv_cache_dtype="fp8",
        enable_prefix_caching=True, enable_chunked_prefill=True, max_num_seqs=16, max_num_batched_tokens=8192,
        max_cudagraph_capture_size=64,
        speculative_config={"method": "dspark", "num_speculative_tokens": 3, "draft_sample_method": "probabilistic"},
        extra_args=[
            "--block-size", "256",
            "--compilation-config", '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}',
            "--attention-backend", "FLASHINFER_MLA_SPARSE_DSV4", "--moe-backend", "b12x",
            "--disable-custom-all-reduce", "--no-scheduler-reserve-full-isl", "--async-scheduling",
        ],
        container_env={
            "NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_IB_HCA": "rocep1s0f0",
            "NCCL_SOCKET_IFNAME": "enp1s0f0np0", "GLOO_SOCKET_IFNAME": "enp1s0f0np0",
            "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0",
        },
        weights_gib=145.3, nodes=["spark1", "spark2", "spark3", "spark4"],
    )


def qwen_single() -> dict[str, Any]:
    """Seed 000's Qwen on one Spark. The seed gives no memory setting: 0.85 is the rules' ceiling."""
    return base_config(
        name="qwen", revision=1, model_id="Qwen/Qwen3.8-27B-FP8", tensor_parallel_size=1, executor="ray",
        max_model_len=262144, gpu_memory_utilization=0.85, extra_args=["--quantization", "fp8"],
        weights_gib=27.0, nodes=["spark3"],
    )


def report(host: int, hca: list[str] | None = None, gid_index: int = 3) -> dict[str, Any]:
    hca = ALL_HCA if hca is None else hca
    ip = f"192.168.100.{host}"
    return {
        "checked_at": "2026-11-29T18:00:00Z", "kernel": "6.11.0-1016-nvidia", "driver": "580.95.05",
        "compaction_proactiveness": 0, "mem_total_kib": 134217728, "mem_available_kib": 120000000,
        "devices": [
            {"name": "rocep1s0f0", "netdev": "enp1s0f0np0", "port_state": "ACTIVE", "operstate": "up",
             "speed_mbps": 200000, "mtu": 9000, "ipv4": f"{ip}/24", "gid_index": gid_index, "fw_ver": "28.45.1020"},
        ],
        "eth_if": "enp1s0f0np0", "fabric_ip": ip, "ib_hca": hca, "gid_index": gid_index, "links": [], "verdict": "ok",
    }


def targets(names: list[str], hca: list[str] | None = None, with_report: bool = True) -> list[NodeTarget]:
    return [
        NodeTarget(name=name, address=f"127.0.0.{10 + int(name[-1])}",
                   report=report(10 + int(name[-1]), hca) if with_report else {})
        for name in names
    ]
