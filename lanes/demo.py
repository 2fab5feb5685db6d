"""Demo data for `make run` (called by `manage.py demo_setup`): three simulated Sparks and
seed 000's two lanes — deepseek TP=2 over Ray on spark1+spark2 (seed 004's settings) and
qwen on spark3 — if the database has no nodes yet."""

from __future__ import annotations

from io import TextIOBase

from django.conf import settings

from lanes.demo_cluster import demo_cluster_up, demo_seed_weights
from lanes.lane_services import lane_create
from lanes.models import Lane, Node, Transport
from lanes.node_services import node_create

GIB = 1024**3
# sparksim answers `docker image inspect` for any reference; a real cluster pins its own digest.
DEMO_IMAGE = "ghcr.io/eugr/spark-vllm-b12x@sha256:" + "5d" * 32


def seed_demo(out: TextIOBase) -> None:
    nodes = demo_cluster_up(settings.SIM_ROOT, settings.SIM_TIME_SCALE)
    if Node.objects.exists():
        seed_demo_weights()
        out.write(f"lanes: simulated cluster ready at {settings.SIM_ROOT}; nodes already registered\n")
        return
    for name, address, sim_dir in nodes:
        node_create(actor=None, data={"name": name, "address": address, "transport": Transport.LOCAL,
                                      "sim_dir": sim_dir, "memory_gib": 128.0, "labels": ["sparksim"]})
    # Seed 000: Qwen 3.8 27B FP8 on one Spark, 262,144 tokens. The seed gives no memory
    # setting: 0.85 is the highest utilization the rules accept without a fixed KV size.
    lane_create(actor=None, nodes=["spark3"], data={
        "name": "qwen", "model_id": "Qwen/Qwen3.8-27B-FP8", "image": DEMO_IMAGE, "tensor_parallel_size": 1,
        "executor": "ray", "max_model_len": 262144, "gpu_memory_utilization": 0.85,
        "extra_args": ["--quantization", "fp8"], "weights_gib": 27.0,
    })
    # Seeds 000/004: DeepSeek-V4-Flash over Ray on two Sparks, 1M context pinned, KV fixed at
    # 11G (0.87 utilization froze both nodes), 11 GiB held 1,146,448 tokens.
    lane_create(actor=None, nodes=["spark1", "spark2"], data={
        "name": "deepseek", "model_id": "deepseek-ai/DeepSeek-V4-Flash-0731", "image": DEMO_IMAGE,
        "tensor_parallel_size": 2, "executor": "ray", "api_port": 8000, "master_port": 29501,
        "max_model_len": 1048576, "kv_cache_memory_bytes": 11 * GIB, "gpu_memory_utilization": None,
        "weights_gib": 145.3, "kv_bytes_per_token": 10302, "degraded_context_limit": 524288, "fallback": "qwen",
    })
    seed_demo_weights()
    out.write(f"lanes: 3 simulated Sparks at {settings.SIM_ROOT} and lanes deepseek (spark1+spark2), qwen (spark3)\n")


def seed_demo_weights() -> None:
    """Each simulated rank of a lane holds that lane's model (idempotent): the demo launches
    pass the weights preflight; the node that lacks a model shows how a sync fills it."""
    for lane in Lane.objects.prefetch_related("members__node"):
        for member in lane.members.all():
            if member.node.sim_dir:
                demo_seed_weights(member.node.sim_dir, lane.model_id, lane.model_revision)
