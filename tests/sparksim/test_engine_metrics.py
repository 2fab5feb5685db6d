"""/metrics in Prometheus text with vLLM's names, and the capacity limits behind the gauges."""

import asyncio
import contextlib
import json
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparksim.standalone import EngineHandle
from tests.sparksim.conftest import DEEPSEEK, QWEN


def families(engine: EngineHandle) -> dict[str, object]:
    text = httpx.get(f"{engine.url}/metrics").text
    return {family.name: family for family in text_string_to_metric_families(text)}


def sample(engine: EngineHandle, name: str, **labels: str) -> float:
    text = httpx.get(f"{engine.url}/metrics").text
    for family in text_string_to_metric_families(text):
        for item in family.samples:
            if item.name == name and all(item.labels.get(k) == v for k, v in labels.items()):
                return float(item.value)
    raise KeyError(name)


def test_metrics_parse_with_vllm_names_and_labels(engine: EngineHandle) -> None:
    parsed = families(engine)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
                 "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success",
                 "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds", "vllm:cache_config_info"):
        assert name in parsed, name
    assert parsed["vllm:prompt_tokens"].type == "counter"  # type: ignore[attr-defined]
    ttft = parsed["vllm:time_to_first_token_seconds"]
    assert ttft.type == "histogram"  # type: ignore[attr-defined]
    labels = parsed["vllm:prompt_tokens"].samples[0].labels  # type: ignore[attr-defined]
    assert labels == {"model_name": DEEPSEEK, "engine": "0"}
    assert "vllm:spec_decode_num_drafts" not in parsed


def test_counters_move_with_requests(engine: EngineHandle) -> None:
    body = {"model": "deepseek", "messages": [{"role": "user", "content": "count me"}],
            "max_tokens": 7, "ignore_eos": True}
    usage = httpx.post(f"{engine.url}/v1/chat/completions", json=body).json()["usage"]
    assert sample(engine, "vllm:prompt_tokens_total") == usage["prompt_tokens"]
    assert sample(engine, "vllm:generation_tokens_total") == 7
    assert sample(engine, "vllm:request_success_total", finished_reason="length") == 1
    assert sample(engine, "vllm:time_to_first_token_seconds_count") == 1
    assert sample(engine, "vllm:inter_token_latency_seconds_count") == 6
    assert sample(engine, "vllm:e2e_request_latency_seconds_count") == 1


def test_spec_decode_counters_when_configured(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(DEEPSEEK, "--speculative-config",
                            '{"method":"dspark","num_speculative_tokens":3}')
    body = {"model": DEEPSEEK, "prompt": "spec", "max_tokens": 41, "ignore_eos": True}
    assert httpx.post(f"{engine.url}/v1/completions", json=body).status_code == 200
    drafts = sample(engine, "vllm:spec_decode_num_drafts_total")
    draft_tokens = sample(engine, "vllm:spec_decode_num_draft_tokens_total")
    accepted = sample(engine, "vllm:spec_decode_num_accepted_tokens_total")
    # As in vLLM: a draft proposes 3 tokens and yields its accepted ones plus one, so the 40
    # decode tokens (the first comes from the prefill) are drafts + accepted, less the tokens
    # of a last draft still open (at most 3 + 1).
    assert draft_tokens == 3 * drafts and 36 < drafts + accepted <= 40
    assert 0.5 < accepted / draft_tokens < 0.7  # acceptance ~0.6 by default (seed 003: 60-80%)
    assert 2.5 < 1 + accepted / drafts < 3.1  # vLLM's mean acceptance length, 1 + 3 x 0.6
    per_position = [sample(engine, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                           position=str(position)) for position in range(3)]
    assert sum(per_position) == accepted and per_position[0] > per_position[2]


async def test_kv_pool_makes_excess_requests_wait(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    # 4 MiB of KV at ~104K tokens/GiB is ~400 tokens: two 300-token answers both start
    # (nothing is reserved for the output, as in vLLM), then outgrow it; the newer is preempted
    # and waits until the first is done (~1.5 s at scale 1: long enough to be seen waiting).
    engine = engine_factory(QWEN, "--sim-profile", "deepseek", "--kv-cache-memory-bytes", "4M",
                            "--max-model-len", "400", time_scale=1.0)
    await assert_kv_preempts_the_newer(engine)


async def test_max_num_seqs_makes_excess_requests_wait(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(QWEN, "--max-num-seqs", "1", "--max-model-len", "4096", *SLOW_DECODE,
                            time_scale=0.2)
    await assert_second_request_waits(engine)


# One token a simulated second: a 300-token request runs for a minute of real time, so the
# first is still running when the second arrives however slow the machine (it is cut short).
SLOW_DECODE = ("--sim-decode-tok-s", "1")


async def assert_second_request_waits(engine: EngineHandle) -> None:
    """The first request is running (its first token arrived) before the second is sent: the
    second waits. When the first's client leaves (vLLM aborts it), the second runs."""
    url = f"{engine.url}/v1/chat/completions"

    def body(content: str) -> dict[str, object]:
        return {"model": QWEN, "messages": [{"role": "user", "content": content}], "max_tokens": 300,
                "ignore_eos": True, "stream": True}

    async def gauges_once(done: Callable[[dict[str, float]], bool]) -> dict[str, float]:
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            gauges = await asyncio.to_thread(gauge_values, engine)
            if done(gauges) or asyncio.get_running_loop().time() > deadline:
                return gauges
            await asyncio.sleep(0.05)

    async with httpx.AsyncClient(timeout=120) as client, contextlib.AsyncExitStack() as streams:
        first = await streams.enter_async_context(client.stream("POST", url, json=body("first")))
        first_lines = first.aiter_lines()  # kept: an iterator dropped half-read closes its response
        await anext(first_lines)  # a token: it runs
        second = await client.send(client.build_request("POST", url, json=body("second")), stream=True)
        try:
            gauges = await gauges_once(lambda g: g["vllm:num_requests_waiting"] > 0)
            assert gauges["vllm:num_requests_waiting"] == 1
            assert gauges["vllm:num_requests_running"] == 1
            assert gauges["vllm:kv_cache_usage_perc"] > 0
            await streams.aclose()  # the first's client leaves
            assert first.status_code == second.status_code == 200
            second_lines = second.aiter_lines()
            await anext(second_lines)  # the second runs now
            gauges = await gauges_once(lambda g: g["vllm:num_requests_waiting"] == 0)
            assert (gauges["vllm:num_requests_waiting"], gauges["vllm:num_requests_running"]) == (0, 1)
        finally:
            await second.aclose()


async def assert_kv_preempts_the_newer(engine: EngineHandle) -> None:
    """Two requests admitted together outgrow the KV pool: one waits (preempted), both finish."""
    body = {"model": QWEN, "messages": [{"role": "user", "content": "wait"}], "max_tokens": 300,
            "ignore_eos": True}
    async with httpx.AsyncClient(timeout=60) as client:
        requests = [asyncio.create_task(client.post(f"{engine.url}/v1/chat/completions",
                                                    json=body)) for _ in range(2)]
        gauges: dict[str, float] = {}
        deadline = asyncio.get_running_loop().time() + 60
        while asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
            gauges = gauge_values(engine)
            if gauges["vllm:num_requests_waiting"]:
                break
        assert gauges["vllm:num_requests_waiting"] == 1
        assert gauges["vllm:num_requests_running"] == 1
        assert gauges["vllm:kv_cache_usage_perc"] > 0
        responses = await asyncio.gather(*requests)
    assert [response.status_code for response in responses] == [200, 200]
    assert sample(engine, "vllm:num_requests_waiting") == 0


def gauge_values(engine: EngineHandle) -> dict[str, float]:
    """The three gauges from one scrape, so they describe the same moment."""
    text = httpx.get(f"{engine.url}/metrics").text
    return {
        item.name: float(item.value)
        for family in text_string_to_metric_families(text)
        if family.type == "gauge"
        for item in family.samples
    }


async def test_kv_outgrown_by_generation_preempts_the_newest_and_it_resumes(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    """vLLM's recompute preemption: nothing is reserved for the output, so two requests whose
    generations together outgrow a ~400-token pool both start; the newer one is preempted,
    waits, recomputes and finishes its stream with every token, none twice."""
    engine = engine_factory(QWEN, "--sim-profile", "deepseek", "--kv-cache-memory-bytes", "4M",
                            "--max-model-len", "400", time_scale=0.5)  # ~2 s per answer: they overlap
    body = {"model": QWEN, "prompt": "preempt", "max_tokens": 300, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}

    async def stream(client: httpx.AsyncClient) -> tuple[int, int]:
        chunks = usage = 0
        async with client.stream("POST", f"{engine.url}/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                payload = json.loads(line[6:])
                if payload.get("usage"):
                    usage = payload["usage"]["completion_tokens"]
                chunks += sum(1 for choice in payload.get("choices", []) if choice.get("text"))
        return chunks, usage

    async with httpx.AsyncClient(timeout=120) as client:
        results = await asyncio.gather(stream(client), stream(client))
    assert results == [(300, 300), (300, 300)]
    assert sample(engine, "vllm:num_preemptions_total") >= 1
    assert sample(engine, "vllm:generation_tokens_total") == 600
    state = httpx.get(f"{engine.url}/_sim/state").json()
    assert state["kv_used"] == 0 and state["running"] == 0 and state["waiting"] == 0
