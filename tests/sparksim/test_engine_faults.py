"""Every fault switch, by command-line flag and by the /_sim/faults control endpoint."""

import asyncio
import threading
from collections.abc import Callable

import httpx
import openai
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from prometheus_client.parser import text_string_to_metric_families

from sparksim.engine.config import build_engine_config
from sparksim.engine.runner import simulate_loading
from sparksim.engine.server import EngineServer
from sparksim.engine.vllm_args import parse_serve_args
from sparksim.standalone import EngineHandle
from sparksim.virtual_clock import run_on_virtual_clock
from tests.sparksim.conftest import QWEN, wait_for

WINDOW_S = 3.0
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


def test_added_latency_is_set_by_control_endpoint(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    assert set_faults(engine, latency_s=0.3)["latency_s"] == 0.3
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200



def test_held_requests_wait_until_the_hold_is_lifted(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    assert set_faults(engine, hold=True)["hold"] is True
    answers: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: answers.append(
        httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT, timeout=120)))
    sender.start()
    wait_for(lambda: httpx.get(f"{engine.url}/_sim/requests").json(), what="the request to arrive")
    assert engine.health_status() == 200  # only requests to the model routes wait
    sender.join(timeout=1)
    assert sender.is_alive() and not answers  # held, however long the machine takes
    assert set_faults(engine, hold=False)["hold"] is False
    sender.join(timeout=60)
    assert [answer.status_code for answer in answers] == [200]

def qwen_server(*flags: str) -> EngineServer:
    return EngineServer(build_engine_config(parse_serve_args([QWEN, "--time-scale", "1", *flags])))


def test_added_latency_delays_the_request_by_that_much() -> None:
    async def delay() -> float:
        server = qwen_server("--sim-latency-s", "0.25")
        loop = asyncio.get_running_loop()
        reached: list[float] = []

        async def handler(request: web.Request) -> web.Response:
            reached.append(loop.time())
            return web.Response()

        await server.guarded(handler)(make_mocked_request("POST", "/v1/chat/completions"))
        return reached[0]

    assert run_on_virtual_clock(delay()) == pytest.approx(0.25)


def test_refused_connections_come_back_after_the_window() -> None:
    async def window() -> list[tuple[float, bool]]:
        server = qwen_server()
        loop = asyncio.get_running_loop()
        changes: list[tuple[float, bool]] = []

        async def set_listening(listening: bool) -> None:
            changes.append((loop.time(), listening))

        server.set_listening = set_listening
        server.faults.refuse_connections_s = 0.6
        await server.refuse_connections_for(0.6)
        assert server.faults.refuse_connections_s is None
        return changes

    assert run_on_virtual_clock(window()) == [(0.0, False), (pytest.approx(0.6), True)]


def test_loading_takes_the_profiles_start_up_time_scaled() -> None:
    config = build_engine_config(parse_serve_args([QWEN, "--time-scale", "0.01",
                                                   "--sim-startup-s", "150"]))

    async def load() -> float:
        await simulate_loading(config, asyncio.Event())
        return asyncio.get_running_loop().time()

    assert run_on_virtual_clock(load()) == pytest.approx(1.5)


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
    # The window's length is checked on a simulated clock above; here it only has to be
    # long enough for a loaded machine to look inside it.
    set_faults(engine, refuse_connections_s=WINDOW_S)
    wait_for(lambda: "refusing connections" in engine.log(), what="refusal logged")
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT)
    wait_for(lambda: "accepting connections again" in engine.log(), timeout=30, what="reopened")
    assert engine.health_status() == 200


def test_refuse_connections_flag_delays_the_listener(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(QWEN, "--sim-refuse-connections-s", str(WINDOW_S), wait=False)
    wait_for(lambda: "refusing connections" in engine.log(), what="refusal logged")
    assert refused(engine)
    engine.wait_healthy(timeout=30)


def test_slow_start_up_keeps_the_port_closed(engine_factory: Callable[..., EngineHandle]) -> None:
    # vLLM binds only once loaded (the loading time is checked on a simulated clock above).
    engine = engine_factory(QWEN, "--sim-startup-s", "150", wait=False)
    wait_for(lambda: "Starting to load model" in engine.log(), what="loading")
    assert refused(engine)
    engine.wait_healthy(timeout=15)
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
    assert httpx.get(f"{engine.url}/_sim/faults").json()["latency_s"] == 0.25
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200


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


def test_a_death_count_set_by_control_counts_from_then(engine_factory: Callable[..., EngineHandle]) -> None:
    engine = engine_factory(QWEN)
    for _ in range(2):
        assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    set_faults(engine, die_after_requests=2)
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert engine.health_status() == 200  # one of the two more
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert engine.health_status() == 503


def test_requests_are_recorded_as_they_arrive_even_when_a_fault_answers(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(QWEN)
    assert httpx.post(f"{engine.url}/v1/chat/completions", json={**CHAT, "top_k": 5}).status_code == 200
    set_faults(engine, unavailable=True)
    assert httpx.post(f"{engine.url}/v1/completions", json={"model": QWEN, "prompt": "x"}).status_code == 503
    assert httpx.post(f"{engine.url}/tokenize", content=b"{not json").status_code == 503
    httpx.get(f"{engine.url}/health")  # not a model route: not recorded
    assert httpx.get(f"{engine.url}/_sim/requests").json() == [
        {"path": "/v1/chat/completions", "body": {**CHAT, "top_k": 5}},
        {"path": "/v1/completions", "body": {"model": QWEN, "prompt": "x"}},
        {"path": "/tokenize", "body": "{not json"},
    ]
