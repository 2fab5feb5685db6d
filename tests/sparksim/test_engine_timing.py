"""The engine core keeps the timing model's clock: TTFT, decode speed under concurrency and
the prefix cache, checked exactly on a simulated clock (sparksim.virtual_clock), so the
machine's load cannot move the figures. Real-time fidelity is measured by
perf/sparksim_timing.py."""

import asyncio
from dataclasses import dataclass

import pytest

from sparksim.engine.config import EngineConfig, build_engine_config
from sparksim.engine.scheduler import EngineCore, ScheduledRequest
from sparksim.engine.vllm_args import parse_serve_args
from sparksim.timing import DEEPSEEK, PlannedRequest, prefill_seconds, simulate
from sparksim.virtual_clock import run_on_virtual_clock
from tests.conftest import SIM_DEEPSEEK, SIM_DEEPSEEK_FLAGS


def deepseek_config(*flags: str) -> EngineConfig:
    return build_engine_config(parse_serve_args(
        [SIM_DEEPSEEK, *SIM_DEEPSEEK_FLAGS, "--time-scale", "1", *flags]))


@dataclass
class Observed:
    arrived_at: float
    first_token_at: float
    last_token_at: float
    tokens: int


async def consume(request: ScheduledRequest) -> Observed:
    loop = asyncio.get_running_loop()
    first = last = 0.0
    tokens = 0
    while not request.done or not request.events.empty():
        await request.events.get()
        tokens += 1
        last = loop.time()
        first = first or last
    return Observed(request.arrived_at, first, last, tokens)


def prompt(length: int, salt: int) -> list[int]:
    return [salt * 100_000 + index for index in range(length)]


def run_wave(config: EngineConfig, prompts: list[list[int]], output_tokens: int) -> list[Observed]:
    async def wave() -> list[Observed]:
        core = EngineCore(config)
        core.start()
        requests = [core.submit(ids, [output_tokens]) for ids in prompts]
        observed = await asyncio.gather(*(consume(request) for request in requests))
        await core.stop()
        return list(observed)

    return run_on_virtual_clock(wave())


@pytest.mark.parametrize("concurrency", [1, 2, 4, 8])
def test_a_wave_of_streams_follows_the_timing_model(concurrency: int) -> None:
    config = deepseek_config("--no-enable-prefix-caching")
    # 2,400 tokens: a prefill of 2,500 (1 s = 68 decode steps of 1/68 s) ends exactly on a
    # step boundary, where float rounding alone decides whether a stream joins that step.
    observed = run_wave(config, [prompt(2400, salt) for salt in range(concurrency)], 128)
    expected = simulate(DEEPSEEK, [PlannedRequest(0.0, 2400, 128)] * concurrency)
    assert [item.tokens for item in observed] == [128] * concurrency
    for seen, line in zip(observed, expected, strict=True):
        assert seen.first_token_at - seen.arrived_at == pytest.approx(line.first_token_s)
        assert seen.last_token_at == pytest.approx(line.finish_s)


def test_one_stream_alone_gets_the_configured_prefill_and_decode() -> None:
    (seen,) = run_wave(deepseek_config("--no-enable-prefix-caching"), [prompt(2500, 0)], 69)
    # Alone, the prefill is its whole work; then 68 tok/s (seed 000, one user).
    assert seen.first_token_at == pytest.approx(prefill_seconds(DEEPSEEK, 2500, 0))
    assert (seen.tokens - 1) / (seen.last_token_at - seen.first_token_at) == pytest.approx(68.0)


def test_eight_streams_each_decode_slower_than_one() -> None:
    observed = run_wave(deepseek_config("--no-enable-prefix-caching"),
                        [prompt(300, salt) for salt in range(8)], 128)
    rates = [(item.tokens - 1) / (item.last_token_at - item.first_token_at) for item in observed]
    assert max(rates) < 0.9 * 68.0


def test_a_repeated_prompt_is_served_from_the_prefix_cache() -> None:
    config = deepseek_config()
    ids = prompt(12_000, 7)

    async def twice() -> tuple[Observed, Observed, int]:
        core = EngineCore(config)
        core.start()
        cold = await consume(core.submit(ids, [4]))
        warm_request = core.submit(ids, [4])
        warm = await consume(warm_request)
        await core.stop()
        return cold, warm, warm_request.cached_tokens

    cold, warm, hits = run_on_virtual_clock(twice())
    assert len(ids) - config.block_size <= hits < len(ids)  # whole blocks, never the last token
    assert cold.first_token_at - cold.arrived_at == pytest.approx(prefill_seconds(DEEPSEEK, len(ids), 0))
    assert warm.first_token_at - warm.arrived_at == pytest.approx(
        prefill_seconds(DEEPSEEK, len(ids) - hits, hits))
