"""Browser: a team lead trains a learned draft, compares it with the published version
(in-sample and held-out figures labelled), puts it in shadow with a judged comparison,
sees the judged and replayed results, activates it — model="auto" follows — and reverts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from gateway.models import CapturedPrompt, JudgedComparison
from routing.models import RouterVersion
from routing.services import starter_load
from routing.tasks import train_router_version
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, browser_login, wait_for
from tests.gateway.conftest import create_key, make_lane

pytestmark = pytest.mark.e2e

DEEP = "Prove that there are infinitely many primes of the form 4k+3."


def test_a_team_lead_takes_a_learned_draft_through_shadow_to_active_and_back(
        asgi_server: Any, page: Any, lead_user: Any, admin_user: Any, settings: Any,
        engine_factory: Callable[..., EngineHandle], evaluation_threads: Any) -> None:
    settings.ROUTER_SHADOW_SHARE = 1.0
    settings.ROUTER_VERSION_CHECK_S = 0  # the shadow set on the page is seen by the next request
    qwen = engine_factory(SIM_QWEN, "--served-model-name", "qwen-test", time_scale=0.001)
    deepseek = engine_factory(SIM_QWEN, "--served-model-name", "deepseek-test", time_scale=0.001)
    make_lane("qwen", qwen.port, served="qwen-test")
    make_lane("deepseek", deepseek.port, served="deepseek-test")
    starter_load(actor=admin_user)
    secret, _ = create_key(admin_user, name="agent", log_prompts=True)
    client = openai.OpenAI(base_url=f"{asgi_server.url}/v1", api_key=secret, max_retries=0)

    def auto() -> tuple[str, str, str]:
        raw = client.chat.completions.with_raw_response.create(
            model="auto", max_tokens=4, messages=[{"role": "user", "content": DEEP}])
        return raw.headers["x-spark-lane"], raw.headers["x-spark-router-version"], raw.headers["x-request-id"]

    assert auto()[:2] == ("deepseek", "1")
    browser_login(page, asgi_server.url, lead_user.username)
    url = asgi_server.url

    train_a_learned_draft(page, url)  # 1
    compare_it_with_the_published_version(page, url)  # 2
    put_it_in_shadow_with_a_judge(page, url)  # 3
    lane, version, request_id = auto()
    assert (lane, version) == ("deepseek", "1")  # the client's answer is the published version's
    row = wait_for(lambda: JudgedComparison.objects.filter(request_id=request_id).first(), what="the judged comparison")
    assert row.verdict in ("draft", "published") and row.draft_lane == "qwen"
    wait_for(lambda: CapturedPrompt.objects.filter(request_id=request_id).exists(), what="the stored prompt")

    # 4. judged and replayed results
    page.reload()
    judged = page.inner_text("#judged")
    assert "1 win" in judged or "1 loss" in judged, judged
    assert "tokens of draft answers" in page.inner_text("#judge-cost")
    page.goto(f"{url}/routing/replay/?version=2")
    assert int(page.inner_text("#replay-count")) >= 1
    assert "qwen" in page.inner_text("#replay-changed")

    # 5. activate: the publish confirmation, then auto follows v2
    page.goto(f"{url}/routing/shadow/")
    page.click("#activate")
    page.click("#publish-confirm button[type=submit]")
    page.wait_for_selector("#versions .badge:has-text('published')")
    assert wait_for(lambda: auto()[:2] == ("qwen", "2"), timeout=30, what="auto to follow v2")

    # 6. revert: back to v1 everywhere
    page.goto(f"{url}/routing/shadow/")
    page.click("#revert a")
    page.click("#revert-confirm button[type=submit]")
    assert wait_for(lambda: auto()[:2] == ("deepseek", "1"), timeout=30, what="auto to follow v1 again")


def train_a_learned_draft(page: Any, url: str) -> None:
    """1. a learned draft that sends long reasoning to qwen, trained (the worker's task, run here)."""
    page.goto(f"{url}/routing/versions/")
    page.click("#new-draft button")
    page.wait_for_selector("#version-form")
    mapping = page.input_value("#version-form textarea[name=label_lanes]")
    page.fill("#version-form textarea[name=label_lanes]", mapping + "\nlong_reasoning = qwen")
    page.click("#version-form button[type=submit]")
    page.wait_for_selector("text=v2 saved.")
    page.click("#train")
    page.wait_for_selector("text=Training v2")
    train_router_version(RouterVersion.objects.get(number=2).pk)
    page.reload()
    assert page.inner_text("#train-state") == "trained"


def compare_it_with_the_published_version(page: Any, url: str) -> None:
    """2. the evaluation page: held-out and in-sample figures say which they are."""
    page.goto(f"{url}/routing/versions/2/evaluate", timeout=60_000)
    page.click("#evaluate-run")  # the evaluation runs in the background; the report replaces the progress
    page.wait_for_selector("#cv-accuracy", timeout=120_000)
    assert page.locator("#cv-accuracy").is_visible()
    assert "(in-sample)" in page.inner_text("#cv-row")
    assert "held out" in page.content()


def put_it_in_shadow_with_a_judge(page: Any, url: str) -> None:
    """3. in shadow, judged by qwen on every disagreement."""
    page.goto(f"{url}/routing/shadow/")
    page.select_option("#shadow-version", "2")
    page.fill("#judge_share", "1")
    page.select_option("#judge_lane", "qwen")
    page.click("#shadow-start button[type=submit]")
    page.wait_for_selector("#shadow-samples")
