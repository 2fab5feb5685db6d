"""Browser: the navbar's live indicator exists only on pages that follow a socket, and
shows each state: connecting, live, reconnecting after the server went away, and refused
when the reconnecting user lost their role."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import uvicorn
from django.contrib.auth.models import Group

from portal.asgi import application
from tests.conftest import AsgiServer, browser_login, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _serve_on(port: int) -> tuple[uvicorn.Server, threading.Thread]:
    config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=15, what="uvicorn to start again")
    return server, thread


def test_pages_without_a_socket_show_no_indicator(asgi_server: Any, page: Any, admin_user: Any) -> None:
    browser_login(page, asgi_server.url, admin_user.username)
    for path in ("/gateway/", "/routing/", "/benchmarks/", "/lanes/new/", "/users/", "/api/docs"):
        page.goto(f"{asgi_server.url}{path}")
        page.wait_for_load_state("load")
        assert page.locator("#live-status").count() == 1
        assert not page.is_visible("#live-status"), path


def test_the_indicator_shows_live_reconnecting_and_refused(page: Any, viewer_user: Any) -> None:
    server = AsgiServer().start()
    second: uvicorn.Server | None = None
    try:
        browser_login(page, server.url, viewer_user.username)
        page.wait_for_selector("#live-status[data-state=open]")
        assert page.inner_text("#live-status") == "● live"
        page.evaluate("window.__notReloaded = true")

        server.stop()  # the socket drops: the page says so and keeps trying
        page.wait_for_selector("#live-status[data-state=closed]")
        assert page.inner_text("#live-status") == "● reconnecting…"

        viewer_user.groups.remove(*Group.objects.all())  # meanwhile an admin took the role away
        second, thread = _serve_on(server.port)
        page.wait_for_selector("#live-status[data-state=refused]", timeout=20_000)
        assert page.inner_text("#live-status") == "● not allowed"
        assert page.evaluate("window.__notReloaded") is True
    finally:
        if second is not None:
            second.should_exit = True
            thread.join(timeout=10)
        else:
            server.stop()
