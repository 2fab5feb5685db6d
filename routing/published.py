"""The published router as every gateway process sees it.

A publish (or a shadow change) increments one Redis key after its transaction commits.
Each process keeps its loaded version and asks Redis for that key at most every
ROUTER_VERSION_CHECK_S (0.25 s): a publish reaches every process within that, with no
restart, and a process switches atomically (one reference swap to a fully built state)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.db import db_call
from core.redis_client import sync_redis
from routing.decision import PrototypeSet, RouterConfig
from routing.encoder import Encoder, EncoderUnavailable
from routing.engine import router_encoder, stored_embeddings
from routing.learned import LearnedHead, prototypes_sha
from routing.models import RouterVersion, VersionStatus
from routing.selectors import version_prototypes
from routing.shadow import StopRule

log = logging.getLogger(__name__)



def published_key() -> str:
    return f"{settings.REDIS_PREFIX}:router:published"




def announce_published() -> None:
    sync_redis().incr(published_key())


@dataclass(frozen=True)
class JudgeRule:
    """A shadow draft's judged comparison: the share of sampled disagreements judged, the
    judge lane, and the day's token budget of the draft's answers and the judge's."""

    share: float
    lane: str
    daily_tokens: int
    stop: StopRule = StopRule()  # the run's stop rules (a judged win rate may end it)


@dataclass(frozen=True)
class RouterSnapshot:
    number: int
    config: RouterConfig
    prototypes: PrototypeSet
    stop: StopRule = StopRule()  # in shadow: when sampling stops (routing.shadow)
    judge: JudgeRule | None = None  # in shadow: the judged comparison, when opted in (gateway.judge)


@dataclass(frozen=True)
class RouterState:
    token: str
    published: RouterSnapshot | None
    shadow: RouterSnapshot | None
    unavailable: str | None  # why model="auto" cannot be routed, when it cannot
    encoder: Encoder | None
    # Without an encoder: whether a version is published at all (none: model="auto" takes the
    # default lane, as it does with an encoder and nothing published).
    any_published: bool = True


def version_config(version: RouterVersion) -> RouterConfig:
    return RouterConfig(threshold=version.threshold, aggregation=version.aggregation, top_k=version.top_k,
                        label_lanes=dict(version.label_lanes), default_lane=version.default_lane,
                        probability_floor=version.probability_floor)


def current_head(version: RouterVersion, encoder_id: str, texts: tuple[str, ...], labels: tuple[str, ...]) -> LearnedHead | None:
    """The version's learned head if it was trained with this encoder on exactly these
    prototypes; None when untrained or stale (the similarity rule decides then)."""
    if not version.learned:
        return None
    head = LearnedHead.from_json(version.learned)
    if head.encoder != encoder_id or head.prototypes_sha != prototypes_sha(texts, labels):
        return None
    return head


def version_snapshot(version: RouterVersion, encoder: Encoder) -> RouterSnapshot:
    items = version_prototypes(version)
    texts = tuple(item["text"] for item in items)
    labels = tuple(item["label"] for item in items)
    if version.aggregation == "learned" and current_head(version, encoder.id, texts, labels) is None and version.learned:
        log.warning("router: v%s's learned decision is stale (prototypes or encoder changed): the similarity rule decides",
                    version.number)
    stop = StopRule(version.shadow_limit, version.stop_metric, version.stop_threshold, version.stop_confidence)
    return RouterSnapshot(version.number, version_config(version),
                          PrototypeSet(texts, labels, stored_embeddings(encoder, texts),
                                       head=current_head(version, encoder.id, texts, labels)),
                          stop=stop, judge=JudgeRule(version.judge_share, version.judge_lane, version.judge_daily_tokens, stop)
                          if version.judge_share > 0 and version.judge_lane else None)


# Published versions are frozen: their matrices are built once per process and encoder.
_frozen: dict[tuple[int, str, str], RouterSnapshot] = {}


def load_router_state(token: str) -> RouterState:
    """Sync (a worker thread): the published version and the shadow draft, ready to decide."""
    try:
        encoder = router_encoder()
    except EncoderUnavailable as exc:
        any_published = RouterVersion.objects.filter(status=VersionStatus.PUBLISHED).exists()
        return RouterState(token, None, None, f"the router is off: {exc}", None, any_published=any_published)
    versions = list(RouterVersion.objects.filter(status=VersionStatus.PUBLISHED) | RouterVersion.objects.filter(shadow=True))
    published = next((v for v in versions if v.status == VersionStatus.PUBLISHED), None)
    shadow = next((v for v in versions if v.shadow and v.status == VersionStatus.DRAFT), None)
    snapshot = None
    if published is not None:
        key = (published.pk, str(published.published_at), encoder.id)
        snapshot = _frozen.get(key) or _frozen.setdefault(key, version_snapshot(published, encoder))
    return RouterState(
        token, snapshot, version_snapshot(shadow, encoder) if shadow is not None else None,
        None if snapshot is not None else "no router version is published yet", encoder,
    )


class PublishedRouter:
    """Per event loop: the current RouterState, refreshed when the Redis key moves."""

    def __init__(self, client: Any) -> None:
        self._redis = client
        self._state: RouterState | None = None
        self._checked_at = 0.0
        self._loading: asyncio.Task[RouterState] | None = None

    async def state(self) -> RouterState:
        now = time.monotonic()
        if self._state is not None and now - self._checked_at < settings.ROUTER_VERSION_CHECK_S:
            return self._state
        self._checked_at = now
        raw = await self._redis.get(published_key())
        token = raw.decode() if isinstance(raw, bytes) else str(raw)
        if self._state is not None and self._state.token == token:
            return self._state
        if self._loading is None or self._loading.done():
            self._loading = asyncio.create_task(db_call(load_router_state, token))
        self._state = await asyncio.shield(self._loading)
        return self._state
