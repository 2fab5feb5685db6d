"""Browser: an admin creates a team, an API key in it and the key's daily token budget through
the pages; the key's traffic through the gateway (to a sparksim lane) shows on the open usage
page's charts without a reload; the key hits its budget (429 `budget_exceeded` with the reset
header, before the lane is asked); the admin raises the budget on the team's page and the
key's next request passes at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from gateway.models import ApiKey, Budget, RequestLog, Team
from gateway.team_services import budget_use
from metrics.services import scrape_tick
from metrics.storage import usage_rollup
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, browser_login, wait_for
from tests.gateway.conftest import SIM_SERVED, engine_received, make_lane
from tests.gateway.test_budgets import ask, assert_budget_exceeded
from tests.jobs.conftest import call_in_thread

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
CHART = "Chart.getChart(document.querySelector(\"canvas[data-measure='{}']\")).data"
SUMS = ".datasets.map((ds) => [ds.label, ds.data.reduce((sum, v) => sum + (v || 0), 0)])"  # every hour's
LIMIT = 120  # total tokens a day: a few of the requests below


def set_budget(page: Any, total_tokens: int) -> None:
    """On the team's page: the key's daily budget, as an admin sets it."""
    page.select_option("#id_target", label="key coder")
    page.select_option("#id_period", "day")
    page.fill("#id_total_tokens", str(total_tokens))
    page.click("#budget-form button:has-text('Set budget')")
    page.wait_for_selector(".alert:has-text('Budget saved')")


def create_team_key_and_budget(page: Any, base_url: str) -> tuple[str, str]:
    """Through the pages: a team, a key in it (its secret, shown once) and the key's budget.
    Returns the secret and the team page's address."""
    page.goto(f"{base_url}/teams/")
    page.fill("#id_name", "agents")
    page.click("button:has-text('Create team')")
    page.wait_for_selector("h1:has-text('Team agents')")
    team_url = page.url
    page.goto(f"{base_url}/gateway/")
    page.fill("#id_name", "coder")
    page.select_option("#id_team", label="agents")
    page.click("button:has-text('Create key')")
    secret = page.locator("#new-secret code").inner_text().strip()
    page.goto(team_url)
    set_budget(page, LIMIT)
    row = page.locator("#team-budgets tbody tr[data-budget]").inner_text()
    assert "key coder" in row and f"— / — / {LIMIT}" in row
    return secret, team_url


def spend(base_url: str, secret: str, budget: Budget) -> tuple[int, int, int]:
    """Requests until the budget is used up, each one counted before the next: (requests,
    tokens, of which prompt tokens)."""
    used = prompt = passed = 0
    while used < LIMIT:  # every answer uses tokens
        answer = ask(base_url, secret, max_tokens=8)
        assert answer.status_code == 200, answer.text
        used += answer.json()["usage"]["total_tokens"]
        prompt += answer.json()["usage"]["prompt_tokens"]
        passed += 1

        def counted(total: int = used) -> bool:
            return budget_use(budget).total_tokens == total

        wait_for(counted, what="the answer's tokens to be counted")
    return passed, used, prompt


def test_a_budget_set_in_the_browser_stops_its_key_and_a_raise_lets_it_through_at_once(
    asgi_server: Any, page: Any, admin_user: Any, engine_factory: Callable[..., EngineHandle], settings: Any,
) -> None:
    engine = engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, time_scale=0.001)
    make_lane("qwen", engine.port, served=SIM_SERVED, max_model_len=32768)
    settings.GATEWAY_DEFAULT_LANE = "qwen"
    browser_login(page, asgi_server.url, admin_user.username)
    secret, team_url = create_team_key_and_budget(page, asgi_server.url)
    key = ApiKey.objects.get(name="coder")
    assert key.team == Team.objects.get(name="agents")
    page.click("#team-usage-charts")  # the team's usage page, per hour
    page.wait_for_selector("#live-status[data-state='open']")
    page.evaluate("window.__notReloaded = true")
    assert page.evaluate(f"{CHART.format('requests')}.datasets") == []  # no traffic yet

    passed, used, prompt = spend(asgi_server.url, secret, Budget.objects.get(key=key, period="day"))
    assert passed >= 2
    sent = len(engine_received(engine))
    error = assert_budget_exceeded(ask(asgi_server.url, secret, max_tokens=8))
    assert f"The daily budget of key coder is used up: {used} of {LIMIT} total tokens" in str(error["message"])
    assert len(engine_received(engine)) == sent  # refused before the lane is asked

    # The traffic reaches the open page at the next tick, as beat's rollup and scrape bring it.
    wait_for(lambda: RequestLog.objects.filter(key=key).count() == passed + 1, what="the request log rows")
    call_in_thread(lambda: usage_rollup(now=timezone.now()))
    call_in_thread(lambda: scrape_tick(now=timezone.now()))
    page.wait_for_selector("#usage-charts[data-ticks='1']")
    assert page.evaluate(CHART.format("requests") + SUMS) == [["coder", passed + 1]]  # the refusal is one too
    assert page.evaluate(CHART.format("tokens") + SUMS) == [["coder prompt tokens", prompt],
                                                            ["coder completion tokens", used - prompt]]
    cells = page.locator("#usage-top tbody tr").first.locator("td").all_inner_texts()
    assert cells[:5] == ["coder", str(passed + 1), "1", str(prompt), str(used - prompt)]
    assert page.evaluate("window.__notReloaded") is True

    page.goto(team_url)
    assert page.locator("#team-budgets .progress-bar.bg-danger").inner_text() == "100%"
    set_budget(page, LIMIT * 100)
    assert f"— / — / {LIMIT * 100}" in page.locator("#team-budgets tbody tr[data-budget]").inner_text()
    again = ask(asgi_server.url, secret, max_tokens=8)  # the next request: no wait for a cache to expire
    assert again.status_code == 200, again.text
    assert len(engine_received(engine)) == sent + 1
