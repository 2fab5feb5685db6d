"""Token counts the gateway needs itself: the context guard's exact prompt length, and the
usage of an answer whose lane sent none (llama.cpp ignores `include_usage`), so that
tokens-per-minute limits and the request log still count every answer.

Exact counts come from the lane's own `/tokenize` (vLLM's route). A lane without one (or
whose /tokenize answers without a count) is remembered for a while, so a prompt is never posted to it again and again; then, and for
anything larger than the cap below, the count is an estimate of one token per
CHARS_PER_TOKEN characters (the request log marks such rows `estimate`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson

from gateway.body import StreamedBody
from gateway.directory import LaneInfo
from gateway.request import ParsedRequest, prompt_length, sized_call
from gateway.runtime import GatewayRuntime
from gateway.upstream import body_arguments
from gateway.wire import Usage

CHARS_PER_TOKEN = 4  # English text in a BPE vocabulary; an estimate, never an exact count
TEMPLATE_TOKENS_PER_MESSAGE = 4
NO_TOKENIZE_REMEMBER_S = 600.0  # a relaunched lane may run another engine: ask again later
TOKENIZE_TIMEOUT_S = 30.0
# The guard never posts more than this to /tokenize: no lane's context holds a prompt of
# more than 8 bytes per token on average, so a larger prompt is judged by the estimate.
TOKENIZE_BYTES_PER_TOKEN_CAP = 8
TOKENIZE_MIN_CAP_BYTES = 1024 * 1024

USAGE_UPSTREAM = ""
USAGE_TOKENIZE = "tokenize"
USAGE_ESTIMATE = "estimate"


def estimate_tokens(text: str, messages: int = 0) -> int:
    return estimate_from_chars(len(text), messages)


def estimate_from_chars(chars: int, messages: int = 0) -> int:
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + TEMPLATE_TOKENS_PER_MESSAGE * messages


def tokenize_cap(lane: LaneInfo) -> int:
    return max(TOKENIZE_MIN_CAP_BYTES, lane.context_limit * TOKENIZE_BYTES_PER_TOKEN_CAP)


def lane_has_tokenize(rt: GatewayRuntime, lane: LaneInfo) -> bool:
    since = rt.no_tokenize.get(lane.name)
    if since is None:
        return True
    if time.monotonic() - since > NO_TOKENIZE_REMEMBER_S:
        del rt.no_tokenize[lane.name]
        return True
    return False


async def tokenize(rt: GatewayRuntime, lane: LaneInfo, body: dict[str, Any] | Callable[[str], StreamedBody],
                   size: int) -> int | None:
    """The lane's exact count for `body` (messages/tools or prompt; `size` bounds its
    bytes; a large body's members come already serialised, cut from its raw bytes), None
    if it cannot say."""
    if not lane_has_tokenize(rt, lane) or size > tokenize_cap(lane):
        return None
    content: bytes | StreamedBody
    if callable(body):
        content = body(lane.public_model_name)  # cut from a large body's raw bytes, sent in slices
    else:
        content = await sized_call(size, orjson.dumps, {"model": lane.public_model_name, **body})
    if len(content) > tokenize_cap(lane):
        return None
    try:
        response = await rt.client.post(f"{lane.base_url}/tokenize", **body_arguments(content),
                                        timeout=TOKENIZE_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if response.status_code in (404, 405, 501):
        rt.no_tokenize[lane.name] = time.monotonic()
        return None
    if response.status_code != 200:
        return None
    try:
        count = orjson.loads(response.content).get("count")
    except (orjson.JSONDecodeError, AttributeError):
        count = None
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        # It answers, but gives no count (llama.cpp's /tokenize reads another body and
        # answers only tokens): as good as none, and remembered so, not asked again.
        rt.no_tokenize[lane.name] = time.monotonic()
        return None
    return count


def prompt_fields(request: ParsedRequest) -> dict[str, Any]:
    return {name: request.body[name] for name in ("messages", "tools", "prompt") if name in request.body}


async def count_prompt(rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest) -> tuple[int, bool]:
    """(prompt tokens, estimated?)."""
    fields = request.large.prompt_members if request.large is not None else prompt_fields(request)
    exact = await tokenize(rt, lane, fields, request.size)
    if exact is not None:
        return exact, False
    messages = request.body.get("messages")  # a large body's outline keeps their number
    return estimate_from_chars(prompt_length(request), len(messages) if isinstance(messages, list) else 0), True


async def count_usage(rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest, answer: str,
                      known: Usage) -> tuple[Usage, str]:
    """Fill what the lane did not report: (usage, USAGE_TOKENIZE or USAGE_ESTIMATE)."""
    usage = Usage(known.prompt_tokens, known.completion_tokens)
    estimated = False

    async def prompt() -> None:
        nonlocal estimated
        usage.prompt_tokens, prompt_estimated = await count_prompt(rt, lane, request)
        estimated = estimated or prompt_estimated

    async def completion() -> None:
        nonlocal estimated
        counted = await tokenize(rt, lane, {"prompt": answer, "add_special_tokens": False}, len(answer) * 4)
        if counted is None:
            counted, estimated = estimate_tokens(answer), True
        usage.completion_tokens = counted

    await asyncio.gather(*([prompt()] if known.prompt_tokens is None else []),
                         *([completion()] if known.completion_tokens is None else []))
    return usage, USAGE_ESTIMATE if estimated else USAGE_TOKENIZE
