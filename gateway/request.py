"""A client's completion request: parsed and validated once (gateway.validation),
then patched for the lane. Pure functions, no I/O."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import orjson

from gateway.body import StreamedBody
from gateway.validation import validate_body
from gateway.wire import GatewayError


class LargeBody(Protocol):
    """What gateway.large.LargeBody offers the request path (named here so that
    request does not import large, which imports request)."""

    @property
    def digest(self) -> str: ...

    @property
    def prompt(self) -> str | None: ...

    @property
    def prompt_chars(self) -> int: ...

    def forward(self, model: str, priority: int | None) -> StreamedBody: ...

    def mirror(self, model: str) -> StreamedBody: ...

    def prompt_members(self, model: str) -> StreamedBody: ...


T = TypeVar("T")
# Work above this size (serialising a /tokenize body or an answer) runs in a worker thread.
# Large request bodies are parsed in worker processes instead (gateway.large).
INLINE_BODY_MAX = 256 * 1024


async def sized_call(size: int, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    if size <= INLINE_BODY_MAX:
        return function(*args, **kwargs)
    return await asyncio.to_thread(function, *args, **kwargs)


@dataclass(frozen=True)
class ParsedRequest:
    body: dict[str, Any]
    model: str
    stream: bool
    client_wants_usage: bool
    max_tokens: int  # the client's cap (max_completion_tokens, else max_tokens), 0 = none
    validated: bool  # every field was checked here (no engine-only extras)
    size: int  # bytes of the raw body
    # A large body (gateway.large): parsed in a worker process, `body` is only its
    # outline, and what goes upstream is cut from the raw bytes.
    large: LargeBody | None = None


def json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be one JSON object, or the OpenAI-style 400 saying why."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(400, f"The body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_request")
    return body


def parse_request(raw: bytes, *, endpoint: str, max_n: int) -> ParsedRequest:
    body = json_object(raw)
    validated = validate_body(body, endpoint=endpoint, max_n=max_n)
    stream = body.get("stream") is True
    options = body.get("stream_options")
    wants_usage = bool(stream and isinstance(options, dict) and options.get("include_usage") is True)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return ParsedRequest(body=body, model=body["model"], stream=stream, client_wants_usage=wants_usage,
                         max_tokens=max_tokens, validated=validated, size=len(raw))


def sent_priority(asked: Any, priority: int | None) -> int | None:
    """The `priority` sent to the lane: the gateway's (None: the lane is fcfs, none is sent),
    or the client's own when it is lower (a larger integer), never higher."""
    if priority is None:
        return None
    lower = isinstance(asked, int) and not isinstance(asked, bool) and asked > priority
    return asked if lower else priority


def upstream_body(request: ParsedRequest, *, upstream_model: str, priority: int | None = None) -> bytes | StreamedBody:
    """The client's body with four changes: the lane's served model name; the client's
    `max_completion_tokens` also sent as `max_tokens` (engines that only know the older
    name would otherwise ignore the cap); (streaming) usage always requested so tokens
    are counted even when the client did not ask; and vLLM's `priority` the gateway's own
    (gateway.fair.engine_priority, `priority`: a lane in priority mode; a client's own may only
    lower it, a larger number), else none (a fcfs engine refuses one). A large body gets the
    same changes made in its raw bytes, sent in slices (gateway.large.LargeBody.forward)."""
    sent = sent_priority(request.body.get("priority"), priority)  # a large body's outline has it too
    if request.large is not None:
        return request.large.forward(upstream_model, sent)
    body = dict(request.body)
    body["model"] = upstream_model
    body.pop("priority", None)
    if sent is not None:
        body["priority"] = sent
    if body.get("max_completion_tokens") is not None:
        body["max_tokens"] = body["max_completion_tokens"]
    if request.stream:
        options = body.get("stream_options")
        body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return orjson.dumps(body)


def prompt_text(request: ParsedRequest) -> str:
    """Text of the prompt, for the context estimate and (opt-in) the request log. Of a
    large body, only what its worker kept (the text when the key logs prompts)."""
    if request.large is not None:
        return request.large.prompt or ""
    body = request.body
    messages = body.get("messages")
    if isinstance(messages, list):  # on /v1/completions an unchecked extra: any JSON
        parts: list[str] = []
        for message in messages:
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, list):
                parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
            if message.get("tool_calls"):
                parts.append(orjson.dumps(message["tool_calls"]).decode())
        if body.get("tools"):
            parts.append(orjson.dumps(body["tools"]).decode())
        return "\n".join(parts)
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else orjson.dumps(prompt).decode()


def prompt_length(request: ParsedRequest) -> int:
    """Characters of the prompt's text (for the token estimate)."""
    return request.large.prompt_chars if request.large is not None else len(prompt_text(request))
