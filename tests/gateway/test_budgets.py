"""Token budgets per team and per key, per calendar day or month in the budgets' time zone:
refused with 429 `budget_exceeded` before the upstream call, by every web worker at once;
streamed answers count, also when the lane sends no usage; an admin's raise or reset and the
next period let requests through again."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import openai
import pytest
from django.contrib.auth.models import User

from gateway import budgets
from gateway.budgets import budget_window, current_window
from gateway.models import ApiKey
from gateway.team_services import budget_reset, budget_set, budget_use, team_create
from sparksim.standalone import EngineHandle
from tests.conftest import WorkerProcesses, wait_for
from tests.gateway.conftest import Gateway, create_key, engine_received, make_lane
from tests.gateway.upstreams import CountingUpstream

MESSAGES = [{"role": "user", "content": "count these four words"}]
BERLIN = ZoneInfo("Europe/Berlin")


def test_a_budgets_window_is_the_calendar_day_or_month_of_its_time_zone() -> None:
    late = datetime(2026, 3, 28, 23, 30, tzinfo=UTC)  # already the 29th in Berlin, the night clocks go forward
    assert budget_window("day", late, BERLIN) == ("2026-03-29", datetime(2026, 3, 30, tzinfo=BERLIN))
    assert budget_window("day", late, ZoneInfo("UTC")) == ("2026-03-28", datetime(2026, 3, 29, tzinfo=UTC))
    assert budget_window("month", datetime(2026, 12, 31, 23, 1, tzinfo=UTC), BERLIN) == (
        "2027-01", datetime(2027, 2, 1, tzinfo=BERLIN))
    assert budget_window("month", datetime(2026, 2, 10, tzinfo=UTC), BERLIN)[1] == datetime(2026, 3, 1, tzinfo=BERLIN)


def test_the_hot_paths_window_is_computed_once_per_period_and_zone_and_moves_at_its_end(settings: Any) -> None:
    day_end = datetime(2026, 12, 3, tzinfo=UTC).timestamp()
    window = current_window("day", day_end - 3600)
    assert (window.name, window.resets_at) == ("2026-12-02", datetime(2026, 12, 3, tzinfo=ZoneInfo("UTC")))
    assert current_window("day", day_end - 1) is window  # the same day: not computed again
    assert current_window("day", day_end).name == "2026-12-03"  # its end is the next day's start
    assert current_window("day", day_end - 1).name == "2026-12-02"  # a clock set back: computed again
    assert current_window("month", day_end).name == "2026-12"
    settings.GATEWAY_BUDGET_TIME_ZONE = "Asia/Tokyo"
    assert current_window("day", day_end - 3600).name == "2026-12-03"  # 08:00 there


def ask(url: str, secret: str, **body: object) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"}, timeout=15,
                      json={"model": "qwen", "messages": MESSAGES, **body})


def assert_budget_exceeded(response: httpx.Response) -> dict[str, object]:
    assert response.status_code == 429, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == "budget_exceeded"
    assert error["type"] == "rate_limit_error" and response.headers["x-should-retry"] == "false"
    assert datetime.fromisoformat(response.headers["x-budget-reset"]) > datetime.now(UTC)
    assert int(response.headers["retry-after"]) >= 1
    return error  # type: ignore[no-any-return]


def test_a_key_over_its_teams_daily_budget_is_refused_by_every_worker_and_passes_after_the_reset(
    worker_processes: Callable[..., WorkerProcesses], qwen_engine: EngineHandle, key_owner: User,
) -> None:
    make_lane("qwen", qwen_engine.port, served="qwen-test", max_model_len=32768)
    team = team_create(actor=key_owner, name="agents")
    budget = budget_set(actor=key_owner, team=team, period="day", total_tokens=30)
    secret, _ = create_key(key_owner, name="team-key", team=team.pk)
    workers = worker_processes(2)
    first = ask(workers.urls[0], secret, max_tokens=40)
    assert first.status_code == 200, first.text
    used = first.json()["usage"]["total_tokens"]
    assert used >= 30
    wait_for(lambda: budget_use(budget).total_tokens == used, what="the answer's tokens to be counted")
    sent = len(engine_received(qwen_engine))
    for url in workers.urls:
        error = assert_budget_exceeded(ask(url, secret))
        assert "team agents" in str(error["message"]) and f"{used} of 30 total tokens" in str(error["message"])
    assert len(engine_received(qwen_engine)) == sent  # refused before the upstream call
    budget_reset(actor=key_owner, budget=budget)
    for url in workers.urls:  # the count is gone in Redis: at once, no cache to expire
        assert ask(url, secret, max_tokens=1).status_code == 200


def test_an_admin_raising_a_key_budget_lets_it_through_in_every_worker(
    worker_processes: Callable[..., WorkerProcesses], qwen_engine: EngineHandle, key_owner: User,
) -> None:
    make_lane("qwen", qwen_engine.port, served="qwen-test", max_model_len=32768)
    # One request in flight at most: a refusal that left its admitted slot behind would block the key.
    secret, key_id = create_key(key_owner, name="solo", max_parallel=1)
    budget = budget_set(actor=key_owner, key=ApiKey.objects.get(pk=key_id), prompt_tokens=5)
    workers = worker_processes(2)
    assert ask(workers.urls[0], secret, max_tokens=1).status_code == 200
    wait_for(lambda: budget_use(budget).prompt_tokens >= 5, what="the prompt tokens to be counted")
    for url in workers.urls:
        assert "prompt tokens" in str(assert_budget_exceeded(ask(url, secret))["message"])
    budget_set(actor=key_owner, key=ApiKey.objects.get(pk=key_id), prompt_tokens=10_000)
    for url in workers.urls:
        wait_for(lambda url=url: ask(url, secret, max_tokens=1).status_code == 200,
                 what="the raised budget to reach the worker")


def test_a_stream_from_a_lane_without_usage_counts_and_the_next_day_passes_again(
    fault_gateway: Gateway, upstream: CountingUpstream, key_owner: User, monkeypatch: pytest.MonkeyPatch,
) -> None:
    upstream.sends_usage = False
    now = [datetime(2026, 12, 2, 22, 0, tzinfo=UTC).timestamp()]
    monkeypatch.setattr(budgets, "clock", lambda: now[0])
    secret, key_id = create_key(key_owner, name="streamer")
    budget = budget_set(actor=key_owner, key=ApiKey.objects.get(pk=key_id), completion_tokens=5)
    client = openai.OpenAI(base_url=fault_gateway.base_url, api_key=secret, max_retries=0)
    chunks = list(client.chat.completions.create(model="qwen", stream=True, messages=MESSAGES))  # type: ignore[arg-type]
    assert chunks and all(chunk.usage is None for chunk in chunks)  # no usage from the lane, none asked for
    wait_for(lambda: budget_use(budget).completion_tokens == 5, what="the gateway's count of the stream")
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model="qwen", stream=True, messages=MESSAGES)  # type: ignore[arg-type]
    assert refused.value.code == "budget_exceeded"
    assert refused.value.response.headers["x-budget-reset"] == "2026-12-03T00:00:00+00:00"
    assert upstream.completions == 1
    now[0] = datetime(2026, 12, 3, 0, 0, 1, tzinfo=UTC).timestamp()  # the next day in the budgets' zone
    assert ask(fault_gateway.url, secret, max_tokens=1).status_code == 200
    assert upstream.completions == 2
