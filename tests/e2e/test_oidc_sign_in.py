"""Browser: the login page's "Sign in with …" button, the real provider's login form
(tests/oidc_provider/, its own process), and back on the portal (uvicorn) signed in with the
role the provider's group maps to, its live socket open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.oidc_provider.server import Provider

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    started = Provider(Path(tmp_path_factory.mktemp("oidc-provider"))).start()
    yield started
    started.stop()


def test_sign_in_with_the_provider_in_a_browser(asgi_server, page, provider, settings):
    for name, value in provider.portal_settings().items():
        setattr(settings, name, value)
    settings.OIDC_GROUP_MAP = {"roles": {"staff": "viewer"}}
    provider.allow_redirect(f"{asgi_server.url}/oidc/callback/")
    provider.user("dora", groups=["staff"], email="dora@example.org", password="dora-pass-123")

    page.goto(f"{asgi_server.url}/accounts/login/")
    page.click("#oidc-sign-in:has-text('Sign in with Test IdP')")
    page.wait_for_selector("input[name=password]")
    assert page.url.startswith(provider.url)  # at the provider's own login form
    page.fill("input[name=username]", "dora")
    page.fill("input[name=password]", "dora-pass-123")
    page.click("button")
    page.wait_for_selector("h1:has-text('Dashboard')")
    assert page.url.startswith(asgi_server.url)
    page.wait_for_selector("#live-status[data-state='open']")
    assert page.locator("body").inner_text().count("dora") >= 1
