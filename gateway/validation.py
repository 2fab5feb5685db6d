"""The OpenAI request body, validated before any upstream call.

Why at the gateway: an engine answers a malformed field in its own way (llama.cpp with a
500 and a traceback), and a lane that answers 500 looks broken — one careless client could
open a lane's circuit breaker for everyone. So every documented field of
`/v1/chat/completions` and `/v1/completions` is checked here for type and range, and a bad
one is refused with OpenAI's 400 naming the field (`param`). Fields this module does not
know (vLLM's extras: `top_k`, `min_p`, guided decoding, ...) pass through untouched; the
caller is told that the body carried some (`unvalidated`), so an upstream 5xx on such a
body is not held against the lane.

Pure functions, no I/O: a typical chat body costs a few microseconds (perf/)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gateway.wire import GatewayError

CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
CONTENT_PART_TYPES = frozenset({"text", "image_url", "input_audio", "file", "refusal", "video_url", "audio_url"})
TOOL_CHOICES = frozenset({"none", "auto", "required"})
MAX_TOOLS = 128
MAX_STOP_SEQUENCES = 64  # OpenAI allows 4; vLLM any number: bounded, not OpenAI's 4
MAX_LOGIT_BIAS = 1024


def invalid(param: str, message: str, code: str = "invalid_value") -> GatewayError:
    return GatewayError(400, message, code=code, param=param)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def wrong_type(param: str, expected: str, value: Any) -> GatewayError:
    return invalid(param, f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
                   code="invalid_type")


def number(param: str, value: Any, low: float, high: float, *, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong_type(param, "a number", value)
    if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
        lower = f"> {low:g}" if low_open else f">= {low:g}"
        raise invalid(param, f"Invalid '{param}': expected a number {lower} and <= {high:g}, got {value}.")


def integer(param: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(param, "an integer", value)
    if value < low or value > high:
        raise invalid(param, f"Invalid '{param}': expected an integer from {low} to {high}, got "
                             f"{value if abs(value) < 10**15 else 'a larger number'}.")


def boolean(param: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise wrong_type(param, "a boolean", value)


def string(param: str, value: Any) -> None:
    if not isinstance(value, str):
        raise wrong_type(param, "a string", value)


def obj(param: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise wrong_type(param, "an object", value)


INT64 = 2**63 - 1
TOKENS_MAX = 2**31 - 1  # no context is near this; larger values are typos or probes


def check_max_tokens(param: str, value: Any) -> None:
    integer(param, value, 1, TOKENS_MAX)


def check_stop(param: str, value: Any) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list):
        raise wrong_type(param, "a string or an array of strings", value)
    if len(value) > MAX_STOP_SEQUENCES:
        raise invalid(param, f"Invalid '{param}': at most {MAX_STOP_SEQUENCES} stop sequences.")
    for index, item in enumerate(value):
        string(f"{param}[{index}]", item)


def string_list(param: str, value: Any) -> None:
    if not isinstance(value, list):
        raise wrong_type(param, "an array of strings", value)
    for index, item in enumerate(value):
        string(f"{param}[{index}]", item)


def check_logit_bias(param: str, value: Any) -> None:
    obj(param, value)
    if len(value) > MAX_LOGIT_BIAS:
        raise invalid(param, f"Invalid '{param}': at most {MAX_LOGIT_BIAS} entries.")
    for token, bias in value.items():
        number(f"{param}.{token}", bias, -100, 100)


def check_stream_options(param: str, value: Any) -> None:
    obj(param, value)
    if value.get("include_usage") is not None:
        boolean(f"{param}.include_usage", value["include_usage"])


def check_tools(param: str, value: Any) -> None:
    if not isinstance(value, list):
        raise wrong_type(param, "an array", value)
    if len(value) > MAX_TOOLS:
        raise invalid(param, f"Invalid '{param}': at most {MAX_TOOLS} tools.")
    for index, tool in enumerate(value):
        where = f"{param}[{index}]"
        obj(where, tool)
        kind = tool.get("type", "function")
        string(f"{where}.type", kind)
        if kind != "function":
            continue  # other tool kinds (custom, MCP) are the engine's to judge
        function = tool.get("function")
        if function is None:
            raise invalid(f"{where}.function", f"Missing required parameter: '{where}.function'.",
                          code="missing_required_parameter")
        obj(f"{where}.function", function)
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(f"{where}.function.name", f"'{where}.function.name' must be a non-empty string.")
        if function.get("parameters") is not None:
            obj(f"{where}.function.parameters", function["parameters"])


def check_tool_choice(param: str, value: Any) -> None:
    if isinstance(value, str):
        if value not in TOOL_CHOICES:
            raise invalid(param, f"Invalid '{param}': expected one of none, auto, required, or an object.")
        return
    obj(param, value)


def check_content(param: str, value: Any) -> None:
    if value is None or isinstance(value, str):
        return
    if not isinstance(value, list):
        raise wrong_type(param, "a string or an array of content parts", value)
    for index, part in enumerate(value):
        where = f"{param}[{index}]"
        obj(where, part)
        kind = part.get("type")
        if kind not in CONTENT_PART_TYPES:
            raise invalid(f"{where}.type", f"Invalid '{where}.type': expected one of "
                                           f"{', '.join(sorted(CONTENT_PART_TYPES))}.")
        if kind == "text":
            string(f"{where}.text", part.get("text"))


def check_messages(param: str, value: Any) -> None:
    if not isinstance(value, list):
        raise wrong_type(param, "an array of message objects", value)
    if not value:
        raise invalid(param, f"Invalid '{param}': empty array. Expected an array with minimum length 1.",
                      code="empty_array")
    for index, message in enumerate(value):
        where = f"{param}[{index}]"
        if not isinstance(message, dict):
            raise wrong_type(where, "a message object", message)
        role = message.get("role")
        if role is None:
            raise invalid(f"{where}.role", f"Missing required parameter: '{where}.role'.",
                          code="missing_required_parameter")
        if role not in CHAT_ROLES:
            raise invalid(f"{where}.role", f"Invalid '{where}.role': expected one of "
                                           f"{', '.join(sorted(CHAT_ROLES))}.")
        check_content(f"{where}.content", message.get("content"))
        if message.get("name") is not None:
            string(f"{where}.name", message["name"])
        calls = message.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise wrong_type(f"{where}.tool_calls", "an array", calls)
            for call_index, call in enumerate(calls):
                obj(f"{where}.tool_calls[{call_index}]", call)
        if message.get("tool_call_id") is not None:
            string(f"{where}.tool_call_id", message["tool_call_id"])


def check_prompt(param: str, value: Any) -> None:
    if isinstance(value, str):
        return
    if not isinstance(value, list) or not value:
        raise invalid(param, f"Invalid '{param}': expected a string, an array of strings, an array of token ids "
                             "or an array of arrays of token ids.", code="invalid_type")
    first = value[0]
    if isinstance(first, str):
        if not all(isinstance(item, str) for item in value):
            raise invalid(param, f"Invalid '{param}': an array of strings must hold only strings.",
                          code="invalid_type")
    elif isinstance(first, list):
        for index, ids in enumerate(value):
            if not isinstance(ids, list) or not ids or not all(_token_id(token) for token in ids):
                raise invalid(f"{param}[{index}]", f"Invalid '{param}[{index}]': expected a non-empty array of "
                                                   "token ids.", code="invalid_type")
    elif not all(_token_id(token) for token in value):
        raise invalid(param, f"Invalid '{param}': token ids must be non-negative integers.", code="invalid_type")


def _token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64


Check = Callable[[str, Any], None]


def _range(low: float, high: float, *, low_open: bool = False) -> Check:
    return lambda param, value: number(param, value, low, high, low_open=low_open)


def _int(low: int, high: int) -> Check:
    return lambda param, value: integer(param, value, low, high)


# One table per endpoint: documented field -> its check. A None value means "not given",
# as OpenAI reads it. `stream` and `n` are checked in `validate_body` (they steer the
# gateway itself).
COMMON: dict[str, Check] = {
    "stream_options": check_stream_options,
    "temperature": _range(0, 2),
    "top_p": _range(0, 1, low_open=True),
    "max_tokens": check_max_tokens,
    "presence_penalty": _range(-2, 2),
    "frequency_penalty": _range(-2, 2),
    "logit_bias": check_logit_bias,
    "stop": check_stop,
    "seed": _int(-(2**63), INT64),
    "user": string,
}
CHAT: dict[str, Check] = {
    **COMMON,
    "messages": check_messages,
    "max_completion_tokens": check_max_tokens,
    "logprobs": boolean,
    "top_logprobs": _int(0, 20),
    "tools": check_tools,
    "tool_choice": check_tool_choice,
    "parallel_tool_calls": boolean,
    "response_format": obj,
    "reasoning_effort": string,
    "metadata": obj,
    "store": boolean,
    "service_tier": string,
    "modalities": string_list,
}
COMPLETIONS: dict[str, Check] = {
    **COMMON,
    "prompt": check_prompt,
    "max_completion_tokens": check_max_tokens,
    "suffix": string,
    "echo": boolean,
    "best_of": _int(1, 20),
    "logprobs": _int(0, 5),
}
REQUIRED = {"chat.completions": "messages", "completions": "prompt"}
TABLES = {"chat.completions": CHAT, "completions": COMPLETIONS}
KNOWN = {endpoint: frozenset({"model", "stream", "n", *table}) for endpoint, table in TABLES.items()}


def validate_body(body: dict[str, Any], *, endpoint: str, max_n: int) -> bool:
    """Raise the first problem as an OpenAI 400 naming its field. Returns whether every
    field of the body was validated (False: it carries fields only the engine knows)."""
    model = body.get("model")
    if model is None:
        raise invalid("model", "Missing required parameter: 'model'.", code="missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise invalid("model", "`model` must be a non-empty string.")
    required = REQUIRED[endpoint]
    if body.get(required) is None:
        raise invalid(required, f"Missing required parameter: '{required}'.", code="missing_required_parameter")
    stream = body.get("stream")
    if stream is not None:
        boolean("stream", stream)
    if body.get("n") is not None:
        integer("n", body["n"], 1, max_n)
    if body.get("stream_options") is not None and stream is not True:
        raise invalid("stream_options", "Invalid 'stream_options': only allowed when 'stream' is true.")
    table = TABLES[endpoint]
    validated = True
    for name, value in body.items():
        check = table.get(name)
        if check is not None:
            if value is not None:
                check(name, value)
        elif name not in ("model", "stream", "n"):
            validated = False
    return validated
