"""Decisions of the starter version (published v1) on fixed prompts, with the shipped model."""

from __future__ import annotations

import pytest

from routing.decision import decide
from routing.engine import router_encoder
from routing.published import load_router_state

CASES = [
    ("What port does PostgreSQL use by default?", "qwen"),
    ("Rename the function load to load_config in this file.", "qwen"),
    ("Prove that the sum of two even numbers is even.", "deepseek"),
    ("Write a 3,000-word design doc for a distributed rate limiter.", "deepseek"),
    ("Refactor this 2,000-line module into a package with separate parsing, storage and HTTP layers.", "deepseek"),
    ("Review the architecture of our multi-region event pipeline for single points of failure.", "deepseek"),
    # Long, but a short factual question about pasted text.
    ("Pasted below is our compose file. services: web: image: portal:1.4 ports: ['8080:8000'] environment: "
     "DATABASE_URL: postgres://db/portal REDIS_URL: redis://redis:6379/0 depends_on: [db, redis] worker: image: "
     "portal:1.4 command: celery -A portal worker depends_on: [redis] db: image: postgres:16 volumes: [pgdata:/var/lib/"
     "postgresql/data] redis: image: redis:7. Which host port does the web service publish?", "qwen"),
]


@pytest.mark.parametrize(("prompt", "lane"), CASES)
def test_the_starter_version_routes_fixed_prompts(starter, prompt, lane):
    state = load_router_state("test")
    assert state.published is not None and state.unavailable is None
    query = router_encoder().embed([prompt])[0]
    decision = decide(query, state.published.prototypes, state.published.config, usable=lambda name: True)
    assert decision.lane == lane, (decision.label, decision.score, decision.top[:2])
