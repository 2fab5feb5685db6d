"""Router fixtures: seed 000's two lanes, the shipped encoder, the starter data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings

from lanes.models import Lane
from routing.evaluation_runs import router_evaluation_request, router_evaluation_run
from routing.models import RouterEvaluation, RouterVersion
from routing.services import starter_load
from tests.gateway.conftest import clean_gateway_redis, key_owner, make_lane  # noqa: F401 (fixtures)


@pytest.fixture(autouse=True)
def clean_router_redis() -> Iterator[None]:
    """Conversation affinity is keyed by API key id, shadow counters by version number: a fresh
    test database reuses both."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for pattern in ("aff", "shadow-*", "judge-tokens"):  # shadow counters and the judge's spend too
        for key in client.scan_iter(f"{settings.REDIS_PREFIX}:router:{pattern}:*"):
            client.delete(key)
    yield


@pytest.fixture
def seed_lanes(db: None) -> dict[str, Lane]:
    return {"qwen": make_lane("qwen", 18001), "deepseek": make_lane("deepseek", 18002)}


@pytest.fixture
def starter(seed_lanes: dict[str, Lane]) -> list[str]:
    """The starter prototypes, evaluation prompts and a published v1."""
    return starter_load()


def post_ok(response: Any) -> None:
    assert response.status_code in (200, 302), response.status_code


def evaluate_now(version: RouterVersion, actor: Any) -> RouterEvaluation:
    """The version's evaluation asked for and run here, as a worker would run it."""
    evaluation, _ = router_evaluation_request(actor=actor, version=version)
    router_evaluation_run(evaluation_id=evaluation.pk)
    evaluation.refresh_from_db()
    return evaluation
