"""The official openai client (sync and async) against the gateway served by uvicorn, in
front of a sparksim engine (a real process over HTTP). The one fault sparksim cannot make
(usage on a chunk that also has choices) uses the hand-written upstream."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from sparksim.standalone import EngineHandle
from tests.gateway.conftest import SIM_SERVED, Gateway, engine_completed, engine_received, run_async
from tests.gateway.upstreams import CountingUpstream

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
HI = [{"role": "user", "content": "hi"}]


def client(gateway: Gateway, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.secret, **kwargs)  # type: ignore[arg-type]


def direct(engine: EngineHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{engine.url}/v1", api_key="x", max_retries=0)


def test_it_answers_a_chat_completion_and_names_the_lane(gateway: Gateway, qwen_engine: EngineHandle) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(model="auto", max_tokens=16, messages=HI)
    completion = raw.parse()
    assert raw.headers["x-spark-lane"] == "qwen"
    assert raw.headers["x-spark-route-reason"] == "default"
    assert raw.headers["x-request-id"].startswith("req-")
    assert engine_received(qwen_engine)[0]["model"] == SIM_SERVED
    assert engine_completed(qwen_engine) == 1
    # The engine's answer to the same request, untouched by the gateway.
    expected = direct(qwen_engine).chat.completions.create(model=SIM_SERVED, max_tokens=16, messages=HI)
    assert completion.choices[0].message.content == expected.choices[0].message.content
    assert completion.usage == expected.usage


def test_it_passes_unknown_fields_and_vllm_extras_through_untouched(
    gateway: Gateway, qwen_engine: EngineHandle
) -> None:
    client(gateway).chat.completions.create(
        model="qwen", max_tokens=4, messages=HI,
        extra_body={"top_k": 20, "min_p": 0.05, "chat_template_kwargs": {"enable_thinking": False}, "x_custom": [1, 2]})
    (sent,) = engine_received(qwen_engine)
    assert sent["top_k"] == 20 and sent["min_p"] == 0.05
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["x_custom"] == [1, 2]


def test_it_accepts_the_served_model_name_and_n(gateway: Gateway) -> None:
    completion = client(gateway).chat.completions.create(model=SIM_SERVED, n=3, max_tokens=4, messages=HI)
    assert [choice.index for choice in completion.choices] == [0, 1, 2]


def test_it_returns_tool_calls(gateway: Gateway) -> None:
    completion = client(gateway).chat.completions.create(
        model="qwen", tools=TOOLS, messages=[{"role": "user", "content": "weather?"}])  # type: ignore[arg-type]
    assert completion.choices[0].finish_reason == "tool_calls"
    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert "city" in json.loads(call.function.arguments)  # type: ignore[union-attr]


@pytest.mark.parametrize("include_usage", [True, False])
def test_it_streams_and_gives_usage_only_when_asked(
    gateway: Gateway, qwen_engine: EngineHandle, include_usage: bool
) -> None:
    options = {"include_usage": True} if include_usage else None
    stream = client(gateway).chat.completions.create(
        model="auto", stream=True, max_tokens=16, messages=HI,
        **({"stream_options": options} if options else {}))  # type: ignore[call-overload]
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = direct(qwen_engine).chat.completions.create(model=SIM_SERVED, max_tokens=16, messages=HI)
    assert text == whole.choices[0].message.content
    usage_chunks = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert len(usage_chunks) == 1 and usage_chunks[0].choices == [] and usage_chunks[0] is chunks[-1]
        assert usage_chunks[0].usage == whole.usage
    else:
        assert usage_chunks == []
    # The gateway always asks the lane for usage (to count tokens).
    assert engine_received(qwen_engine)[0]["stream_options"] == {"include_usage": True}


def test_it_streams_tool_call_arguments_as_fragments(gateway: Gateway) -> None:
    messages = [{"role": "user", "content": "weather?"}]
    stream = client(gateway).chat.completions.create(
        model="qwen", stream=True, tools=TOOLS, stream_options={"include_usage": True},  # type: ignore[arg-type]
        messages=messages)
    fragments = [c.choices[0].delta.tool_calls[0].function.arguments  # type: ignore[index, union-attr]
                 for c in stream if c.choices and c.choices[0].delta.tool_calls]
    whole = client(gateway).chat.completions.create(
        model="qwen", tools=TOOLS, messages=messages)  # type: ignore[arg-type]
    # Streamed as they came, one fragment per token (LiteLLM #38926 collapsed them into one burst).
    assert len([fragment for fragment in fragments if fragment]) > 1
    assert "".join(fragment or "" for fragment in fragments) == \
        whole.choices[0].message.tool_calls[0].function.arguments  # type: ignore[index, union-attr]


def test_it_splits_usage_off_a_final_chunk_that_has_choices(fault_gateway: Gateway, upstream: CountingUpstream) -> None:
    upstream.mode = "usage_on_choices"  # vLLM never does this; other servers do
    chunks = list(client(fault_gateway).chat.completions.create(
        model="qwen", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "hi"}]))
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0].choices == []  # never usage on a chunk with choices (#8450)
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_it_streams_completions_with_n(gateway: Gateway) -> None:
    chunks = list(client(gateway).completions.create(model="qwen", prompt="Say hi", n=2, max_tokens=8,
                                                         stream=True))
    indexes = {c.choices[0].index for c in chunks if c.choices}
    assert indexes == {0, 1}


def test_the_async_client_streams_and_completes(gateway: Gateway, qwen_engine: EngineHandle) -> None:
    async def scenario() -> None:
        async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key=gateway.secret) as aclient:
            completion = await aclient.chat.completions.create(model="auto", max_tokens=8, messages=HI)
            assert completion.choices[0].message.content
            stream = await aclient.chat.completions.create(
                model="auto", stream=True, max_tokens=8, stream_options={"include_usage": True}, messages=HI)
            chunks = [chunk async for chunk in stream]
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    run_async(scenario)
    assert engine_completed(qwen_engine) == 2


def test_it_lists_models_and_describes_one(gateway: Gateway) -> None:
    models = client(gateway).models.list()
    assert [m.id for m in models.data] == ["auto", SIM_SERVED]
    assert client(gateway).models.retrieve(SIM_SERVED).id == SIM_SERVED
    with pytest.raises(openai.NotFoundError):
        client(gateway).models.retrieve("nope")


def test_per_lane_base_urls_and_the_seed_aliases_reach_the_lane(
    gateway: Gateway, qwen_engine: EngineHandle
) -> None:
    lane_client = openai.OpenAI(base_url=f"{gateway.url}/lanes/qwen/v1", api_key=gateway.secret)
    assert lane_client.chat.completions.create(model="anything", max_tokens=4, messages=HI).choices
    assert [m.id for m in lane_client.models.list().data] == [SIM_SERVED]
    alias = httpx.post(f"{gateway.url}/v1/chat/qwen", headers=gateway.headers(),
                       json={"model": "x", "max_tokens": 4, "messages": HI})
    assert alias.status_code == 200 and alias.headers["x-spark-lane"] == "qwen"
    alias_client = openai.OpenAI(base_url=f"{gateway.url}/v1/chat/qwen", api_key=gateway.secret)
    assert alias_client.chat.completions.create(model="x", max_tokens=4, messages=HI).choices
    assert engine_completed(qwen_engine) == 3
