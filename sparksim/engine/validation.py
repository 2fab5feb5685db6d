"""Request validation as vLLM does it, before anything is planned or allocated.

vLLM checks a body twice: pydantic first (a wrong type is a 400 whose message lists the
errors, type "Bad Request"), then SamplingParams (a value out of range is a 400 with type
"BadRequestError" and vLLM's own wording). The simulated engine must answer bad input the
same way, and quickly: one request with n=100000 once grew an engine to 23 GB.

`n` is also bounded by the engine's max_num_seqs (a simulator rule: every choice is a
running sequence, and a request wider than the engine would never be scheduled whole)."""

import math
from typing import Any

from sparksim.engine.planning import ApiError, bad_request

TOOL_CHOICES = {"none", "auto", "required"}


def type_error(field: str, expected: str, kind: str, value: Any) -> ApiError:
    """pydantic's error, as vLLM's validation handler prints it."""
    shown = repr(value) if len(repr(value)) <= 64 else repr(value)[:61] + "..."
    message = (f"[{{'type': '{kind}', 'loc': ('body', {', '.join(repr(p) for p in field.split('.'))}), "
               f"'msg': 'Input should be {expected}', 'input': {shown}}}]")
    return ApiError(400, message, "Bad Request", None)


def _number(body: dict[str, Any], field: str) -> float | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise type_error(field, "a valid number", "float_type", value)
    return float(value)


def _integer(body: dict[str, Any], field: str) -> int | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise type_error(field, "a valid integer", "int_type", value)
    return value


def _boolean(body: dict[str, Any], field: str) -> None:
    value = body.get(field)
    if value is not None and not isinstance(value, bool):
        raise type_error(field, "a valid boolean", "bool_type", value)


def _object_list(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise type_error(field, "a valid list", "list_type", value)
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise type_error(f"{field}.{index}", "a valid dictionary", "dict_type", item)
    return value


def check_tools(body: dict[str, Any]) -> None:
    tools = body.get("tools")
    if tools is not None:
        for index, tool in enumerate(_object_list(tools, "tools")):
            function = tool.get("function")
            if not isinstance(function, dict):
                raise type_error(f"tools.{index}.function", "a valid dictionary", "dict_type", function)
            if not isinstance(function.get("name"), str):
                raise type_error(f"tools.{index}.function.name", "a valid string", "string_type",
                                 function.get("name"))
    choice = body.get("tool_choice")
    if choice is None or isinstance(choice, str) and choice in TOOL_CHOICES:
        return
    if isinstance(choice, str):
        raise bad_request(f"Invalid tool_choice: {choice[:64]!r}.", "tool_choice")
    if not isinstance(choice, dict) or not isinstance(choice.get("function"), dict):
        raise type_error("tool_choice", "a valid dictionary", "dict_type", choice)


def check_messages(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if messages is None:
        return
    for index, message in enumerate(_object_list(messages, "messages")):
        calls = message.get("tool_calls")
        if calls is not None:
            for call_index, call in enumerate(_object_list(calls, f"messages.{index}.tool_calls")):
                if call.get("function") is not None and not isinstance(call["function"], dict):
                    raise type_error(f"messages.{index}.tool_calls.{call_index}.function", "a valid dictionary",
                                     "dict_type", call["function"])


def check_sampling(body: dict[str, Any], *, max_num_seqs: int) -> None:
    """SamplingParams' own checks, in vLLM's words."""
    _boolean(body, "stream")
    _boolean(body, "ignore_eos")
    n = _integer(body, "n")
    if n is not None:
        if n < 1:
            raise bad_request(f"n must be at least 1, got {n}.", "n")
        if n > max_num_seqs:
            raise bad_request(f"n must be at most max_num_seqs ({max_num_seqs}), got {n}.", "n")
    temperature = _number(body, "temperature")
    if temperature is not None and temperature < 0:
        raise bad_request(f"temperature must be non-negative, got {temperature}.", "temperature")
    top_p = _number(body, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise bad_request(f"top_p must be in (0, 1], got {top_p}.", "top_p")
    top_k = _integer(body, "top_k")
    if top_k is not None and top_k < -1:
        raise bad_request(f"top_k must be 0 (disable), or at least 1, got {top_k}.", "top_k")
    min_p = _number(body, "min_p")
    if min_p is not None and not 0 <= min_p <= 1:
        raise bad_request(f"min_p must be in [0, 1], got {min_p}.", "min_p")
    for field in ("presence_penalty", "frequency_penalty"):
        penalty = _number(body, field)
        if penalty is not None and not -2 <= penalty <= 2:
            raise bad_request(f"{field} must be in [-2, 2], got {penalty}.", field)
    repetition = _number(body, "repetition_penalty")
    if repetition is not None and repetition <= 0:
        raise bad_request(f"repetition_penalty must be greater than zero, got {repetition}.",
                          "repetition_penalty")
    for field in ("max_tokens", "max_completion_tokens", "seed"):
        _integer(body, field)
    min_tokens = _integer(body, "min_tokens")
    if min_tokens is not None and min_tokens < 0:
        raise bad_request(f"min_tokens must be greater than or equal to 0, got {min_tokens}.",
                          "min_tokens")
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and all(isinstance(item, str) for item in stop)):
        raise type_error("stop", "a valid string", "string_type", stop)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise type_error("stream_options", "a valid dictionary", "dict_type", options)


def check_logprobs_count(count: int | None, max_logprobs: int, field: str) -> None:
    """vLLM's request validators (a negative count) and its input processor (the server's
    --max-logprobs, 20 by default): each a 400."""
    if count is None:
        return
    if count < 0:
        raise bad_request(f"`{field}` must be a positive value.", field)
    if count > max_logprobs:
        raise bad_request(f"Requested sample logprobs of {count}, which is greater than max allowed: {max_logprobs}",
                          field)


def check_logit_bias(body: dict[str, Any]) -> None:
    bias = body.get("logit_bias")
    if bias is not None and not isinstance(bias, dict):
        raise type_error("logit_bias", "a valid dictionary", "dict_type", bias)


def validate_chat(body: dict[str, Any], *, max_num_seqs: int, max_logprobs: int = 20) -> None:
    check_messages(body)
    check_tools(body)
    check_sampling(body, max_num_seqs=max_num_seqs)
    check_logit_bias(body)
    _boolean(body, "logprobs")
    top = _integer(body, "top_logprobs")
    if top and not body.get("logprobs"):
        raise bad_request("when using `top_logprobs`, `logprobs` must be set to true.", "top_logprobs")
    check_logprobs_count(top, max_logprobs, "top_logprobs")


def validate_completion(body: dict[str, Any], *, max_num_seqs: int, max_logprobs: int = 20) -> None:
    check_sampling(body, max_num_seqs=max_num_seqs)
    check_logit_bias(body)
    check_logprobs_count(_integer(body, "logprobs"), max_logprobs, "logprobs")


def validate_tokenize(body: dict[str, Any]) -> None:
    """vLLM's /tokenize: a chat form (messages, tools as for chat) or a completion form (a
    prompt string); a wrong type is pydantic's 400, never a 500."""
    if "messages" in body:
        if body["messages"] is None:
            raise type_error("messages", "a valid list", "list_type", None)
        check_messages(body)
        check_tools(body)
        _boolean(body, "add_generation_prompt")
    elif "prompt" in body:
        if not isinstance(body["prompt"], str):
            raise type_error("prompt", "a valid string", "string_type", body["prompt"])
    else:
        raise bad_request("prompt or messages is required")
    _boolean(body, "add_special_tokens")


# The control endpoint's switches (POST /_sim/faults): name -> (kind, upper bound). A wrong
# value is refused naming the switch, before any switch changes: a stored "slow" latency
# once turned every later request into a 500.
FAULT_RULES: dict[str, tuple[str, float]] = {
    "refuse_connections_s": ("seconds", 3600), "latency_s": ("seconds", 3600),
    "die_after_requests": ("count", 10**9), "die_mid_stream_after_tokens": ("count", 10**9),
    "slow_prefill_factor": ("factor", 10**6), "hang_after_tokens": ("count", 10**9),
    "leak_gib_per_s": ("gib_per_s", 1024), "hang": ("bool", 0), "gibberish": ("bool", 0),
    "unavailable": ("bool", 0), "hold": ("bool", 0), "exit_on_death": ("bool", 0), "clear": ("bool", 0), "die": ("bool", 0),
}


def validate_faults(body: dict[str, Any]) -> None:
    for name, value in body.items():
        rule = FAULT_RULES.get(name)
        if rule is None:
            continue
        kind, high = rule
        nullable = kind in ("seconds", "count") and name != "latency_s"
        if value is None and nullable:
            continue
        if kind == "bool":
            if not isinstance(value, bool):
                raise bad_request(f"{name} must be true or false", name)
        elif kind == "count":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
                raise bad_request(f"{name} must be a whole number from 0 to {high:g}" + (" or null" if nullable else ""),
                                  name)
        else:
            low_open = kind == "factor"
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) \
                    or value < 0 or (low_open and value == 0) or value > high:
                lower = "above 0" if low_open else "from 0"
                raise bad_request(f"{name} must be a number {lower} to {high:g}" + (" or null" if nullable else ""),
                                  name)
