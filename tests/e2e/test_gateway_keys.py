"""Browser: an admin creates an API key (secret shown once), a client uses it against the
live gateway, the admin revokes it, and the very next call is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, browser_login
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
    page.once("dialog", lambda dialog: dialog.dismiss())  # second thoughts: nothing happens
    page.click("#keys button:has-text('Revoke')")
    assert client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}]).choices
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#keys button:has-text('Revoke')")
    page.wait_for_selector("#keys .badge:has-text('revoked')")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="auto", messages=[{"role": "user", "content": "hi"}])
    assert len(engine_received(engine)) == 2
