"""Turn an OpenAI request body into prompt token ids and per-choice plans (pure logic)."""

import json
from dataclasses import dataclass
from typing import Any

from sparksim.engine.openai_format import ChoicePlan
from sparksim.textgen import (
    chosen_tool,
    example_object,
    natural_length,
    seed_for,
    text_tokens,
    tool_call_arguments,
)
from sparksim.tokenizer import chat_prompt_token_ids, completion_prompt_token_ids, split_tokens


class ApiError(Exception):
    def __init__(self, status: int, message: str, error_type: str, param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param


def bad_request(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, "BadRequestError", param)


@dataclass
class GenerationRequest:
    model: str
    prompt_ids: list[int]
    plans: list[ChoicePlan]
    stream: bool
    include_usage: bool


def resolve_model(body: dict[str, Any], served_names: list[str]) -> str:
    model = body.get("model")
    if model is None:
        return served_names[0]
    if model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")
    return str(model)


def plan_chat(
    body: dict[str, Any], served_names: list[str], max_model_len: int, vocab_size: int,
    reasoning: bool = False,
) -> GenerationRequest:
    model = resolve_model(body, served_names)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages: field required", "messages")
    tools = body.get("tools") or []
    prompt_ids = chat_prompt_token_ids(messages, vocab_size, tools or None)
    max_tokens = _max_tokens(body, len(prompt_ids), max_model_len, "messages")
    last_role = messages[-1].get("role") if isinstance(messages[-1], dict) else None
    # After a tool result the simulated model answers in text, so agent loops terminate.
    tool = None if last_role == "tool" else chosen_tool(tools, body.get("tool_choice", "auto"))
    plans = []
    for index in range(_choice_count(body)):
        seed = seed_for(prompt_ids, index)
        if tool is not None:
            arguments = split_tokens(tool_call_arguments(tool)) or ["{}"]
            tokens = arguments[:max_tokens]
            reason = "tool_calls" if len(tokens) == len(arguments) else "length"
            plans.append(ChoicePlan(index, tokens, reason, tool_name=str(tool.get("name"))))
        elif (schema := _json_schema(body)) is not None:
            # Structured output (vLLM's guided decoding): an example object of the schema.
            answer = split_tokens(json.dumps(example_object(schema))) or ["{}"]
            tokens = answer[:max_tokens]
            plans.append(ChoicePlan(index, tokens, "stop" if len(tokens) == len(answer) else "length"))
        else:
            plan = _text_plan(index, seed, body, max_tokens)
            if reasoning and _thinking_enabled(body):
                # A third of the answer is reasoning, streamed as reasoning_content first.
                plan.reasoning_tokens = len(plan.tokens) // 3
            plans.append(plan)
    return GenerationRequest(model, prompt_ids, plans, bool(body.get("stream")),
                             _include_usage(body))


def _json_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """response_format {"type": "json_schema", "json_schema": {"schema": {...}}}'s schema."""
    response_format = body.get("response_format")
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return None
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return schema if isinstance(schema, dict) else None


def _thinking_enabled(body: dict[str, Any]) -> bool:
    kwargs = body.get("chat_template_kwargs") or {}
    return not (isinstance(kwargs, dict) and kwargs.get("enable_thinking") is False)


def plan_completion(
    body: dict[str, Any], served_names: list[str], max_model_len: int, vocab_size: int
) -> GenerationRequest:
    model = resolve_model(body, served_names)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, list) and all(isinstance(token, int) for token in prompt):
        prompt_ids = [int(token) for token in prompt]
    elif isinstance(prompt, str):
        prompt_ids = completion_prompt_token_ids(prompt, vocab_size)
    else:
        raise bad_request("prompt must be a string or a list of token ids", "prompt")
    # vLLM's /v1/completions defaults to 16 tokens, like OpenAI's legacy endpoint.
    default = 16 if body.get("max_tokens") is None else None
    max_tokens = _max_tokens(body, len(prompt_ids), max_model_len, "prompt", default)
    plans = [
        _text_plan(index, seed_for(prompt_ids, index), body, max_tokens)
        for index in range(_choice_count(body))
    ]
    return GenerationRequest(model, prompt_ids, plans, bool(body.get("stream")),
                             _include_usage(body))


def _text_plan(index: int, seed: int, body: dict[str, Any], max_tokens: int) -> ChoicePlan:
    min_tokens = int(body.get("min_tokens") or 0)
    if min_tokens > max_tokens:
        raise bad_request(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                          f"got {min_tokens}.", "min_tokens")
    if body.get("ignore_eos"):
        count, reason = max_tokens, "length"
    else:
        natural = max(natural_length(seed), min_tokens)
        count = min(natural, max_tokens)
        reason = "stop" if natural < max_tokens else "length"
    return ChoicePlan(index, text_tokens(seed, max(count, 1)), reason)


def _choice_count(body: dict[str, Any]) -> int:
    n = body.get("n") or 1
    if not isinstance(n, int) or n < 1:
        raise bad_request("n must be at least 1.", "n")
    return n


def _include_usage(body: dict[str, Any]) -> bool:
    if body.get("stream_options") is not None and not body.get("stream"):
        raise bad_request("Stream options can only be defined when `stream=True`.",
                          "stream_options")
    options = body.get("stream_options") or {}
    return bool(options.get("include_usage")) if isinstance(options, dict) else False


def _max_tokens(
    body: dict[str, Any], prompt_tokens: int, max_model_len: int, source: str,
    default: int | None = None,
) -> int:
    requested = body.get("max_completion_tokens")
    if requested is None:
        requested = body.get("max_tokens", default)
    if prompt_tokens >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the input "
            f"{source}.",
            "input_tokens",
        )
    if requested is None:
        return max_model_len - prompt_tokens
    if not isinstance(requested, int) or requested < 1:
        raise bad_request(f"max_tokens must be at least 1, got {requested}.", "max_tokens")
    if prompt_tokens + requested > max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + requested} tokens ({prompt_tokens} in the {source}, "
            f"{requested} in the completion). Please reduce the length of the {source} or "
            "completion.",
            "max_tokens",
        )
    return requested
