"""Browser: an admin creates an API key (secret shown once), a client uses it against the
live gateway, the admin revokes it, and the very next call is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, browser_login
from tests.e2e.confirm import answer
from tests.gateway.conftest import SIM_SERVED, engine_received, make_lane

pytestmark = pytest.mark.e2e


def test_a_key_created_in_the_browser_works_until_revoked(asgi_server: Any, page: Any, admin_user: Any,
                                                         engine_factory: Callable[..., EngineHandle],
                                                         settings: Any) -> None:
    engine = engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, time_scale=0.001)
    make_lane("qwen", engine.port, served=SIM_SERVED)
    settings.GATEWAY_DEFAULT_LANE = "qwen"
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/gateway/")
    page.fill("#id_name", "browser-agent")
    page.click("button:has-text('Create key')")
    secret = page.locator("#new-secret code").inner_text().strip()
    assert secret.startswith("sk-spark-")
    client = openai.OpenAI(base_url=f"{asgi_server.url}/v1", api_key=secret, max_retries=0)
    assert client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}]).choices
    page.goto(f"{asgi_server.url}/gateway/")
    assert secret not in page.content()  # shown once
    page.click("#keys button:has-text('Revoke')")
    assert "cannot be undone" in answer(page, "escape")  # second thoughts: nothing happens
    assert client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}]).choices
    page.click("#keys button:has-text('Revoke')")
    answer(page, "confirm")
    page.wait_for_selector("#keys .badge:has-text('revoked')")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
    assert len(engine_received(engine)) == 2


def test_a_long_key_name_stays_inside_the_keys_table(asgi_server: Any, page: Any, admin_user: Any) -> None:
    page.set_viewport_size({"width": 1400, "height": 900})
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/gateway/")
    page.fill("#id_name", "agent-" + "x" * 94)  # the longest name allowed, without a space to wrap at
    page.click("button:has-text('Create key')")
    page.wait_for_selector("#new-secret")
    table = page.locator("#keys").evaluate("t => t.parentElement.getBoundingClientRect().right")
    form = page.locator("#id_name").bounding_box()
    assert table <= form["x"], "the keys table runs into the New key form"
    cell = page.locator("#keys .key-name").first.bounding_box()
    assert cell["x"] + cell["width"] <= table
