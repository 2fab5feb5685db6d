"""The official openai client (sync and async) against the gateway served by uvicorn, in
front of a real HTTP upstream."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import Gateway, run_async
from tests.gateway.upstreams import CountingUpstream

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


def client(gateway: Gateway, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.secret, **kwargs)  # type: ignore[arg-type]


def test_it_answers_a_chat_completion_and_names_the_lane(gateway: Gateway, upstream: CountingUpstream) -> None:
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hi"}])
    completion = raw.parse()
    assert completion.choices[0].message.content == "Hello from qwen-test choice 0."
    assert completion.usage is not None and completion.usage.prompt_tokens == 11
    assert raw.headers["x-spark-lane"] == "qwen"
    assert raw.headers["x-spark-route-reason"] == "default"
    assert raw.headers["x-request-id"].startswith("req-")
    assert upstream.bodies[0]["model"] == "qwen-test"
    assert upstream.completions == 1


def test_it_passes_unknown_fields_and_vllm_extras_through_untouched(gateway: Gateway, upstream: CountingUpstream) -> None:
    client(gateway).chat.completions.create(
        model="qwen", messages=[{"role": "user", "content": "hi"}],
        extra_body={"top_k": 20, "min_p": 0.05, "chat_template_kwargs": {"enable_thinking": False}, "x_custom": [1, 2]})
    sent = upstream.bodies[0]
    assert sent["top_k"] == 20 and sent["min_p"] == 0.05
    assert sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["x_custom"] == [1, 2]


def test_it_accepts_the_served_model_name_and_n(gateway: Gateway) -> None:
    completion = client(gateway).chat.completions.create(
        model="qwen-test", n=3, messages=[{"role": "user", "content": "hi"}])
    assert [choice.index for choice in completion.choices] == [0, 1, 2]


def test_it_returns_tool_calls(gateway: Gateway) -> None:
    completion = client(gateway).chat.completions.create(
        model="qwen", tools=TOOLS, messages=[{"role": "user", "content": "weather?"}])  # type: ignore[arg-type]
    call = completion.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "get_weather" and call.function.arguments == '{"city": "Paris"}'  # type: ignore[union-attr]


@pytest.mark.parametrize("include_usage", [True, False])
def test_it_streams_and_gives_usage_only_when_asked(gateway: Gateway, upstream: CountingUpstream, include_usage: bool) -> None:
    options = {"include_usage": True} if include_usage else None
    stream = client(gateway).chat.completions.create(
        model="auto", stream=True, messages=[{"role": "user", "content": "hi"}],
        **({"stream_options": options} if options else {}))  # type: ignore[call-overload]
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from qwen-test choice 0. "
    usage_chunks = [c for c in chunks if c.usage is not None]
    if include_usage:
        assert len(usage_chunks) == 1 and usage_chunks[0].choices == [] and usage_chunks[0] is chunks[-1]
    else:
        assert usage_chunks == []
    # The gateway always asks the lane for usage (to count tokens).
    assert upstream.bodies[0]["stream_options"] == {"include_usage": True}


def test_it_streams_tool_call_arguments_as_fragments(gateway: Gateway) -> None:
    stream = client(gateway).chat.completions.create(
        model="qwen", stream=True, tools=TOOLS, stream_options={"include_usage": True},  # type: ignore[arg-type]
        messages=[{"role": "user", "content": "weather?"}])
    fragments = [c.choices[0].delta.tool_calls[0].function.arguments  # type: ignore[index, union-attr]
                 for c in stream if c.choices and c.choices[0].delta.tool_calls]
    # Streamed as they came (LiteLLM #38926 collapsed them into one burst).
    assert fragments == ["", '{"ci', 'ty": "Pa', 'ris"}']


def test_it_splits_usage_off_a_final_chunk_that_has_choices(gateway: Gateway, upstream: CountingUpstream) -> None:
    upstream.mode = "usage_on_choices"
    chunks = list(client(gateway).chat.completions.create(
        model="qwen", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "hi"}]))
    with_usage = [c for c in chunks if c.usage is not None]
    assert len(with_usage) == 1 and with_usage[0].choices == []  # never usage on a chunk with choices (#8450)
    assert chunks[-2].choices[0].finish_reason == "stop"


def test_it_streams_completions_with_n(gateway: Gateway) -> None:
    chunks = list(client(gateway).completions.create(model="qwen", prompt="Say hi", n=2, stream=True))
    indexes = {c.choices[0].index for c in chunks if c.choices}
    assert indexes == {0, 1}


def test_the_async_client_streams_and_completes(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key=gateway.secret) as aclient:
            completion = await aclient.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "hi"}])
            assert completion.choices[0].message.content
            stream = await aclient.chat.completions.create(
                model="auto", stream=True, stream_options={"include_usage": True},
                messages=[{"role": "user", "content": "hi"}])
            chunks = [chunk async for chunk in stream]
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0

    run_async(scenario)


def test_it_lists_models_and_describes_one(gateway: Gateway) -> None:
    models = client(gateway).models.list()
    assert [m.id for m in models.data] == ["auto", "qwen-test"]
    assert client(gateway).models.retrieve("qwen-test").id == "qwen-test"
    with pytest.raises(openai.NotFoundError):
        client(gateway).models.retrieve("nope")


def test_per_lane_base_urls_and_the_seed_aliases_reach_the_lane(gateway: Gateway, upstream: CountingUpstream) -> None:
    lane_client = openai.OpenAI(base_url=f"{gateway.url}/lanes/qwen/v1", api_key=gateway.secret)
    assert lane_client.chat.completions.create(model="anything", messages=[{"role": "user", "content": "x"}]).choices
    assert [m.id for m in lane_client.models.list().data] == ["qwen-test"]
    alias = httpx.post(f"{gateway.url}/v1/chat/qwen", headers=gateway.headers(),
                       json={"model": "x", "messages": [{"role": "user", "content": "x"}]})
    assert alias.status_code == 200 and alias.headers["x-spark-lane"] == "qwen"
    alias_client = openai.OpenAI(base_url=f"{gateway.url}/v1/chat/qwen", api_key=gateway.secret)
    assert alias_client.chat.completions.create(model="x", messages=[{"role": "user", "content": "x"}]).choices
    assert upstream.completions == 3
