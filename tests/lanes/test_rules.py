"""The lane rules as pure functions (no database): each rule's accepted and refused case,
the budget arithmetic and what the KV pool buys."""

from __future__ import annotations

import pytest

from lanes.memory import GIB, NodeFacts, kv_pool, lane_footprint_gib
from lanes.rules import OtherLane, check_lane
from tests.lanes import seed_configs as seeds

ONE = [NodeFacts("spark1")]
TWO = [NodeFacts("spark1"), NodeFacts("spark2")]


def codes(config, nodes=ONE, others=None, level=None):
    return {r.code for r in check_lane(config, nodes, others).results if level is None or r.level == level}


def test_the_seed_lanes_pass_every_rule():
    for make in (seeds.deepseek_ray, seeds.deepseek_tp4_native, seeds.qwen_single):
        config = make()
        nodes = [NodeFacts(name) for name in config["nodes"]]
        assert check_lane(config, nodes).errors == [], config["name"]


def test_it_refuses_tp_different_from_the_node_count():
    assert "tp_equals_nodes" in codes(seeds.base_config(tensor_parallel_size=2))
    assert "tp_equals_nodes" not in codes(seeds.base_config(tensor_parallel_size=2), TWO)


@pytest.mark.parametrize("value", ["auto", None, 0, -1, 1.5, True])
def test_it_refuses_max_model_len_that_is_not_pinned(value):
    assert "max_model_len_pinned" in codes(seeds.base_config(max_model_len=value))


def test_it_accepts_a_pinned_max_model_len():
    assert "max_model_len_pinned" not in codes(seeds.base_config(max_model_len=1048576))


def test_it_refuses_gpu_memory_utilization_above_085():
    result = [r for r in check_lane(seeds.base_config(gpu_memory_utilization=0.87), ONE).errors]
    assert result[0].field == "gpu_memory_utilization" and "0.87 froze both Sparks" in result[0].message


def test_it_refuses_vllms_default_utilization_when_nothing_is_set():
    assert "gpu_memory_utilization_max" in codes(seeds.base_config(gpu_memory_utilization=None))


def test_it_accepts_085_and_any_utilization_with_a_fixed_kv_cache():
    assert "gpu_memory_utilization_max" not in codes(seeds.base_config(gpu_memory_utilization=0.85))
    assert "gpu_memory_utilization_max" not in codes(
        seeds.base_config(gpu_memory_utilization=0.95, kv_cache_memory_bytes=11 * GIB))


@pytest.mark.parametrize("arg", ["--nnodes", "--node-rank=1", "--master-addr", "--master-port=1", "--headless",
                                 "--tensor-parallel-size=2", "-tp", "--port", "--distributed-executor-backend=mp"])
def test_it_refuses_launcher_owned_flags_in_extra_args(arg):
    assert "launcher_flag" in codes(seeds.base_config(extra_args=[arg, "2"]))


def test_it_refuses_flags_that_have_their_own_setting():
    assert "field_flag" in codes(seeds.base_config(extra_args=["--max-model-len=auto"]))


def test_it_accepts_other_vllm_flags():
    assert codes(seeds.base_config(extra_args=["--async-scheduling", "--block-size", "256"]), level="error") == set()


def test_it_warns_when_the_image_is_not_pinned_by_digest():
    assert "image_pinned" in codes(seeds.base_config(image="vllm/vllm-openai:latest"), level="warning")
    assert "image_pinned" not in codes(seeds.base_config())


def spec(capture):
    return seeds.base_config(max_num_seqs=16, max_cudagraph_capture_size=capture,
                             speculative_config={"method": "dspark", "num_speculative_tokens": 3})


def test_it_warns_when_the_capture_size_is_below_seqs_times_one_plus_k():
    check = check_lane(spec(8), ONE)
    (warning,) = [r for r in check.warnings if r.code == "cudagraph_capture_below"]
    assert "16 × 4 = 64" in warning.message and "−60% tok/s" in warning.message
    assert check.errors == []


def test_it_warns_when_the_capture_size_is_above_what_can_be_dispatched():
    assert "cudagraph_capture_above" in codes(spec(128), level="warning")


def test_it_accepts_the_exact_capture_size():
    assert not {"cudagraph_capture_below", "cudagraph_capture_above"} & codes(spec(64))


def test_the_budget_adds_weights_per_rank_kv_overhead_and_reserve():
    check = check_lane(seeds.deepseek_ray(), TWO)
    budget = check.budgets[0]
    assert budget.weights_gib == pytest.approx(72.65)
    assert budget.kv_gib == pytest.approx(11.0)
    assert budget.used_gib == pytest.approx(72.65 + 11 + 6 + 8)
    assert 0 < budget.percent(budget.weights_gib) < 100


def test_utilization_gives_the_kv_what_weights_and_overhead_leave():
    config = seeds.base_config(gpu_memory_utilization=0.85, weights_gib=86.5)
    assert lane_footprint_gib(config, node_memory_gib=128) == pytest.approx(0.85 * 128)


def test_it_refuses_a_budget_over_the_node_memory():
    check = check_lane(seeds.base_config(kv_cache_memory_bytes=40 * GIB, weights_gib=100), ONE)
    (error,) = check.errors
    assert error.code == "memory_budget" and error.field == "kv_cache_memory_bytes"


def test_it_refuses_weights_that_leave_no_kv_cache_under_the_utilization():
    assert "memory_budget_no_kv" in codes(seeds.base_config(gpu_memory_utilization=0.5, weights_gib=80))


def test_it_refuses_a_shared_node_whose_lanes_overflow_it():
    others = {"spark1": [OtherLane("qwen", 108.8, 8000, 29501, "vllm_node")]}
    config = seeds.base_config(kv_cache_memory_bytes=11 * GIB, gpu_memory_utilization=None, api_port=8001,
                               master_port=29502, container_name="vllm_b")
    assert "shared_node_overflow" in codes(config, ONE, others)
    small = {"spark1": [OtherLane("qwen", 20, 8000, 29501, "vllm_node")]}
    assert codes(config, ONE, small, level="error") == set()


def test_it_refuses_the_same_port_or_container_name_on_a_shared_node():
    others = {"spark1": [OtherLane("qwen", 10, 8000, 29501, "vllm_node")]}
    found = codes(seeds.base_config(kv_cache_memory_bytes=GIB, weights_gib=1), ONE, others)
    assert {"shared_node_api_port", "shared_node_master_port", "shared_node_container_name"} <= found


def test_the_kv_pool_of_the_field_holds_1146448_tokens():
    pool = kv_pool(seeds.deepseek_ray(), node_memory_gib=128)
    assert pool.tokens == pytest.approx(1_146_448, rel=0.001)
    assert pool.sessions == pytest.approx(1.09, abs=0.01)


def test_it_warns_when_the_pool_cannot_hold_one_full_context_request():
    config = seeds.deepseek_ray()
    config["kv_cache_memory_bytes"] = 9 * GIB
    assert "kv_pool_too_small" in codes(config, TWO, level="warning")


def test_it_refuses_bad_container_env_names_and_a_degraded_limit_above_the_context():
    assert "container_env_name" in codes(seeds.base_config(container_env={"A;B": "x"}))
    assert "degraded_context_limit" in codes(seeds.base_config(degraded_context_limit=10**9))
