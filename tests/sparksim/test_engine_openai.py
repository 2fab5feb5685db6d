"""The official openai client against a real engine over HTTP gets what vLLM would send."""

import json
from collections.abc import Callable

import httpx
import openai
import pytest

from sparksim.standalone import EngineHandle
from tests.sparksim.conftest import DEEPSEEK, QWEN

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_lane_status",
            "description": "Status of a lane",
            "parameters": {
                "type": "object",
                "properties": {"lane": {"type": "string"}, "verbose": {"type": "boolean"}},
                "required": ["lane", "verbose"],
            },
        },
    }
]


def client(engine: EngineHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{engine.url}/v1", api_key="none", max_retries=0)


def async_client(engine: EngineHandle) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{engine.url}/v1", api_key="none", max_retries=0)


def test_models_lists_served_names_with_max_model_len(engine: EngineHandle) -> None:
    models = client(engine).models.list()
    assert [model.id for model in models.data] == [DEEPSEEK, "deepseek"]
    assert models.data[0].model_extra["max_model_len"] == 131072


def test_chat_completion_returns_text_and_usage(engine: EngineHandle) -> None:
    result = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "Say hello"}], max_tokens=8,
        extra_body={"ignore_eos": True},
    )
    assert result.object == "chat.completion"
    assert result.choices[0].finish_reason == "length"
    assert result.choices[0].message.role == "assistant"
    assert result.choices[0].message.content
    assert result.usage is not None
    assert result.usage.completion_tokens == 8
    assert result.usage.total_tokens == result.usage.prompt_tokens + 8


def test_structured_output_answers_an_object_of_the_json_schema(engine: EngineHandle) -> None:
    schema = {"type": "object", "properties": {"winner": {"type": "string", "enum": ["A", "B", "tie"]},
                                               "reason": {"type": "string"}}, "required": ["winner", "reason"]}
    result = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "Grade these"}], max_tokens=50,
        response_format={"type": "json_schema", "json_schema": {"name": "verdict", "schema": schema}},
    )
    assert json.loads(result.choices[0].message.content or "") == {"winner": "A", "reason": "spark1"}
    assert result.choices[0].finish_reason == "stop"


def test_prompt_tokens_match_tokenize(engine: EngineHandle) -> None:
    messages = [{"role": "user", "content": "How many tokens is this prompt, exactly?"}]
    counted = httpx.post(f"{engine.url}/tokenize", json={"model": "deepseek",
                                                         "messages": messages}).json()
    result = client(engine).chat.completions.create(model="deepseek", messages=messages,
                                                    max_tokens=2)
    assert result.usage is not None
    assert result.usage.prompt_tokens == counted["count"] == len(counted["tokens"])
    assert counted["max_model_len"] == 131072


def test_stream_with_include_usage_ends_with_a_usage_chunk(engine: EngineHandle) -> None:
    stream = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "Stream please"}],
        max_completion_tokens=6, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert len({chunk.id for chunk in chunks}) == 1
    assert len({chunk.created for chunk in chunks}) == 1
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    *content_chunks, usage_chunk = chunks
    assert all(chunk.usage is None for chunk in content_chunks)
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None and usage_chunk.usage.completion_tokens == 6
    text = "".join(chunk.choices[0].delta.content or "" for chunk in content_chunks)
    assert text
    assert content_chunks[-1].choices[0].finish_reason == "length"


def test_raw_stream_has_usage_null_and_done(engine: EngineHandle) -> None:
    body = {"model": "deepseek", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
            "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    payloads = [json.loads(event) for event in events[:-1]]
    assert all("usage" in payload and payload["usage"] is None for payload in payloads[:-1])
    assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] == 3


def test_stream_without_include_usage_has_no_usage_chunk(engine: EngineHandle) -> None:
    body = {"model": "deepseek", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
            "stream": True}
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    payloads = [json.loads(event) for event in events[:-1]]
    assert all("usage" not in payload for payload in payloads)
    assert all(payload["choices"] for payload in payloads)


def test_min_tokens_without_ignore_eos_stops_naturally_but_not_before_min(
    engine: EngineHandle,
) -> None:
    result = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "short"}], max_tokens=2000,
        extra_body={"min_tokens": 300},
    )
    assert result.choices[0].finish_reason == "stop"
    assert result.usage is not None and 300 <= result.usage.completion_tokens < 2000


def test_n_choices_are_told_apart_by_index(engine: EngineHandle) -> None:
    result = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "two please"}], max_tokens=4, n=2,
        extra_body={"ignore_eos": True},
    )
    assert [choice.index for choice in result.choices] == [0, 1]
    assert result.usage is not None and result.usage.completion_tokens == 8
    stream = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "two please"}], max_tokens=4, n=2,
        stream=True, extra_body={"ignore_eos": True},
    )
    texts = {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts[0] and texts[1]


def test_tool_calls_stream_as_deltas(engine: EngineHandle) -> None:
    stream = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "status of deepseek?"}],
        tools=TOOLS, stream=True,
    )
    chunks = list(stream)
    calls = [call for chunk in chunks for choice in chunk.choices
             for call in choice.delta.tool_calls or []]
    first = calls[0]
    assert first.index == 0 and first.id and first.type == "function"
    assert first.function is not None and first.function.name == "get_lane_status"
    assert all(call.id is None and call.function.name is None for call in calls[1:])
    arguments = "".join(call.function.arguments or "" for call in calls)
    assert json.loads(arguments) == {"lane": "spark1", "verbose": True}
    assert len(calls) > 2  # the arguments arrive in fragments
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_result_gets_a_text_answer(engine: EngineHandle) -> None:
    result = client(engine).chat.completions.create(
        model="deepseek", tools=TOOLS, max_tokens=5,
        messages=[
            {"role": "user", "content": "status?"},
            {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function":
                                                  {"name": "get_lane_status", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "healthy"},
        ],
    )
    assert result.choices[0].message.content
    assert not result.choices[0].message.tool_calls


def test_non_streamed_tool_call(engine: EngineHandle) -> None:
    result = client(engine).chat.completions.create(
        model="deepseek", messages=[{"role": "user", "content": "status?"}], tools=TOOLS,
    )
    call = result.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert result.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.function.arguments)["lane"] == "spark1"  # type: ignore[union-attr]


def test_unknown_model_is_404_not_found_error(engine: EngineHandle) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client(engine).chat.completions.create(model="gpt-9", messages=[{"role": "user",
                                                                          "content": "x"}])
    assert caught.value.status_code == 404
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["message"] == "The model `gpt-9` does not exist."
    assert body["type"] == "NotFoundError"


def test_context_too_long_is_400_bad_request(engine: EngineHandle) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(engine).chat.completions.create(
            model="deepseek", messages=[{"role": "user", "content": "x"}], max_tokens=200_000)
    assert "This model's maximum context length is 131072 tokens" in str(caught.value)


def test_completions_streaming_and_not(engine: EngineHandle) -> None:
    result = client(engine).completions.create(model="deepseek", prompt="Once upon", max_tokens=5,
                                               extra_body={"ignore_eos": True})
    assert result.object == "text_completion"
    assert result.usage is not None and result.usage.completion_tokens == 5
    stream = client(engine).completions.create(
        model="deepseek", prompt="Once upon", max_tokens=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == \
        result.choices[0].text
    assert chunks[-1].choices == [] and chunks[-1].usage is not None


async def test_async_client_streams_and_counts(engine: EngineHandle) -> None:
    async with async_client(engine) as aclient:
        stream = await aclient.chat.completions.create(
            model="deepseek", messages=[{"role": "user", "content": "async"}], max_tokens=4,
            stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
        tokens = 0
        usage = None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                tokens += 1
            usage = chunk.usage or usage
        assert tokens == 4
        assert usage is not None and usage.completion_tokens == 4
        result = await aclient.chat.completions.create(
            model="deepseek", messages=[{"role": "user", "content": "async"}], max_tokens=3)
        assert result.usage is not None
        with pytest.raises(openai.NotFoundError):
            await aclient.chat.completions.create(model="nope", messages=[{"role": "user",
                                                                           "content": "x"}])


def test_stream_options_without_stream_is_refused(engine: EngineHandle) -> None:
    body = {"model": "deepseek", "messages": [{"role": "user", "content": "x"}],
            "stream_options": {"include_usage": True}}
    response = httpx.post(f"{engine.url}/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "Stream options can only be defined when `stream=True`.")


def test_reasoning_parser_streams_reasoning_before_content(
    engine_factory: Callable[..., EngineHandle],
) -> None:
    engine = engine_factory(QWEN, "--reasoning-parser", "qwen3")
    stream = client(engine).chat.completions.create(
        model=QWEN, messages=[{"role": "user", "content": "think"}], max_tokens=30, stream=True,
        extra_body={"ignore_eos": True})
    kinds = []
    for chunk in stream:
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning_content"):
            kinds.append("reasoning")
        elif delta.content:
            kinds.append("content")
    assert kinds == ["reasoning"] * 10 + ["content"] * 20
    result = client(engine).chat.completions.create(
        model=QWEN, messages=[{"role": "user", "content": "think"}], max_tokens=30,
        extra_body={"ignore_eos": True, "chat_template_kwargs": {"enable_thinking": False}})
    assert (result.choices[0].message.model_extra or {}).get("reasoning_content") is None
