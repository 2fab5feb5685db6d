"""model="auto" in the gateway: the published version decides, among the lanes the key may
use and that are serving, with conversation affinity and a context check.

Nothing here sends anything upstream or retries: the decision names one lane and the
gateway's own rules (one send, failover only when provably not received) take over."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
from django.conf import settings

from gateway.context import TEMPLATE_OVERHEAD_PER_MESSAGE
from gateway.directory import KeyInfo, LaneInfo
from gateway.wire import GatewayError
from routing.batcher import EmbeddingBatcher
from routing.decision import Decision, decide
from routing.encoder import Encoder
from routing.published import JudgeRule, PublishedRouter, RouterSnapshot, RouterState
from routing.shadow import bound_stop_reason, shadow_agree_key, shadow_count_key, shadow_stop_key

REASON_CONTEXT = "context"


@dataclass(frozen=True)
class AutoRoute:
    lane: str
    reason: str  # router | default | fallback | context
    score: float | None = None
    label: str = ""
    prototype: str = ""
    version: int | None = None
    affinity: bool = False
    shadow_version: int | None = None
    shadow_lane: str = ""
    shadow_label: str = ""
    shadow_score: float | None = None
    judge: JudgeRule | None = None  # this request's draft answer is to be judged (gateway.judge)


class RouterRuntime:
    """Per event loop: the published state and the micro-batcher of the current encoder."""

    def __init__(self, client: Any) -> None:
        self.redis = client
        self.published = PublishedRouter(client)
        self._batcher: EmbeddingBatcher | None = None
        self._writes: set[asyncio.Task[Any]] = set()
        self.shadow_done: set[int] = set()  # shadow drafts whose sample limit is reached

    def count_shadow(self, shadow: RouterSnapshot, agreed: bool) -> None:
        """Count a shadow decision in Redis (every process shares the counts), off the client's
        time; this process stops sampling when the run's limit or its confidence bound is
        reached, or another process saw its bound first (routing.shadow)."""
        number, rule = shadow.number, shadow.stop

        async def incr() -> None:
            pipe = self.redis.pipeline(transaction=False)
            pipe.incr(shadow_count_key(number))
            pipe.incrby(shadow_agree_key(number), int(agreed))
            pipe.get(shadow_stop_key(number))
            count, agree, stopped = await pipe.execute()
            reason = bound_stop_reason(rule, "agreement", agree, count)
            if reason:
                await self.redis.set(shadow_stop_key(number), reason, nx=True)
            if stopped or reason or count >= rule.sample_limit > 0:
                self.shadow_done.add(number)
        task = asyncio.create_task(incr())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def remember(self, key: str, value: bytes) -> None:
        """Store a conversation's lane without making the client wait for Redis."""
        task = asyncio.create_task(self.redis.set(key, value, ex=settings.ROUTER_AFFINITY_TTL_S))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def batcher(self, encoder: Encoder) -> EmbeddingBatcher:
        if self._batcher is None or self._batcher.encoder is not encoder:
            if self._batcher is not None:
                self._batcher.close()
            self._batcher = EmbeddingBatcher(encoder, max_batch=settings.ROUTER_MAX_BATCH,
                                             cache_size=settings.ROUTER_CACHE_SIZE)
        return self._batcher

    def close(self) -> None:
        if self._batcher is not None:
            self._batcher.close()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text the router embeds: the last user message (or the completion prompt)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        for message in reversed(messages):
            if isinstance(message, dict) and message.get("role") == "user":
                return _text(message.get("content"))
        return ""
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], str):
        return prompt[-1]
    return ""


def conversation_digest(body: Mapping[str, Any]) -> str | None:
    """A conversation is known by its first messages: every later turn starts the same way
    (the same digest keeps its lane, and a conversation-level outcome reaches every turn)."""
    count = settings.ROUTER_AFFINITY_MESSAGES
    messages = body.get("messages")
    if not count or not isinstance(messages, list) or not messages:
        return None
    head = [[m.get("role"), _text(m.get("content"))] for m in messages[:count] if isinstance(m, dict)]
    return hashlib.sha256(orjson.dumps(head)).hexdigest()[:32]


def conversation_key(body: Mapping[str, Any], key: KeyInfo) -> str | None:
    """The Redis key of a conversation's lane (and that lane's prefix cache)."""
    digest = conversation_digest(body)
    return f"{settings.REDIS_PREFIX}:router:aff:{key.id}:{digest}" if digest else None


def prompt_upper_bound(raw_bytes: int, body: Mapping[str, Any]) -> int:
    """Tokens the prompt can at most be (a token is at least one byte), plus max tokens."""
    messages = body.get("messages")
    count = len(messages) if isinstance(messages, list) else 1
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 0
    return raw_bytes + TEMPLATE_OVERHEAD_PER_MESSAGE * count + (max_tokens if isinstance(max_tokens, int) else 0)


def _fits(lane: LaneInfo, tokens: int) -> bool:
    return tokens <= lane.context_limit


async def route_auto(
    rt: RouterRuntime, *, body: Mapping[str, Any], key: KeyInfo, lanes: Mapping[str, LaneInfo], raw_bytes: int,
) -> AutoRoute | None:
    """The router's lane, or None when no version is published (the gateway's default then,
    whether or not the router's model can load). Raises a 503 naming the reason when a
    published version cannot run (no model, broken model)."""
    state = await rt.published.state()
    if state.encoder is None and not state.any_published:
        return None  # nothing to route by: the default lane, encoder or not
    if state.encoder is None:
        raise GatewayError(503, f'model="auto" is unavailable: {state.unavailable}. Name a lane in `model` instead.',
                           code="router_unavailable", type_="server_error", param="model", retryable=False)
    if state.published is None:
        return None

    def usable(name: str) -> bool:
        lane = lanes.get(name)
        return lane is not None and lane.serving and key.may_use(name)

    affinity_key = conversation_key(body, key)
    messages = body.get("messages")
    # Only a later turn (more messages than the window) follows its conversation's first
    # decision; a first turn, or the same one-shot prompt sent again, is decided afresh.
    later_turn = isinstance(messages, list) and len(messages) > settings.ROUTER_AFFINITY_MESSAGES
    route = await _remembered(rt, affinity_key, usable) if affinity_key and later_turn else None
    if route is None:
        vector = await rt.batcher(state.encoder).embed(last_user_text(body))
        decision = decide(vector, state.published.prototypes, state.published.config, usable=usable)
        if decision.lane is None:
            raise GatewayError(503, "No lane this key may use is serving.", code="no_lane_available",
                               type_="server_error", retry_after_s=5, retryable=True)
        route = _with_shadow(rt, state, vector, decision)
        if affinity_key:
            rt.remember(affinity_key, orjson.dumps([route.lane, route.reason, route.score, route.label, route.version]))
    return _fit_context(route, lanes, usable, prompt_upper_bound(raw_bytes, body))


async def _remembered(rt: RouterRuntime, affinity_key: str, usable: Any) -> AutoRoute | None:
    raw = await rt.redis.get(affinity_key)
    if not raw:
        return None
    lane, reason, score, label, version = orjson.loads(raw)
    if not usable(lane):
        return None
    return AutoRoute(lane=lane, reason=reason, score=score, label=label, version=version, affinity=True)


def _with_shadow(rt: RouterRuntime, state: RouterState, vector: Any, decision: Decision) -> AutoRoute:
    assert state.published is not None and decision.lane is not None
    route = AutoRoute(lane=decision.lane, reason=decision.reason, score=decision.score, label=decision.label,
                      prototype=decision.prototype[:200], version=state.published.number)
    if state.shadow is None or state.shadow.number in rt.shadow_done or random.random() >= settings.ROUTER_SHADOW_SHARE:
        return route
    # The draft decides on the same vector, as if every lane could take it: what it would do.
    shadow = decide(vector, state.shadow.prototypes, state.shadow.config, usable=lambda _lane: True)
    rt.count_shadow(state.shadow, shadow.lane == route.lane)
    judge = state.shadow.judge
    judged = bool(judge and shadow.lane and shadow.lane != route.lane and random.random() < judge.share)
    return replace(route, shadow_version=state.shadow.number, shadow_lane=shadow.lane or "",
                   shadow_label=shadow.label, shadow_score=shadow.score, judge=judge if judged else None)


def _fit_context(route: AutoRoute, lanes: Mapping[str, LaneInfo], usable: Any, tokens: int) -> AutoRoute:
    chosen = lanes[route.lane]
    if _fits(chosen, tokens):
        return route
    roomier = sorted((lane for lane in lanes.values() if usable(lane.name) and lane.context_limit > chosen.context_limit),
                     key=lambda lane: lane.context_limit)
    for lane in roomier:
        if _fits(lane, tokens):
            return replace(route, lane=lane.name, reason=REASON_CONTEXT)
    # The bound counts a byte a token, so it may exceed every lane while the prompt's tokens
    # fit the roomiest: that lane counts them exactly, and when they do not fit there either
    # the context guard says that no lane can hold it, with each lane's limit.
    return replace(route, lane=roomier[-1].name, reason=REASON_CONTEXT) if roomier else route

