"""The context guard at the edge: the cheap bound first, the lane's /tokenize when the
bound is close to the limit (rules in routing.gateway.context)."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from django.conf import settings

from routing.gateway.context import CHARS_PER_TOKEN_GUESS, context_bound, context_message, exceeds
from routing.gateway.directory import LaneInfo
from routing.gateway.runtime import GatewayRuntime
from routing.gateway.wire import GatewayError, ParsedRequest, prompt_text


async def check_context(rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest, raw: bytes) -> None:
    messages = request.body.get("messages")
    count = len(messages) if isinstance(messages, list) else 1
    # The raw body's length bounds the prompt's bytes: no parsing needed for the common case.
    check = context_bound(prompt_bytes=len(raw), messages=count, max_tokens=request.max_tokens,
                          limit=lane.context_limit, threshold=settings.GATEWAY_TOKENIZE_THRESHOLD)
    if not check.needs_exact:
        return
    tokens, estimated = await tokenize(rt, lane, request), False
    if tokens is None:
        tokens, estimated = len(prompt_text(request).encode()) // CHARS_PER_TOKEN_GUESS, True
    if exceeds(tokens, max_tokens=request.max_tokens, limit=lane.context_limit):
        raise GatewayError(400, context_message(tokens, max_tokens=request.max_tokens, limit=lane.context_limit,
                                                estimated=estimated, degraded=lane.observed_state == "degraded"),
                           code="context_length_exceeded", param="messages", retryable=False)


async def tokenize(rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest) -> int | None:
    """The lane's exact prompt length from vLLM's /tokenize (None if it cannot say)."""
    body: dict[str, Any] = {"model": lane.public_model_name}
    for name in ("messages", "tools", "prompt"):
        if name in request.body:
            body[name] = request.body[name]
    try:
        response = await rt.client.post(f"{lane.base_url}/tokenize", content=orjson.dumps(body),
                                        headers={"content-type": "application/json"}, timeout=30)
        if response.status_code != 200:
            return None
        count = orjson.loads(response.content).get("count")
        return count if isinstance(count, int) else None
    except (httpx.HTTPError, orjson.JSONDecodeError, AttributeError):
        return None
