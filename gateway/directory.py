"""What the hot path knows about API keys and lanes, held in process memory.

Looking a key or a lane up in PostgreSQL on every request would cost more than the whole
rest of the gateway. Keys are cached by secret hash for a short TTL (revocation is still
immediate: the admission script checks a Redis marker on every request, and a Redis
message drops the cached entry in every process). Lanes are one small table, reloaded in
the background when older than a couple of seconds."""

from __future__ import annotations

import asyncio
import hmac
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from core.db import db_call
from gateway.budgets import BudgetInfo, budget_identity
from gateway.models import ApiKey, Budget
from lanes.models import Lane
from lanes.selectors import lane_context_limit

SERVING_STATES = frozenset({"serving", "degraded"})


@dataclass(frozen=True)
class KeyInfo:
    id: int
    name: str
    secret_hash: str
    allowed_lanes: frozenset[str] | None  # None = every lane (the key's, within its team's)
    default_lane: str | None  # None = auto
    rpm: int
    tpm: int
    max_parallel: int
    log_prompts: bool  # the one prompt-storage opt-in (gateway.capture)
    expires_at: float | None
    revoked: bool
    team_id: int | None = None
    budgets: tuple[BudgetInfo, ...] = ()  # its own and its team's (gateway.budgets)
    weight: int = 1  # its share of a full lane (gateway.fair; within its team's, when it has one)
    priority: str = "interactive"
    team_weight: int = 1  # its team's share of a full lane (gateway.fair.flow_of)

    def may_use(self, lane: str) -> bool:
        return self.allowed_lanes is None or lane in self.allowed_lanes

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now


@dataclass(frozen=True)
class ReplicaInfo:
    index: int
    base_url: str
    observed_state: str

    @property
    def serving(self) -> bool:
        return self.observed_state in SERVING_STATES


@dataclass(frozen=True)
class LaneInfo:
    name: str
    public_model_name: str
    observed_state: str
    context_limit: int
    fallback: str | None
    replicas: tuple[ReplicaInfo, ...] = ()  # those with a head node, by index
    slots: int | None = None  # requests one replica takes at once (gateway.fair); None = unknown
    ranked: bool = False  # the engine runs --scheduling-policy priority: the gateway sets `priority`

    @property
    def base_url(self) -> str | None:
        """A serving replica's endpoint (off the hot path: /tokenize); None = no head node."""
        for replica in self.replicas:
            if replica.serving:
                return replica.base_url
        return self.replicas[0].base_url if self.replicas else None

    @property
    def serving(self) -> bool:
        return self.observed_state in SERVING_STATES and any(replica.serving for replica in self.replicas)


def effective_lanes(key_lanes: frozenset[str], team_lanes: frozenset[str] | None) -> frozenset[str] | None:
    """The lanes a key may use: its own within its team's (an empty set at either level is
    every lane; None = every lane). A key narrowed to lanes its team no longer has may use none."""
    if not team_lanes:
        return key_lanes or None
    return key_lanes & team_lanes if key_lanes else team_lanes


def _load_key(secret_hash: str) -> KeyInfo | None:
    key = ApiKey.objects.filter(secret_hash=secret_hash).select_related("default_lane", "team").first()
    # The lookup is by hash; compare again in constant time so the check never leaks timing.
    if key is None or not hmac.compare_digest(key.secret_hash, secret_hash):
        return None
    team_lanes = (frozenset(Lane.objects.filter(teams=key.team_id).values_list("name", flat=True))
                  if key.team_id else None)
    allowed = effective_lanes(frozenset(key.allowed_lanes.values_list("name", flat=True)), team_lanes)
    return KeyInfo(
        id=key.pk,
        name=key.name,
        secret_hash=key.secret_hash,
        allowed_lanes=allowed,
        default_lane=key.default_lane.name if key.default_lane else None,
        rpm=key.rpm_limit or 0,
        tpm=key.tpm_limit or 0,
        max_parallel=key.max_parallel or 0,
        log_prompts=key.log_prompts,
        expires_at=key.expires_at.timestamp() if key.expires_at else None,
        revoked=key.revoked_at is not None,
        weight=key.fair_weight or 1,
        priority=key.priority or "interactive",
        team_id=key.team_id,
        team_weight=key.team.fair_weight if key.team else 1,
        budgets=_budgets_of(key),
    )


def _budgets_of(key: ApiKey) -> tuple[BudgetInfo, ...]:
    scope = Q(key_id=key.pk) | Q(team_id=key.team_id) if key.team_id else Q(key_id=key.pk)
    return tuple(
        BudgetInfo(identity=budget_identity(b.pk, b.created_at),
                   owner=f"team {b.team.name}" if b.team else f"key {key.name}", period=b.period,
                   prompt=b.prompt_tokens or 0, completion=b.completion_tokens or 0, total=b.total_tokens or 0)
        for b in Budget.objects.filter(scope).select_related("team")
    )


def load_lanes() -> dict[str, LaneInfo]:
    lanes: dict[str, LaneInfo] = {}
    for lane in Lane.objects.select_related("fallback").prefetch_related("members__node", "replicas"):
        states = {row.index: row.observed_state for row in lane.replica_rows()}
        replicas = tuple(
            ReplicaInfo(index, lane.base_url(index), states.get(index, lane.observed_state))
            for index in lane.replica_indexes()
        )
        lanes[lane.name] = LaneInfo(
            name=lane.name,
            public_model_name=lane.public_model_name,
            observed_state=lane.observed_state,
            context_limit=lane_context_limit(lane),
            fallback=lane.fallback.name if lane.fallback else None,
            replicas=replicas,
            slots=lane.gateway_slots or lane.max_num_seqs or None,
            ranked=lane.scheduling_policy == "priority",
        )
    return lanes


class KeyCache:
    MAX_ENTRIES = 10_000  # bounded: random bad keys must not grow memory (LiteLLM #12685)

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[KeyInfo | None, float]] = OrderedDict()
        self._drops = 0  # how many invalidations this process has seen

    async def get(self, secret_hash: str) -> KeyInfo | None:
        now = time.monotonic()
        entry = self._entries.get(secret_hash)
        if entry is not None and now - entry[1] < settings.GATEWAY_KEY_CACHE_TTL_S:
            return entry[0]
        drops = self._drops
        info = await db_call(_load_key, secret_hash)
        if drops != self._drops:
            # A change (a raised budget, a narrowed key) was announced while this load ran: it
            # may have read the row from before, so it answers this request but is not kept
            # for the next ones (kept, the old row would outlive the change by the TTL).
            return info
        self._entries[secret_hash] = (info, now)
        self._entries.move_to_end(secret_hash)
        while len(self._entries) > self.MAX_ENTRIES:
            self._entries.popitem(last=False)
        return info

    def drop(self, key_id: int | None = None) -> None:
        self._drops += 1
        if key_id is None:
            self._entries.clear()
            return
        for secret_hash, (info, _) in list(self._entries.items()):
            if info is not None and info.id == key_id:
                del self._entries[secret_hash]


class LaneCache:
    def __init__(self) -> None:
        self._lanes: dict[str, LaneInfo] | None = None
        self._loaded_at = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        self._miss_refresh: asyncio.Task[None] | None = None
        self._invalidated = False

    async def _refresh(self) -> None:
        lanes = await db_call(load_lanes)
        self._lanes, self._loaded_at, self._invalidated = lanes, time.monotonic(), False

    async def get(self) -> Mapping[str, LaneInfo]:
        if self._lanes is None:
            await self._refresh()
        elif self._invalidated and self._refreshing is not None and not self._refreshing.done():
            # The portal said lanes changed: do not route on the old snapshot meanwhile.
            await asyncio.shield(self._refreshing)
        elif time.monotonic() - self._loaded_at > settings.GATEWAY_LANE_CACHE_TTL_S and (
            self._refreshing is None or self._refreshing.done()
        ):
            # Serve the last snapshot while a fresh one loads: never a query on the hot path.
            self._refreshing = asyncio.create_task(self._refresh())
        assert self._lanes is not None
        return self._lanes

    async def refresh_on_miss(self) -> bool:
        """A name not in the snapshot may be a lane created a moment ago: reload now.
        Concurrent misses share one reload (callers are authenticated keys under rpm limits)."""
        if self._miss_refresh is None or self._miss_refresh.done():
            self._miss_refresh = asyncio.create_task(self._refresh())
        await asyncio.shield(self._miss_refresh)
        return True

    def drop(self) -> None:
        """Reload now (called from the invalidation listener, inside the event loop)."""
        self._loaded_at, self._invalidated = 0.0, True
        if self._lanes is not None and (self._refreshing is None or self._refreshing.done()):
            self._refreshing = asyncio.create_task(self._refresh())


def resolve_model(model: str, lanes: Mapping[str, LaneInfo]) -> LaneInfo | None:
    """A lane by its name or by its served model name."""
    lane = lanes.get(model)
    if lane is not None:
        return lane
    for candidate in lanes.values():
        if candidate.public_model_name == model:
            return candidate
    return None
