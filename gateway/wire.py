"""The OpenAI wire format, as pure functions: error bodies, usage extraction, upstream
errors and the streaming filter (requests: gateway.request). No I/O here, so every
rule is tested directly."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

SSE_DONE = b"data: [DONE]\n\n"
# An event ends at a blank line, and the SSE spec lets a line end with CRLF, LF or CR (some
# servers frame with CRLF CRLF). Every blank line holds one of \n\n, \n\r or \r\r (a CR
# before LF is one CRLF); a CR that ends it may be followed by the LF of its CRLF.
EVENT_END = re.compile(rb"\n\n|\n\r\n?|\r\r\n?")
EVENT = re.compile(rb"(.*?)(\n\n|\n\r\n?|\r\r\n?)", re.S)
# The lane is always asked for usage; OpenAI sends no usage field at all to a client that
# did not ask (`"usage":null` on every chunk only with include_usage). A raw `"usage"`
# followed by `:` can only be a key: a quote inside a JSON string is escaped.
USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null(?=\s*[,}])|"usage"\s*:\s*null\s*,\s*')


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
    _pending: bytes = b""

    def feed(self, data: bytes) -> bytes:
        buffer = self._pending + data if self._pending else data
        end = last_event_end(buffer)
        if end < 0:
            self._pending = buffer
            return b""
        whole, self._pending = buffer[:end], buffer[end:]
        if b'"usage":{' not in whole and b'"usage": {' not in whole and b"[DONE]" not in whole:
            # The hot path: no event here needs a look inside; relayed byte for byte.
            if self.client_wants_usage or b'"usage"' not in whole:
                return whole
            return without_usage_null(whole)
        out, consumed = [], 0
        for match in EVENT.finditer(whole):
            out.append(self._event(match[1], match[2]))
            consumed = match.end()
        if consumed < len(whole):  # a lone line ending after the last event: it starts the next
            self._pending = whole[consumed:] + self._pending
        return b"".join(out)

    def _event(self, event: bytes, end: bytes) -> bytes:
        stripped = event.strip()
        if stripped == b"data: [DONE]":
            self.saw_done = True
            if not self.usage_seen:
                # The lane sent no usage (llama.cpp ignores include_usage): the relay counts
                # and sends the usage chunk before [DONE] itself.
                self.held_done = True
                return b""
            return event + end
        if not stripped.startswith(b"data:") or b'"usage"' not in stripped:
            return event + end
        try:
            payload = orjson.loads(stripped[5:])
        except orjson.JSONDecodeError:
            return event + end
        if not isinstance(payload, dict) or not isinstance(payload.get("usage"), dict):
            return event + end if self.client_wants_usage else without_usage_null(event) + end
        self.usage = usage_from(payload)
        self.usage_seen = True
        choices = payload.get("choices") or []
        if not choices:
            return event + end if self.client_wants_usage else b""
        # Usage riding on a chunk with choices: send the choices alone, then (if asked)
        # a separate usage-only chunk, as OpenAI does.
        usage = payload["usage"]
        if self.client_wants_usage:
            payload["usage"] = None
        else:
            del payload["usage"]
        out = b"data: " + orjson.dumps(payload) + end
        if self.client_wants_usage:
            tail = {**payload, "choices": [], "usage": usage}
            out += b"data: " + orjson.dumps(tail) + end
        return out

    def leftover(self) -> bytes:
        """Bytes after the last complete event when the upstream ended (normally none)."""
        pending, self._pending = self._pending, b""
        return pending


def last_event_end(buffer: bytes) -> int:
    """Where the buffer's last whole event ends (after its blank line), or -1."""
    if b"\r" not in buffer:  # the common framing (LF only): one scan
        at = buffer.rfind(b"\n\n")
        return at + 2 if at >= 0 else -1
    at = max(buffer.rfind(b"\n\n"), buffer.rfind(b"\n\r"), buffer.rfind(b"\r\r"))
    if at < 0:
        return -1
    match = EVENT_END.match(buffer, at)
    return match.end() if match else -1


def without_usage_null(data: bytes) -> bytes:
    """`"usage": null` taken out of compact JSON by a plain replace (vLLM's and sparksim's
    form: the hot path), any other spacing by the pattern."""
    data = data.replace(b',"usage":null', b"")
    return USAGE_NULL.sub(b"", data) if b'"usage"' in data else data


def sse_events(sse: bytes) -> list[bytes]:
    """A stream's events (whatever line endings frame them), a trailing partial one included."""
    return EVENT_END.split(sse)


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
    for event in sse_events(sse):
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
