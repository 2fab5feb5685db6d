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
    DEEPSEEK_TP4,
    QWEN,
    PlannedRequest,
    Stepper,
    TimingProfile,
    per_stream_decode_rate,
    prefill_seconds,
    profile_for_model,
    simulate,
)
from sparksim.tokenizer import count_tokens, split_tokens

# The seeds' measured figures. The model is fitted to all of them at once, so it meets each
# within a stated tolerance rather than exactly.
# Seed 000: DeepSeek 68 tok/s for one user, 45 tok/s each at 10 users; Qwen 120 tok/s.
SEED_000_DECODE = [(DEEPSEEK, 1, 68.0), (DEEPSEEK, 10, 45.0), (QWEN, 1, 120.0)]
# Seed 003, C=1 on the 2-node cluster: TTFT cold and on a KV cache hit, per context length.
SEED_003_COLD_TTFT = [(50_000, 19.622), (100_000, 41.510), (150_000, 64.433)]
SEED_003_CACHE_HIT_TTFT = [(50_000, 0.413), (100_000, 0.578), (150_000, 0.776)]
# Seed 000: Qwen prefills its 262,144-token context in 3 s.
SEED_000_QWEN_FULL_PREFILL_S = 3.0


@pytest.mark.parametrize(("profile", "users", "measured"), SEED_000_DECODE)
def test_decode_speed_matches_seed_000(profile: TimingProfile, users: int, measured: float) -> None:
    # 2%: the seed gives these as round figures.
    assert per_stream_decode_rate(profile, users) == pytest.approx(measured, rel=0.02)


@pytest.mark.parametrize(("tokens", "measured_s"), SEED_003_COLD_TTFT)
def test_cold_prefill_matches_seed_003(tokens: int, measured_s: float) -> None:
    # 10%: the seed's own cold rate drifts from 2,548 to 2,328 tok/s between 50K and 150K.
    assert prefill_seconds(DEEPSEEK, tokens, 0) == pytest.approx(measured_s, rel=0.10)


@pytest.mark.parametrize(("tokens", "measured_s"), SEED_003_CACHE_HIT_TTFT)
def test_cache_hit_prefill_matches_seed_003(tokens: int, measured_s: float) -> None:
    # 10%: a sub-second TTFT where the seed's fixed cost and rate are fitted from three runs.
    # The cache serves whole 256-token blocks; the rest of the prompt is computed.
    cached = (tokens - 1) // 256 * 256
    assert prefill_seconds(DEEPSEEK, tokens - cached, cached) == pytest.approx(measured_s, rel=0.10)


def test_qwen_full_context_prefill_matches_seed_000() -> None:
    # 5%: "3 s" is a rounded figure.
    assert prefill_seconds(QWEN, 262_144, 0) == pytest.approx(SEED_000_QWEN_FULL_PREFILL_S, rel=0.05)


def test_leaving_cuda_graphs_costs_two_thirds_of_decode() -> None:
    # k=3 and a capture size of 8 hold two streams; the third falls back to eager.
    assert per_stream_decode_rate(DEEPSEEK, 2, graph_seqs=2) > 60
    assert per_stream_decode_rate(DEEPSEEK, 3, graph_seqs=2) < 25


def test_simulate_single_request() -> None:
    (timeline,) = simulate(DEEPSEEK, [PlannedRequest(0.0, 2500, 69)])
    assert timeline.first_token_s == pytest.approx(prefill_seconds(DEEPSEEK, 2500, 0))
    assert timeline.decode_tok_s == pytest.approx(68.0)


def test_simulate_serialises_prefill_and_a_prefill_slows_decode() -> None:
    alone = prefill_seconds(DEEPSEEK, 25_000, 0)
    # 3 tokens: the first stream ends while the second prompt still prefills.
    first, second = simulate(DEEPSEEK, [PlannedRequest(0.0, 25_000, 3)] * 2)
    assert first.first_token_s == pytest.approx(alone)
    # The second prompt waits for the first, then shares its steps with the first's decode.
    assert second.first_token_s > 2 * alone
    # While it prefills, each of the first stream's steps also carries a prefill chunk of
    # the budget (8192 tokens, less the decode's one) of the 25,000 uncached tokens: one
    # token per ~3 s instead of 68 tok/s.
    chunk_s = prefill_seconds(DEEPSEEK, 25_000, 0) * (DEEPSEEK.batch_tokens - 1) / 25_000
    assert first.decode_tok_s == pytest.approx(1.0 / (chunk_s + 1.0 / DEEPSEEK.decode_tok_s))
    assert second.decode_tok_s == pytest.approx(DEEPSEEK.decode_tok_s)


def test_a_prefill_beside_decodes_advances_one_token_budget_per_step() -> None:
    stepper = Stepper(DEEPSEEK)
    stepper.add_decoding("stream")
    stepper.add_prefill("prompt", 150_000, 0)
    step = stepper.plan()
    whole = prefill_seconds(DEEPSEEK, 150_000, 0)
    # The decode's token comes out of the budget first: 8191 of the 150,000 tokens.
    assert step.prefill_s == pytest.approx(whole * (DEEPSEEK.batch_tokens - 1) / 150_000)
    assert step.seconds == pytest.approx(step.prefill_s + 1.0 / DEEPSEEK.decode_tok_s)
    # A prompt whose uncached tokens fit the budget (a cache hit) is done in one step.
    hits = Stepper(DEEPSEEK)
    hits.add_decoding("stream")
    hits.add_prefill("hit", 240, 149_760)
    assert hits.apply(hits.plan()) == ["hit"]


def test_cache_hit_prompts_waiting_together_share_one_batch() -> None:
    hit = PlannedRequest(0.0, 150_000, 16, cached_tokens=149_760)
    timelines = simulate(DEEPSEEK, [hit] * 4)
    firsts = [line.first_token_s for line in timelines]
    # The first starts alone on an idle engine; the three that waited finish together.
    assert firsts[0] < firsts[1] == firsts[2] == firsts[3]


def test_falling_out_of_cuda_graphs_slows_each_step() -> None:
    assert per_stream_decode_rate(DEEPSEEK_TP4, 4) > 2 * per_stream_decode_rate(DEEPSEEK_TP4, 4, 2)


def test_model_names_pick_profiles() -> None:
    assert profile_for_model("deepseek-ai/DeepSeek-V4-Flash-0731") is DEEPSEEK
    assert profile_for_model("deepseek-ai/DeepSeek-V4-Flash-0731", 4) is DEEPSEEK_TP4
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


def test_a_prompt_joining_a_prefill_batch_costs_the_profiles_batched_cost() -> None:
    from dataclasses import replace

    from sparksim.timing import DEEPSEEK_TP4, PlannedRequest, prefill_seconds, simulate

    alone = prefill_seconds(DEEPSEEK_TP4, 240, 149_760)
    # The first prompt starts alone; the next three wait and share one batch.
    wave = simulate(DEEPSEEK_TP4, [PlannedRequest(0.0, 150_000, 2, cached_tokens=149_760) for _ in range(4)])
    firsts = sorted(timeline.first_token_s for timeline in wave)
    assert DEEPSEEK_TP4.batched_prefill_s == 0.03
    assert firsts[0] == pytest.approx(alone, rel=1e-6)
    assert firsts[1] == firsts[3]  # one batch: one first token
    free = simulate(replace(DEEPSEEK_TP4, batched_prefill_s=0.0),
                    [PlannedRequest(0.0, 150_000, 2, cached_tokens=149_760) for _ in range(4)])
    # Two of the three joined the first one's batch: 2 x 0.03 s.
    assert max(timeline.first_token_s for timeline in free) == pytest.approx(firsts[3] - 2 * 0.03, abs=1e-9)


def test_streams_sharing_a_batch_spread_around_its_rate_and_a_wave_ends_with_its_slowest() -> None:
    """decode_spread: the median stream keeps the batch's rate, the slowest ends the wave later
    than alike streams would, and a stream alone is not spread."""
    from dataclasses import replace

    from sparksim.timing import DEEPSEEK_TP4, PlannedRequest, simulate, stream_speeds

    assert stream_speeds(0.35, 1) == [1.0]
    speeds = stream_speeds(0.35, 4)
    assert speeds[0] == pytest.approx(1 - 0.35 * 3 / 4) and speeds[-1] == pytest.approx(1 + 0.35 * 3 / 4)
    assert sum(speeds) / 4 == pytest.approx(1.0)
    wave = [PlannedRequest(0.0, 150_000, 512, cached_tokens=149_984) for _ in range(4)]
    alike = simulate(replace(DEEPSEEK_TP4, decode_spread=0.0), wave)
    spread = simulate(DEEPSEEK_TP4, wave)
    assert len({round(line.decode_tok_s, 6) for line in alike[1:]}) == 1  # the three that share a batch: alike
    rates = sorted(line.decode_tok_s for line in spread[1:])
    assert rates[0] < 0.9 * rates[1] < rates[2]  # spread, slowest well below the others
    assert max(line.finish_s for line in spread) > max(line.finish_s for line in alike) + 1.0
    assert all(line.output_tokens == 512 for line in spread)
    alone = simulate(DEEPSEEK_TP4, wave[:1])[0]
    assert alone.decode_tok_s == pytest.approx(DEEPSEEK_TP4.decode_tok_s, rel=0.01)


def test_the_decode_spread_is_an_engine_flag_with_a_bound() -> None:
    from sparksim.engine.config import build_engine_config
    from sparksim.engine.vllm_args import parse_serve_args

    model = "Qwen/Qwen3.8-27B-FP8"
    assert build_engine_config(parse_serve_args([model])).profile.decode_spread == 0.0
    config = build_engine_config(parse_serve_args([model, "--sim-decode-spread", "0.1"]))
    assert config.profile.decode_spread == 0.1
    for bad in ("1", "-0.1", "nan"):
        with pytest.raises(SystemExit):
            parse_serve_args([model, "--sim-decode-spread", bad])
