"""Router fixtures: seed 000's two lanes, the shipped encoder, the starter data."""

from __future__ import annotations

from typing import Any

import pytest

from lanes.models import Lane
from routing.router.services import starter_load
from tests.gateway.conftest import make_lane


@pytest.fixture
def seed_lanes(db: None) -> dict[str, Lane]:
    return {"qwen": make_lane("qwen", 18001), "deepseek": make_lane("deepseek", 18002)}


@pytest.fixture
def starter(seed_lanes: dict[str, Lane]) -> list[str]:
    """The starter prototypes, evaluation prompts and a published v1."""
    return starter_load()


def post_ok(response: Any) -> None:
    assert response.status_code in (200, 302), response.status_code
