"""Raw ASGI helpers of the gateway: reading the body, sending JSON answers and errors,
authenticating the API key. Kept free of Django's request machinery on purpose (see
gateway/asgi.py for why)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from gateway.directory import KeyInfo
from gateway.keys import hash_secret
from gateway.pace import PACE
from gateway.runtime import GatewayRuntime
from gateway.wire import GatewayError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


NO_BODY_LIMIT = 64 * 1024  # requests that carry no body (GET /v1/models): a stray one is read within this
NO_BODY_RULE = "this request carries no body"
BODY_RULE = "PORTAL_GATEWAY_MAX_BODY_BYTES"


def too_large(limit: int, rule: str = BODY_RULE) -> GatewayError:
    return GatewayError(413, f"The request body is larger than {limit} bytes ({rule}).",
                        code="request_too_large", retryable=False)


def declared_length(scope: Scope) -> int | None:
    """The announced Content-Length, or None (absent, or not a plain number: the server's
    parser judges those; 4,300+ digits would make int() itself raise)."""
    declared = header(scope, b"content-length")
    if declared is None or not declared.isdigit() or len(declared) > 20:
        return None
    return int(declared)


def check_declared_length(scope: Scope, limit: int, rule: str = BODY_RULE) -> None:
    """Refuse an announced oversize body before reading a byte of it."""
    declared = declared_length(scope)
    if declared is not None and declared > limit:
        raise too_large(limit, rule)


async def read_body(receive: Receive, limit: int, *, paced_after: int | None = None, rate: float = 0,
                    grow: Callable[[int], None] | None = None, rule: str = BODY_RULE) -> bytes:
    """The whole body, refused with 413 as soon as it grows past `limit` (a chunked body
    announces no length). Its bytes past `paced_after` are read at most `rate` bytes a
    second with the process's other large bodies (gateway.pace), and once past it
    `grow(size)` is told its size as it grows (it may refuse: gateway.large_pool.HELD)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise GatewayError(400, "The client went away before sending the whole body.", code="client_disconnected")
        body = message.get("body", b"")
        if body:
            size += len(body)
            if size > limit:
                raise too_large(limit, rule)
            if grow is not None and paced_after is not None and size > paced_after:
                grow(size)
            chunks.append(body)
        paced = min(len(body), size - paced_after) if paced_after is not None and size > paced_after else 0
        if not message.get("more_body", False):
            PACE.delay(paced, rate)  # charged (to the next large body), not waited for
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if paced:
            await PACE.spend(paced, rate)


async def send_bytes(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]], content_type: bytes = JSON
) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: GatewayError, headers: list[tuple[bytes, bytes]]) -> None:
    await send_bytes(send, error.status, error.body(), [*headers, *error.headers()])


async def authenticate(rt: GatewayRuntime, scope: Scope) -> KeyInfo:
    """Bearer token → the key's cached description. 401 for anything else."""
    value = header(scope, b"authorization")
    if value is None or not value[:7].lower() == b"bearer ":
        raise GatewayError(401, "Missing API key: send `Authorization: Bearer <key>`.", code="invalid_api_key",
                           type_="authentication_error")
    secret = value[7:].strip().decode("latin-1")
    key = await rt.keys.get(hash_secret(secret)) if secret else None
    if key is None or key.revoked or key.expired(time.time()):
        shown = secret[:12] + "…" if len(secret) > 12 else "…"
        raise GatewayError(401, f"Incorrect API key provided: {shown}", code="invalid_api_key",
                           type_="authentication_error")
    return key
