"""The OpenAI wire format, as pure functions: error bodies, request patching, usage
extraction, and the streaming filter. No I/O here, so every rule is tested directly."""

from __future__ import annotations

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
            headers.append((b"retry-after-ms", str(max(1, int(self.retry_after_s * 1000))).encode()))
        if self.retryable is not None:
            headers.append((b"x-should-retry", b"true" if self.retryable else b"false"))
        return headers


def error_body(message: str, *, type_: str, code: str | None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


def error_event(message: str, *, type_: str, code: str) -> bytes:
    """A mid-stream failure: the SDK raises APIError on a payload with an "error" key."""
    return b"data: " + error_body(message, type_=type_, code=code) + b"\n\n"


# --- requests -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedRequest:
    body: dict[str, Any]
    model: str
    stream: bool
    client_wants_usage: bool
    max_tokens: int


def parse_request(raw: bytes, *, endpoint: str) -> ParsedRequest:
    """Validate only what the gateway reads; every other field passes through untouched."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise GatewayError(400, f"The body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "The body must be a JSON object.", code="invalid_request")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise GatewayError(400, "`model` is required and must be a non-empty string.", code="invalid_value", param="model")
    if endpoint == "chat.completions":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise GatewayError(400, "`messages` is required and must be a non-empty array.", code="invalid_value", param="messages")
    elif "prompt" not in body:
        raise GatewayError(400, "`prompt` is required.", code="invalid_value", param="prompt")
    stream = body.get("stream") is True
    options = body.get("stream_options")
    wants_usage = bool(stream and isinstance(options, dict) and options.get("include_usage") is True)
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
        field_name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        raise GatewayError(400, f"`{field_name}` must be a positive integer.", code="invalid_value", param=field_name)
    return ParsedRequest(body=body, model=model, stream=stream, client_wants_usage=wants_usage, max_tokens=max_tokens)


def upstream_body(request: ParsedRequest, *, upstream_model: str) -> bytes:
    """The client's body with two changes: the lane's served model name, and (streaming)
    usage always requested so tokens are counted even when the client did not ask."""
    body = dict(request.body)
    body["model"] = upstream_model
    if request.stream:
        options = body.get("stream_options")
        body["stream_options"] = {**(options if isinstance(options, dict) else {}), "include_usage": True}
    return orjson.dumps(body)


def prompt_text(request: ParsedRequest) -> str:
    """Text of the prompt, for the context estimate and (opt-in) the request log."""
    body = request.body
    if "messages" in body:
        parts: list[str] = []
        for message in body["messages"]:
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
    """The answer's text (all choices), for shadow comparison."""
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


def upstream_error(status: int, raw: bytes) -> GatewayError:
    """An upstream (vLLM) error answer, reshaped into OpenAI's error body with a code."""
    message = ""
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error")
        inner: dict[str, Any] = error if isinstance(error, dict) else payload
        message = str(inner.get("message") or "")
    if not message:
        message = raw[:300].decode("utf-8", "replace") or f"Upstream answered {status}."
    lowered = message.lower()
    if status == 400 and ("maximum context length" in lowered or "context length" in lowered):
        return GatewayError(400, message, code="context_length_exceeded", param="messages", retryable=False)
    if status < 500:
        return GatewayError(status, message, code="upstream_rejected", retryable=False)
    # The lane had the request: the client must not send it again (x-should-retry: false).
    return GatewayError(502, f"The lane failed: {message}", code="upstream_error", type_="server_error", retryable=False)


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
