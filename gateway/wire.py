"""The OpenAI wire format, as pure functions: error bodies, usage extraction, upstream
errors and the streaming filter (requests: gateway.request). No I/O here, so every
rule is tested directly."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import orjson

SSE_DONE = b"data: [DONE]\n\n"


class GatewayError(Exception):
    """An error answered in OpenAI's shape. `retryable` becomes `x-should-retry`, which the
    official SDKs obey: false whenever the upstream may already have the request."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        retry_after_s: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.type = type_
        self.param = param
        self.retry_after_s = retry_after_s
        self.retryable = retryable

    def body(self) -> bytes:
        return error_body(self.message, type_=self.type, code=self.code, param=self.param)

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers: list[tuple[bytes, bytes]] = []
        if self.retry_after_s is not None:
            seconds = max(1, int(self.retry_after_s + 0.999))
            headers.append((b"retry-after", str(seconds).encode()))
            headers.append((b"retry-after-ms", str(max(1, math.ceil(self.retry_after_s * 1000))).encode()))
        if self.retryable is not None:
            headers.append((b"x-should-retry", b"true" if self.retryable else b"false"))
        return headers


def error_body(message: str, *, type_: str, code: str | None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def error_event(message: str, *, type_: str, code: str) -> bytes:
    """A mid-stream failure: the SDK raises APIError on a payload with an "error" key."""
    return b"data: " + error_body(message, type_=type_, code=code) + b"\n\n"


# --- responses ----------------------------------------------------------------------------


@dataclass
class Usage:
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def usage_from(payload: Any) -> Usage:
    usage = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(usage, dict):
        return Usage()
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return Usage(
        prompt_tokens=prompt if isinstance(prompt, int) else None,
        completion_tokens=completion if isinstance(completion, int) else None,
    )


def completion_text(payload: Any) -> str:
    """The answer's text (all choices), for the mirror comparison."""
    if not isinstance(payload, dict):
        return ""
    parts = []
    for choice in payload.get("choices") or []:
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            parts.append(message["content"])
        elif isinstance(choice, dict) and isinstance(choice.get("text"), str):
            parts.append(choice["text"])
    return "\n".join(parts)


UPSTREAM_MESSAGE_MAX = 300


def upstream_message(raw: bytes) -> str:
    """The message of an upstream error body, safe to show a client: only the JSON error's
    message, its first line, capped; never a traceback or a server path (llama.cpp answers
    bad input with a 500 carrying its traceback)."""
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    inner: dict[str, Any] = error if isinstance(error, dict) else payload
    message = inner.get("message")
    if not isinstance(message, str):
        return ""
    first = message.strip().split("\n", 1)[0].strip()
    if "Traceback" in first or 'File "' in first:
        return ""
    return first[:UPSTREAM_MESSAGE_MAX]


def upstream_error(status: int, raw: bytes) -> GatewayError:
    """An upstream (vLLM) error answer, reshaped into OpenAI's error body with a code."""
    message = upstream_message(raw)
    lowered = message.lower()
    if status == 400 and ("maximum context length" in lowered or "context length" in lowered):
        return GatewayError(400, message, code="context_length_exceeded", param="messages", retryable=False)
    if status < 500:
        return GatewayError(status, message or f"The lane refused the request (HTTP {status}).",
                            code="upstream_rejected", retryable=False)
    # The lane had the request: the client must not send it again (x-should-retry: false).
    # Its own 5xx text stays in the gateway's log: it may carry a traceback.
    return GatewayError(502, f"The lane failed with HTTP {status}; the request is not sent again.",
                        code="upstream_error", type_="server_error", retryable=False)


# --- streaming ----------------------------------------------------------------------------


@dataclass
class StreamFilter:
    """Relays SSE bytes event by event. Captures usage; drops the usage-only chunk when the
    client did not ask for it; never lets usage ride on a chunk with non-empty choices
    (LiteLLM #8450 / #36168). Other events pass byte for byte, as soon as they are whole,
    so tool-call argument deltas are never held back (LiteLLM #38926)."""

    client_wants_usage: bool
    usage: Usage = field(default_factory=Usage)
    saw_done: bool = False
    usage_seen: bool = False
    held_done: bool = False  # [DONE] withheld: no usage came before it
    events: int = 0
    _pending: bytes = b""

    def feed(self, data: bytes) -> bytes:
        buffer = self._pending + data if self._pending else data
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._pending = buffer
            return b""
        whole, self._pending = buffer[: end + 2], buffer[end + 2 :]
        if b'"usage":{' not in whole and b'"usage": {' not in whole and b"[DONE]" not in whole:
            # The hot path: no event here needs a look inside.
            self.events += whole.count(b"\n\n")
            return whole
        out = []
        for event in whole.split(b"\n\n")[:-1]:
            out.append(self._event(event))
        return b"".join(out)

    def _event(self, event: bytes) -> bytes:
        self.events += 1
        stripped = event.strip()
        if stripped == b"data: [DONE]":
            self.saw_done = True
            if not self.usage_seen:
                # The lane sent no usage (llama.cpp ignores include_usage): the relay counts
                # and sends the usage chunk before [DONE] itself.
                self.held_done = True
                return b""
            return event + b"\n\n"
        if not stripped.startswith(b"data:") or b'"usage"' not in stripped:
            return event + b"\n\n"
        try:
            payload = orjson.loads(stripped[5:])
        except orjson.JSONDecodeError:
            return event + b"\n\n"
        if not isinstance(payload, dict) or not isinstance(payload.get("usage"), dict):
            return event + b"\n\n"
        self.usage = usage_from(payload)
        self.usage_seen = True
        choices = payload.get("choices") or []
        if not choices:
            return event + b"\n\n" if self.client_wants_usage else b""
        # Usage riding on a chunk with choices: send the choices alone, then (if asked)
        # a separate usage-only chunk, as OpenAI does.
        usage = payload["usage"]
        payload["usage"] = None
        out = b"data: " + orjson.dumps(payload) + b"\n\n"
        if self.client_wants_usage:
            tail = {**payload, "choices": [], "usage": usage}
            out += b"data: " + orjson.dumps(tail) + b"\n\n"
        return out

    def leftover(self) -> bytes:
        """Bytes after the last complete event when the upstream ended (normally none)."""
        pending, self._pending = self._pending, b""
        return pending


# --- usage the upstream did not send ------------------------------------------------------


@dataclass
class StreamAnswer:
    """What a relayed stream said, read back only when the upstream sent no usage."""

    text: str = ""
    head: dict[str, Any] = field(default_factory=dict)  # id, object, created, model of the first chunk


def _choice_texts(choice: Any, parts: list[str]) -> None:
    if not isinstance(choice, dict):
        return
    for holder in (choice.get("delta"), choice.get("message")):
        if not isinstance(holder, dict):
            continue
        for name in ("content", "reasoning_content", "reasoning"):
            if isinstance(holder.get(name), str):
                parts.append(holder[name])
        for call in holder.get("tool_calls") or []:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                parts.extend(str(function.get(name) or "") for name in ("name", "arguments"))
    if isinstance(choice.get("text"), str):
        parts.append(choice["text"])


def answer_text(payload: Any) -> str:
    """Every generated text of a whole answer (all choices: content, reasoning, tool calls)."""
    parts: list[str] = []
    for choice in (payload.get("choices") or []) if isinstance(payload, dict) else []:
        _choice_texts(choice, parts)
    return "".join(parts)


def stream_answer(sse: bytes) -> StreamAnswer:
    answer = StreamAnswer()
    parts: list[str] = []
    for event in sse.split(b"\n\n"):
        event = event.strip()
        if not event.startswith(b"data:") or event == b"data: [DONE]":
            continue
        try:
            payload = orjson.loads(event[5:])
        except orjson.JSONDecodeError:
            continue
        if not isinstance(payload, dict):
            continue
        if not answer.head:
            answer.head = {name: payload.get(name) for name in ("id", "object", "created", "model")}
        for choice in payload.get("choices") or []:
            _choice_texts(choice, parts)
    answer.text = "".join(parts)
    return answer


def usage_payload(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def usage_event(head: dict[str, Any], usage: Usage, *, chat: bool) -> bytes:
    """The usage-only chunk OpenAI sends before [DONE] (choices empty)."""
    payload: dict[str, Any] = {
        "id": head.get("id") or "", "object": head.get("object") or ("chat.completion.chunk" if chat else
                                                                    "text_completion"),
        "created": head.get("created") or 0, "model": head.get("model") or "", "choices": [],
        "usage": usage_payload(usage.prompt_tokens or 0, usage.completion_tokens or 0),
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"
