"""Browser: a team lead adds a prototype, tries a prompt in the playground, makes a draft
that routes the new label to deepseek, evaluates it (chart drawn), publishes it after the
confirmation, and the very next model="auto" request through /v1 follows the new version."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from routing.models import RouterVersion
from routing.services import starter_load
from routing.tasks import train_router_version
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, browser_login, wait_for
from tests.gateway.conftest import create_key, make_lane

pytestmark = pytest.mark.e2e

PROMPT = "Translate this status report into Klingon, keeping the tone of the original."


def test_a_team_lead_changes_the_router_and_the_gateway_follows(asgi_server: Any, page: Any, lead_user: Any,
                                                                 admin_user: Any, settings: Any,
                                                                 engine_factory: Callable[..., EngineHandle],
                                                                 evaluation_threads: Any) -> None:
    qwen = engine_factory(SIM_QWEN, "--served-model-name", "qwen-test", time_scale=0.001)
    deepseek = engine_factory(SIM_QWEN, "--served-model-name", "deepseek-test", time_scale=0.001)
    make_lane("qwen", qwen.port, served="qwen-test")
    make_lane("deepseek", deepseek.port, served="deepseek-test")
    starter_load(actor=admin_user)
    secret, _ = create_key(admin_user, name="agent")
    client = openai.OpenAI(base_url=f"{asgi_server.url}/v1", api_key=secret, max_retries=0)

    def auto_lane() -> tuple[str, str]:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", max_tokens=4, messages=[{"role": "user", "content": PROMPT}])
        return raw.headers["x-spark-lane"], raw.headers["x-spark-router-version"]

    assert auto_lane() == ("qwen", "1")
    browser_login(page, asgi_server.url, lead_user.username)

    # 1. a new prototype with a new label
    page.goto(f"{asgi_server.url}/routing/")
    page.fill("#prototype-add textarea[name=text]", PROMPT)
    page.fill("#prototype-add input[name=label]", "translation")
    page.click("#prototype-add button[type=submit]")
    page.wait_for_selector("#prototypes .badge:has-text('translation')")

    # 2. the playground: the published v1 knows no such label yet
    page.goto(f"{asgi_server.url}/routing/playground/")
    page.fill("#playground textarea[name=prompt]", PROMPT)
    page.click("#playground button[type=submit]")
    assert page.inner_text("#decision-lane") == "qwen"
    page.select_option("#playground select[name=version]", "1")

    draft_sending_the_label_to_deepseek(page, asgi_server.url)  # 3
    evaluate_and_publish_the_draft(page, asgi_server.url)  # 4, 5

    # 6. the running gateway follows the new version without a restart
    assert wait_for(lambda: auto_lane() == ("deepseek", "2"), timeout=30, what="auto to follow v2")


def draft_sending_the_label_to_deepseek(page: Any, url: str) -> None:
    """3. a draft from v1 that sends the new label to deepseek; the playground with the
    draft already routes the prompt there."""
    page.goto(f"{url}/routing/versions/")
    page.click("#new-draft button")
    page.wait_for_selector("#version-form")
    mapping = page.input_value("#version-form textarea[name=label_lanes]")
    page.fill("#version-form textarea[name=label_lanes]", mapping + "\ntranslation = deepseek")
    page.click("#version-form button[type=submit]")
    page.wait_for_selector("text=v2 saved.")
    # its learned decision is trained on the prototypes with the new label (a worker job:
    # the test runs the task the worker would run for the queued message)
    page.click("#train")
    page.wait_for_selector("text=Training v2")
    train_router_version(RouterVersion.objects.get(number=2).pk)
    page.reload()
    assert page.inner_text("#train-state") == "trained"

    # the playground with the draft already routes the prompt to deepseek
    page.goto(f"{url}/routing/playground/")
    page.fill("#playground textarea[name=prompt]", PROMPT)
    page.select_option("#playground select[name=version]", "2")
    page.click("#playground button[type=submit]")
    assert page.inner_text("#decision-lane") == "deepseek"
    assert page.inner_text("#decision-label") == "translation"


def evaluate_and_publish_the_draft(page: Any, url: str) -> None:
    """4. evaluate the draft (accuracy, confusion, the chart with the published version
    beside); 5. publish after the confirmation that shows what changes."""
    page.goto(f"{url}/routing/versions/2/evaluate")
    page.click("#evaluate-run")  # a worker evaluates (here a thread); the page shows the report when done
    page.wait_for_selector("#accuracy", timeout=120_000)
    assert float(page.inner_text("#accuracy")) >= 0.9
    assert page.locator("#confusion").is_visible()
    assert page.evaluate("() => window.thresholdChart.data.datasets.map(d => d.label)") == [
        "accuracy", "share → deepseek", "share → qwen", "published v1 accuracy"]

    # 5. publish after the confirmation that shows what changes
    page.goto(f"{url}/routing/versions/2/")
    page.click("#publish-link")
    assert "translation" in page.inner_text("#changes")
    page.click("#publish-confirm button[type=submit]")
    page.wait_for_selector("#versions .badge:has-text('published')")
    assert "v2" in page.inner_text("#versions tbody tr:first-child")
