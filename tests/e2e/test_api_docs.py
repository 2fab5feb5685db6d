"""Browser: /api/docs renders every operation from the portal's own files, with every
request to another host blocked (the README promises no CDN)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.conftest import browser_login

pytestmark = pytest.mark.e2e


def test_api_docs_render_operations_offline(asgi_server: Any, page: Any, viewer_user: Any) -> None:
    outside: list[str] = []
    errors: list[str] = []

    def only_this_machine(route: Any) -> None:
        host = urlsplit(route.request.url).hostname or ""
        if route.request.url.startswith("data:") or host in ("127.0.0.1", "localhost"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.context.route("**/*", only_this_machine)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/api/docs")
    page.wait_for_selector(".swagger-ui .opblock", timeout=20_000)
    paths = page.locator(".swagger-ui .opblock-summary-path").all_inner_texts()
    assert any(p.replace("\u200b", "").startswith("/api/lanes") for p in paths)
    assert any(p.replace("\u200b", "").startswith("/api/jobs") for p in paths)
    assert len(paths) >= 20
    assert page.locator(".swagger-ui .info .title").inner_text().startswith("Spark Lanes Portal API")
    assert outside == []
    assert errors == []


def test_api_docs_are_refused_to_a_user_without_a_role(client: Any, outsider_client: Any) -> None:
    assert outsider_client.get("/api/docs").status_code == 403
    assert outsider_client.get("/api/openapi.json").status_code == 403
    assert client.get("/api/docs").status_code == 302
