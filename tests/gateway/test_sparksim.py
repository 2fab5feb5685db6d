"""The gateway in front of real sparksim engines over HTTP (the official client), and
mirrored traffic replayed to a second engine standing in for the external endpoint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from django.contrib.auth.models import User

from gateway.models import MirrorSample, RequestLog
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, AsgiServer, wait_for
from tests.gateway.conftest import create_key, make_lane, unused_port

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


@pytest.fixture
def engines(engine_factory: Callable[..., EngineHandle]) -> Callable[..., EngineHandle]:
    def start(*served: str) -> EngineHandle:
        return engine_factory(SIM_QWEN, "--served-model-name", *served, time_scale=0.001)

    return start


@pytest.fixture
def sim_client(asgi_server: AsgiServer, key_owner: User, engines: Callable[..., EngineHandle],
               settings: Any) -> openai.OpenAI:
    engine = engines("qwen3.8")
    make_lane("qwen", engine.port, served="qwen3.8", max_model_len=32768)
    settings.GATEWAY_DEFAULT_LANE = "qwen"
    secret, _ = create_key(key_owner)
    return openai.OpenAI(base_url=f"{asgi_server.url}/v1", api_key=secret)


def test_the_official_client_through_the_gateway_to_a_sparksim_engine(sim_client: openai.OpenAI) -> None:
    completion = sim_client.chat.completions.create(model="auto", n=2, max_tokens=8,
                                                    messages=[{"role": "user", "content": "Hello there"}])
    assert len(completion.choices) == 2 and completion.usage and completion.usage.completion_tokens > 0
    chunks = list(sim_client.chat.completions.create(
        model="qwen", stream=True, max_tokens=8, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Hello there"}]))
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    plain = list(sim_client.chat.completions.create(model="qwen3.8", stream=True, max_tokens=8,
                                                    messages=[{"role": "user", "content": "Hello"}]))
    assert all(c.usage is None for c in plain) and any(c.choices[0].delta.content for c in plain if c.choices)
    text = sim_client.completions.create(model="qwen", prompt="Once upon", max_tokens=5)
    assert text.choices[0].text
    wait_for(lambda: RequestLog.objects.filter(lane="qwen", status=200).count() == 4, what="the request log batch")
    row = RequestLog.objects.filter(stream=True, lane="qwen").first()
    assert row is not None and row.completion_tokens and row.ttft_ms is not None and row.prompt_text == ""
    # Each row keeps when the request arrived (a replay's schedule): before its batch was
    # written, by at least the request's own latency.
    for arrived, written, latency_ms in RequestLog.objects.values_list("received_at", "created_at", "latency_ms"):
        assert arrived is not None and (written - arrived).total_seconds() * 1000 >= latency_ms - 1


def test_tool_calls_stream_through_from_sparksim(sim_client: openai.OpenAI) -> None:
    stream = sim_client.chat.completions.create(
        model="qwen", stream=True, tools=TOOLS, tool_choice="required", max_tokens=64,  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "Weather in Paris?"}])
    deltas = [c.choices[0].delta.tool_calls for c in stream if c.choices and c.choices[0].delta.tool_calls]
    assert deltas, "no tool-call delta came through"
    assert deltas[0][0].function and deltas[0][0].function.name == "get_weather"  # type: ignore[index]


def test_mirrored_traffic_is_replayed_and_scored(sim_client: openai.OpenAI, engines: Callable[..., EngineHandle],
                                               settings: Any) -> None:
    external = engines("gpt-external")
    settings.GATEWAY_MIRROR_BASE_URL = f"{external.url}/v1"
    settings.GATEWAY_MIRROR_MODEL = "gpt-external"
    settings.GATEWAY_MIRROR_API_KEY = "sk-external-secret"
    settings.GATEWAY_MIRROR_SHARE = 1.0
    sim_client.chat.completions.create(model="qwen", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    list(sim_client.chat.completions.create(model="qwen", stream=True, max_tokens=8,
                                            messages=[{"role": "user", "content": "Hi again"}]))
    samples = wait_for(lambda: list(MirrorSample.objects.all()) if MirrorSample.objects.count() == 2 else None,
                       what="two mirrored samples")
    for sample in samples:
        assert sample.error == "" and sample.external_model == "gpt-external"
        assert sample.divergence is not None and 0 <= sample.divergence <= 1
        assert sample.local_chars > 0 and sample.external_chars and sample.external_latency_ms


def test_a_failing_mirror_endpoint_never_fails_the_client(sim_client: openai.OpenAI, settings: Any) -> None:
    settings.GATEWAY_MIRROR_BASE_URL = f"http://127.0.0.1:{unused_port()}/v1"
    settings.GATEWAY_MIRROR_MODEL = "gpt-external"
    settings.GATEWAY_MIRROR_SHARE = 1.0
    answer = sim_client.chat.completions.create(model="qwen", max_tokens=8, messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content
    sample = wait_for(lambda: MirrorSample.objects.first(), what="the failed sample")
    assert sample.error and sample.divergence is None


def test_mirrored_traffic_is_off_when_not_configured(sim_client: openai.OpenAI) -> None:
    sim_client.chat.completions.create(model="qwen", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    wait_for(lambda: RequestLog.objects.count() == 1, what="the request log")
    assert not MirrorSample.objects.exists()


def test_five_invalid_requests_to_a_sparksim_lane_leave_it_answering_other_keys(
    sim_client: openai.OpenAI, key_owner: User, asgi_server: AsgiServer, settings: Any
) -> None:
    settings.GATEWAY_BREAKER_FAILURES = 2
    bad: list[dict[str, Any]] = [{"temperature": "hot"}, {"n": "two"}, {"messages": [1, 2]}, {"stream": 1},
                                 {"tools": True}]
    for fields in bad:
        with pytest.raises(openai.BadRequestError) as caught:
            sim_client.chat.completions.create(**{"model": "qwen", "messages": [{"role": "user", "content": "Hi"}],
                                                  **fields})
        assert caught.value.body["param"].split("[")[0] in fields  # type: ignore[index]
    secret, _ = create_key(key_owner, name="other-team")
    other = openai.OpenAI(base_url=f"{asgi_server.url}/v1", api_key=secret, max_retries=0)
    answer = other.chat.completions.create(model="qwen", max_tokens=4, messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content
