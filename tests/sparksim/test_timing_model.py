"""The timing model and the other pure pieces, without sockets."""

import argparse

import pytest

from sparksim.engine.config import ConfigError, build_engine_config
from sparksim.engine.planning import ApiError, plan_chat
from sparksim.engine.prefix_cache import PrefixCache
from sparksim.engine.vllm_args import human_readable_int, parse_serve_args
from sparksim.shim.templates import render
from sparksim.timing import (
    DEEPSEEK,
    QWEN,
    PlannedRequest,
    per_stream_decode_rate,
    prefill_seconds,
    profile_for_model,
    simulate,
)
from sparksim.tokenizer import count_tokens, split_tokens


def test_deepseek_decode_follows_seed_000() -> None:
    assert per_stream_decode_rate(DEEPSEEK, 1) == pytest.approx(68.0)
    assert per_stream_decode_rate(DEEPSEEK, 10) == pytest.approx(45.0)
    assert per_stream_decode_rate(QWEN, 1) == pytest.approx(120.0)


def test_prefill_follows_seed_003_cold_and_cache_hit() -> None:
    assert prefill_seconds(DEEPSEEK, 50_000, 0) == pytest.approx(20.2)  # seed: 19.6 s
    assert prefill_seconds(DEEPSEEK, 0, 150_000) == pytest.approx(0.745, abs=0.01)  # 0.776 s
    assert prefill_seconds(QWEN, 262_144, 0) == pytest.approx(3.05)  # seed 000: 262K in 3 s


def test_leaving_cuda_graphs_costs_two_thirds_of_decode() -> None:
    # k=3 and a capture size of 8 hold two streams; the third falls back to eager.
    assert per_stream_decode_rate(DEEPSEEK, 2, graph_seqs=2) > 60
    assert per_stream_decode_rate(DEEPSEEK, 3, graph_seqs=2) < 25


def test_simulate_single_request() -> None:
    (timeline,) = simulate(DEEPSEEK, [PlannedRequest(0.0, 2500, 69)])
    assert timeline.first_token_s == pytest.approx(1.2)
    assert timeline.decode_tok_s == pytest.approx(68.0)


def test_simulate_serialises_prefill_and_shares_decode() -> None:
    timelines = simulate(DEEPSEEK, [PlannedRequest(0.0, 2500, 200)] * 2)
    # Prefill compute (1 s each) queues; the 0.2 s fixed part overlaps.
    assert [line.first_token_s for line in timelines] == pytest.approx([1.2, 2.2])
    # The first stream decodes alone (68 tok/s) until the second joins, then both at ~65.
    assert 65 < timelines[0].decode_tok_s < 67.9
    assert timelines[1].decode_tok_s < timelines[0].decode_tok_s


def test_model_names_pick_profiles() -> None:
    assert profile_for_model("deepseek-ai/DeepSeek-V4-Flash-0731") is DEEPSEEK
    assert profile_for_model("Qwen/Qwen3.8-27B-FP8") is QWEN


def test_tokenizer_is_about_four_characters_per_token() -> None:
    assert split_tokens("Hello wonderful world") == ["Hell", "o", " wond", "erfu", "l", " worl",
                                                     "d"]
    text = "The lane is healthy and both Sparks answer on the fabric. " * 20
    assert 3.0 < len(text) / count_tokens(text) < 5.0


def test_prefix_cache_counts_whole_leading_blocks() -> None:
    cache = PrefixCache(block_size=16, capacity_blocks=100)
    prompt = list(range(100))
    hashes = cache.block_hashes(prompt)
    assert len(hashes) == 6 and cache.cached_tokens(prompt, hashes) == 0
    cache.insert(hashes)
    assert cache.cached_tokens(prompt, hashes) == 96
    changed = [*range(40), 999, *range(41, 100)]
    assert cache.cached_tokens(changed, cache.block_hashes(changed)) == 32


def test_human_readable_sizes_follow_vllm() -> None:
    assert human_readable_int("11G") == 11 * 2**30
    assert human_readable_int("1k") == 1000
    assert human_readable_int("1M") == 2**20


def serve_config(*flags: str) -> argparse.Namespace:
    return parse_serve_args(["deepseek-ai/DeepSeek-V4-Flash-0731", *flags])


def test_kv_memory_bytes_sets_the_pool_like_seed_004() -> None:
    config = build_engine_config(serve_config("--kv-cache-memory-bytes", "11G",
                                              "--max-model-len", "1048576"))
    assert config.kv_pool_tokens == 1_146_448
    with pytest.raises(ConfigError, match="KV cache is needed"):
        build_engine_config(serve_config("--kv-cache-memory-bytes", "10G",
                                         "--max-model-len", "1048576"))


def test_contradictory_parallel_flags_are_refused() -> None:
    with pytest.raises(ConfigError, match="with distributed_executor_backend=ray"):
        build_engine_config(serve_config("-tp", "2", "--nnodes", "2",
                                         "--distributed-executor-backend", "ray"))
    with pytest.raises(ConfigError, match="must equal nnodes"):
        build_engine_config(serve_config("-tp", "4", "--nnodes", "2"))
    with pytest.raises(ConfigError, match="--headless"):
        build_engine_config(serve_config("--headless"))


def test_unknown_flag_exits_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        serve_config("--bogus")
    assert exited.value.code == 2
    assert "vllm serve: error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_seed_lane_flags_are_accepted() -> None:
    args = serve_config(
        "--tensor-parallel-size", "4", "--nnodes", "4", "--node-rank", "1", "--master-port",
        "29501", "--kv-cache-dtype", "fp8", "--block-size", "256", "--enable-prefix-caching",
        "--max-model-len", "1048576", "--max-num-seqs", "16", "--max-num-batched-tokens", "8192",
        "--max-cudagraph-capture-size", "64", "--compilation-config",
        '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}', "--speculative-config",
        '{"method":"dspark","num_speculative_tokens":3,"draft_sample_method":"probabilistic"}',
        "--attention-backend", "FLASHINFER_MLA_SPARSE_DSV4", "--moe-backend", "b12x",
        "--disable-custom-all-reduce", "--no-scheduler-reserve-full-isl", "--async-scheduling",
        "--enable-chunked-prefill", "--gpu-memory-utilization", "0.85", "--headless",
        "--kv-cache-memory-bytes", "11G")
    config = build_engine_config(args)
    assert (config.spec_tokens, config.graph_seqs, config.nnodes) == (3, 16, 4)


def test_context_errors_read_like_vllm() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
    with pytest.raises(ApiError) as caught:
        plan_chat(body, ["m"], 50, 1000)
    assert caught.value.status == 400
    assert caught.value.message.startswith("This model's maximum context length is 50 tokens.")
    with pytest.raises(ApiError) as missing:
        plan_chat({**body, "model": "x"}, ["m"], 5000, 1000)
    assert missing.value.status == 404 and missing.value.error_type == "NotFoundError"


def test_docker_format_templates() -> None:
    document = {"State": {"Status": "running", "StartedAt": "2026-11-29T18:00:00Z"},
                "Config": {"Labels": {"dgx-spark.role": "head"}}}
    assert render("{{.State.Status}} {{.State.StartedAt}}", document) == \
        "running 2026-11-29T18:00:00Z"
    assert render('{{index .Config.Labels "dgx-spark.role"}}\\t{{json .State.Status}}',
                  document) == 'head\t"running"'
