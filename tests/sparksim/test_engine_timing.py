"""Streamed benchmarks against a DeepSeek-like engine reproduce the timing model within 5%."""

from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparksim.loadgen import compare_wave, run_wave
from sparksim.standalone import EngineHandle
from sparksim.timing import DEEPSEEK
from tests.sparksim.conftest import DEEPSEEK as DEEPSEEK_MODEL

# Real time: the suite runs in parallel with browser tests, and every millisecond of CPU
# contention counts against a 5% budget on a ~0.4 s TTFT.
TIME_SCALE = 1.0


def filler(words: int, salt: str) -> str:
    return " ".join(f"{salt}{index % 97}" for index in range(words))


def metric_samples(engine: EngineHandle) -> dict[str, float]:
    text = httpx.get(f"{engine.url}/metrics").text
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if "finished_reason" in sample.labels:
                key += ":" + sample.labels["finished_reason"]
            if "le" not in sample.labels:
                samples[key] = sample.value
    return samples


async def test_concurrency_sweep_matches_the_timing_model(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(DEEPSEEK_MODEL, "--no-enable-prefix-caching", time_scale=TIME_SCALE)
    for concurrency in (1, 2, 4, 8):
        prompts = [filler(300, f"c{concurrency}r{index}") for index in range(concurrency)]
        started, results = await run_wave(engine.url, DEEPSEEK_MODEL, concurrency, prompts, 128)
        assert all(result.tokens == 128 == result.completion_tokens for result in results)
        comparison = compare_wave(DEEPSEEK, TIME_SCALE, started, results)
        assert comparison.ttft_deviation < 0.05, comparison
        assert comparison.decode_deviation < 0.05, comparison
        if concurrency == 1:
            # The configured numbers themselves: ~2,500 tok/s prefill, 68 tok/s decode.
            expected_ttft = DEEPSEEK.base_ttft_s + results[0].prompt_tokens / 2500
            assert abs(comparison.observed_ttft_s - expected_ttft) / expected_ttft < 0.05
            assert abs(comparison.observed_decode_tok_s - 68.0) / 68.0 < 0.05
        if concurrency == 8:
            # Streams overlap, so each one decodes slower than alone (45 tok/s at 10 users).
            assert comparison.expected_decode_tok_s < 0.9 * 68.0


async def test_repeated_prompt_hits_the_prefix_cache(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(DEEPSEEK_MODEL, time_scale=TIME_SCALE)
    prompt = filler(3000, "shared")
    before = metric_samples(engine)
    _, (cold,) = await run_wave(engine.url, DEEPSEEK_MODEL, 1, [prompt], 4)
    _, (warm,) = await run_wave(engine.url, DEEPSEEK_MODEL, 1, [prompt], 4)
    after = metric_samples(engine)
    assert warm.ttft < cold.ttft / 5
    queries = after["vllm:prefix_cache_queries_total"] - before["vllm:prefix_cache_queries_total"]
    hits = after["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
    assert queries == 2 * cold.prompt_tokens
    assert cold.prompt_tokens - 16 <= hits < cold.prompt_tokens
    # The warm TTFT follows the cached-prefill rate (~275K tok/s + fixed cost).
    cached_ttft = DEEPSEEK.base_ttft_s + hits / DEEPSEEK.cached_prefill_tok_s + (
        cold.prompt_tokens - hits) / DEEPSEEK.prefill_tok_s
    # 15%: this TTFT is only ~0.2 s, so a few ms of HTTP round trip show.
    assert abs(warm.ttft / TIME_SCALE - cached_ttft) / cached_ttft < 0.15
