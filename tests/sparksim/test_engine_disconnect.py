"""A streaming client that goes away while its prompt prefills (--sim-abort-on-disconnect).

With `write` (the default) the engine notices a streaming client's disconnect only when it
next writes to it, and it writes nothing before the first token: a request dropped during
prefill is prefilled to the end, then aborted (as seed 003's timed-out cold requests were).
`immediate` aborts it when the connection closes.
Runs an in-process engine on the simulated clock, so the long prefill takes no real time.
"""

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.loadgen import filler_text
from sparksim.inprocess import engine_config, serving
from sparksim.virtual_clock import run_on_virtual_clock
from tests.conftest import SIM_DEEPSEEK, SIM_DEEPSEEK_FLAGS

PROMPT_TOKENS = 40_000  # ~15 simulated seconds of prefill with the DeepSeek profile
CLIENT_GIVES_UP_S = 2.0  # simulated seconds without a chunk


def counters(text: str) -> dict[tuple[str, str | None], float]:
    return {(sample.name, sample.labels.get("finished_reason")): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


async def drop_during_prefill(mode: str) -> dict[str, dict[tuple[str, str | None], float]]:
    """A client streams a long prompt and gives up while it prefills; /metrics read just
    after it left and long after the prefill would have ended."""
    config = engine_config(SIM_DEEPSEEK, *SIM_DEEPSEEK_FLAGS, "--sim-abort-on-disconnect", mode)
    loop = asyncio.get_running_loop()
    async with serving(config) as url, httpx.AsyncClient(trust_env=False) as client:
        text = filler_text(PROMPT_TOKENS, "dropped")
        counted = (await client.post(f"{url}/tokenize", json={"model": SIM_DEEPSEEK, "prompt": text})).json()["count"]
        body = {"model": SIM_DEEPSEEK, "prompt": text, "max_tokens": 64, "stream": True}
        started = loop.time()
        with pytest.raises(httpx.ReadTimeout):
            async with client.stream("POST", f"{url}/v1/completions", json=body,
                                     timeout=httpx.Timeout(60.0, read=CLIENT_GIVES_UP_S)) as response:
                async for _ in response.aiter_lines():
                    pass
        assert loop.time() - started < 10.0  # it left well before its prefill could end
        await asyncio.sleep(0.5)
        after_leaving = (await client.get(f"{url}/metrics")).text
        await asyncio.sleep(60.0)
        later = (await client.get(f"{url}/metrics")).text
    return {"prompt": {("count", None): float(counted)}, "after_leaving": counters(after_leaving),
            "later": counters(later)}


def test_a_request_dropped_during_prefill_is_prefilled_to_the_end_by_default() -> None:
    seen = run_on_virtual_clock(drop_during_prefill("write"))
    prompt_tokens = seen["prompt"][("count", None)]
    assert prompt_tokens >= PROMPT_TOKENS * 0.9
    # Just after the client left, the engine still holds the request and has not aborted it.
    assert seen["after_leaving"][("vllm:num_requests_running", None)] == 1
    assert seen["after_leaving"][("vllm:request_success_total", "abort")] == 0
    # It prefilled the whole prompt (vLLM's prompt-token counter), then aborted at its first
    # write, generating only that first token.
    assert seen["later"][("vllm:prompt_tokens_total", None)] == prompt_tokens
    assert seen["later"][("vllm:generation_tokens_total", None)] == 1
    assert seen["later"][("vllm:request_success_total", "abort")] == 1
    assert seen["later"][("vllm:num_requests_running", None)] == 0


def test_immediate_abort_drops_the_request_when_the_client_leaves() -> None:
    seen = run_on_virtual_clock(drop_during_prefill("immediate"))
    assert seen["after_leaving"][("vllm:request_success_total", "abort")] == 1
    assert seen["after_leaving"][("vllm:num_requests_running", None)] == 0
    # Nothing was prefilled to the end, nothing generated.
    assert seen["later"][("vllm:prompt_tokens_total", None)] == 0
    assert seen["later"][("vllm:generation_tokens_total", None)] == 0
