"""The context guard at the edge: the cheap bound first, the lane's /tokenize when the
bound is close to the limit (rules in gateway.context, counting in
gateway.tokens: a lane without /tokenize is remembered, and a prompt too large
to be worth posting is judged by the estimate)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.conf import settings

from gateway.context import context_bound, context_message, exceeds, no_lane_holds_message
from gateway.directory import LaneInfo
from gateway.request import ParsedRequest
from gateway.runtime import GatewayRuntime
from gateway.tokens import count_prompt
from gateway.wire import GatewayError


async def check_context(rt: GatewayRuntime, lane: LaneInfo, request: ParsedRequest,
                        others: Callable[[], Sequence[LaneInfo]] = tuple) -> None:
    """A 400 context_length_exceeded when the prompt cannot fit `lane`. `others()` gives the
    lanes `model="auto"` could have taken instead (asked only for a refusal): when none of
    them is roomier, the answer says that no lane can hold the prompt and names each one's limit."""
    messages = request.body.get("messages")
    count = len(messages) if isinstance(messages, list) else 1
    # The raw body's length bounds the prompt's bytes: no parsing needed for the common case.
    check = context_bound(prompt_bytes=request.size, messages=count, max_tokens=request.max_tokens,
                          limit=lane.context_limit, threshold=settings.GATEWAY_TOKENIZE_THRESHOLD)
    if not check.needs_exact:
        return
    tokens, estimated = await count_prompt(rt, lane, request)
    if not exceeds(tokens, max_tokens=request.max_tokens, limit=lane.context_limit):
        return
    message = context_message(tokens, max_tokens=request.max_tokens, limit=lane.context_limit,
                              estimated=estimated, degraded=lane.observed_state == "degraded")
    lanes = [lane, *(other for other in others() if other.name != lane.name)]
    if len(lanes) > 1 and all(other.context_limit <= lane.context_limit for other in lanes):
        message = no_lane_holds_message(tokens, max_tokens=request.max_tokens, estimated=estimated,
                                        limits=[(other.name, other.context_limit) for other in lanes])
    raise GatewayError(400, message, code="context_length_exceeded", param="messages", retryable=False)
