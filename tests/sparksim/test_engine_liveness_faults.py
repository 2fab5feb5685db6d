"""The failures /health does not show: a hung engine, one stuck mid-stream, gibberish; and the
progress a long cold prefill shows in vLLM's per-step counter before its first token."""

import threading
import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sparksim.standalone import EngineHandle
from tests.sparksim.conftest import DEEPSEEK, QWEN, wait_for

CHAT = {"model": QWEN, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8}


def set_faults(engine: EngineHandle, **faults: object) -> dict[str, object]:
    response = httpx.post(f"{engine.url}/_sim/faults", json=faults)
    response.raise_for_status()
    return dict(response.json())


def progress(engine: EngineHandle) -> dict[str, float]:
    """The counters a watcher of forward progress reads, and the running gauge."""
    text = httpx.get(f"{engine.url}/metrics").text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in (
                "vllm:num_requests_running",
                "vllm:prompt_tokens_total",
                "vllm:generation_tokens_total",
                "vllm:iteration_tokens_total_sum",
                "vllm:iteration_tokens_total_count",
            ):
                values[sample.name] = sample.value
    return values


def test_a_hung_engine_answers_health_and_models_but_no_token(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--sim-hang")
    assert engine.health_status() == 200
    assert httpx.get(f"{engine.url}/v1/models").json()["data"][0]["id"] == QWEN
    answers: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: answers.append(httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT, timeout=60))
    )
    thread.start()
    wait_for(lambda: progress(engine).get("vllm:num_requests_running") == 1, what="request running")
    before = progress(engine)
    time.sleep(1.0)  # the engine is given time to produce something; it must not
    after = progress(engine)
    assert after == before and after["vllm:generation_tokens_total"] == 0
    assert not answers and engine.health_status() == 200
    set_faults(engine, hang=False)  # lifted: the request goes on
    thread.join(timeout=30)
    assert answers and answers[0].status_code == 200
    assert progress(engine)["vllm:generation_tokens_total"] == 8


def test_stuck_mid_stream_after_k_tokens_until_cleared(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    set_faults(engine, hang_after_tokens=3)
    received: list[str] = []

    def stream() -> None:
        body = {**CHAT, "max_tokens": 10, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body, timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: ") and '"content":"' in line and '"content":""' not in line:
                    received.append(line)

    thread = threading.Thread(target=stream)
    thread.start()
    wait_for(lambda: len(received) == 3, what="three tokens")
    time.sleep(0.5)
    assert len(received) == 3 and set_faults(engine)["hang"] is True
    assert progress(engine)["vllm:num_requests_running"] == 1
    set_faults(engine, clear=True)
    thread.join(timeout=30)
    assert len(received) == 10


def test_gibberish_repeats_one_token(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--sim-gibberish")
    answer = httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).json()
    assert answer["choices"][0]["message"]["content"] == "!" * 8
    set_faults(engine, gibberish=False)
    text = httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).json()["choices"][0]["message"]["content"]
    assert text and text != "!" * len(text)


def test_a_long_cold_prefill_advances_iteration_tokens_before_its_first_token(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    # 150K tokens at the DeepSeek profile: ~64 s of prefill, 1.9 s real at this scale.
    engine = engine_factory(DEEPSEEK, "--max-model-len", "262144", time_scale=0.03)
    prompt = "word " * 150_000
    assert httpx.post(f"{engine.url}/tokenize", json={"prompt": prompt}).json()["count"] >= 150_000
    answers: list[httpx.Response] = []
    thread = threading.Thread(
        target=lambda: answers.append(
            httpx.post(
                f"{engine.url}/v1/completions", json={"model": DEEPSEEK, "prompt": prompt, "max_tokens": 1}, timeout=120
            )
        )
    )
    thread.start()
    wait_for(lambda: progress(engine).get("vllm:iteration_tokens_total_count", 0) >= 1, what="first chunk")
    first = progress(engine)
    wait_for(
        lambda: progress(engine)["vllm:iteration_tokens_total_count"] > first["vllm:iteration_tokens_total_count"],
        what="second chunk",
    )
    during = progress(engine)
    assert during["vllm:generation_tokens_total"] == 0 and during["vllm:num_requests_running"] == 1
    assert during["vllm:iteration_tokens_total_sum"] > first["vllm:iteration_tokens_total_sum"] > 0
    thread.join(timeout=120)
    assert answers[0].status_code == 200, answers[0].text
    done = progress(engine)
    assert done["vllm:generation_tokens_total"] == 1
    assert abs(done["vllm:iteration_tokens_total_sum"] - done["vllm:prompt_tokens_total"] - 1) <= 2
