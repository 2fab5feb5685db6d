"""Every fault switch, by command-line flag and by the /_sim/faults control endpoint."""

import time
from collections.abc import Callable

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparksim.standalone import EngineHandle
from tests.sparksim.conftest import QWEN, wait_for

CHAT = {"model": QWEN, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def refused(engine: EngineHandle) -> bool:
    return engine.health_status() is None


def set_faults(engine: EngineHandle, **faults: object) -> dict[str, object]:
    response = httpx.post(f"{engine.url}/_sim/faults", json=faults)
    response.raise_for_status()
    return dict(response.json())


def test_unavailable_flag_answers_503(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--sim-unavailable", wait=False)
    wait_for(lambda: engine.health_status() == 503, what="503 health")
    response = httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == 503
    client = openai.OpenAI(base_url=f"{engine.url}/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(**CHAT)  # type: ignore[call-overload]


def test_unavailable_by_control_endpoint_and_clear(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(QWEN)
    assert set_faults(engine, unavailable=True)["unavailable"] is True
    assert engine.health_status() == 503
    set_faults(engine, clear=True)
    assert engine.health_status() == 200
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200


def test_dies_after_n_requests(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--sim-die-after-requests", "2")
    for _ in range(2):
        assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert engine.health_status() == 503
    response = httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT)
    assert response.status_code == 500
    assert "EngineCore encountered an issue" in response.json()["error"]["message"]


def test_dies_mid_stream_and_exits(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--sim-die-mid-stream-after-tokens", "3",
                            "--sim-exit-on-death")
    client = openai.OpenAI(base_url=f"{engine.url}/v1", api_key="x", max_retries=0)
    received = 0
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        stream = client.chat.completions.create(
            model=QWEN, messages=[{"role": "user", "content": "long"}], max_tokens=50,
            stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received += 1
    assert received == 3
    wait_for(lambda: engine.process.poll() is not None, what="engine exit")
    assert engine.process.returncode == 1
    assert "EngineDeadError" in engine.log()


def test_die_now_by_control_endpoint(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    assert set_faults(engine, die=True)["dead"] is True
    assert engine.health_status() == 503


def test_added_latency_delays_every_request(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    set_faults(engine, latency_s=0.3)
    started = time.monotonic()
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert time.monotonic() - started >= 0.3


def ttft_sum(engine: EngineHandle) -> float:
    for family in text_string_to_metric_families(httpx.get(f"{engine.url}/metrics").text):
        for sample in family.samples:
            if sample.name == "vllm:time_to_first_token_seconds_sum":
                return float(sample.value)
    raise AssertionError("no TTFT histogram")


def test_slow_prefill_multiplies_the_time_to_first_token(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    normal = ttft_sum(engine)
    set_faults(engine, slow_prefill_factor=200)
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    slowed = ttft_sum(engine) - normal
    assert slowed >= 200 * 0.05  # at least 200 × Qwen's fixed 0.05 s (simulated seconds)
    assert set_faults(engine, clear=True)["slow_prefill_factor"] == 1.0


def test_refuse_connections_by_control_endpoint_then_recover(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(QWEN)
    set_faults(engine, refuse_connections_s=0.6)
    wait_for(lambda: refused(engine), what="connections refused")
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT)
    wait_for(lambda: engine.health_status() == 200, what="listener back")


def test_refuse_connections_flag_delays_the_listener(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(QWEN, "--sim-refuse-connections-s", "0.8", wait=False)
    wait_for(lambda: "refusing connections" in engine.log(), what="refusal logged")
    assert refused(engine)
    engine.wait_healthy(timeout=10)


def test_slow_start_up_keeps_the_port_closed(engine_factory: Callable[..., EngineHandle]) -> None:
    started = time.monotonic()
    # 150 simulated seconds at time scale 0.01 = 1.5 s: vLLM binds only once loaded.
    engine = engine_factory(QWEN, "--sim-startup-s", "150", wait=False)
    wait_for(lambda: "Starting to load model" in engine.log(), what="loading")
    assert refused(engine)
    engine.wait_healthy(timeout=15)
    assert time.monotonic() - started >= 1.5
    assert "Application startup complete." in engine.log()


def test_sigint_shuts_down_gracefully(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    assert engine.stop() == 0
    assert "Shutting down FastAPI HTTP server." in engine.log()


def test_fault_counters_by_control_endpoint(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    set_faults(engine, die_after_requests=1)
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert engine.health_status() == 503
    set_faults(engine, clear=True)
    assert engine.health_status() == 200
    set_faults(engine, die_mid_stream_after_tokens=2)
    body = {**CHAT, "max_tokens": 20, "stream": True, "ignore_eos": True}
    with pytest.raises(httpx.HTTPError), httpx.stream(
        "POST", f"{engine.url}/v1/chat/completions", json=body
    ) as response:
        list(response.iter_lines())  # cut before [DONE]: the chunked body never ends
    assert engine.health_status() == 503


def test_latency_flag(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, "--sim-latency-s", "0.25")
    started = time.monotonic()
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert time.monotonic() - started >= 0.25


def test_client_disconnect_aborts_the_request(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN, time_scale=0.5)
    body = {**CHAT, "max_tokens": 500, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if '"content":"' in line and '"role"' not in line:
                break  # leave after the first token

    def aborted() -> bool:
        values = {
            (item.name, item.labels.get("finished_reason")): item.value
            for family in text_string_to_metric_families(httpx.get(f"{engine.url}/metrics").text)
            for item in family.samples
        }
        return (values[("vllm:request_success_total", "abort")] == 1
                and values[("vllm:num_requests_running", None)] == 0)

    wait_for(aborted, what="abort counted and slot freed")
