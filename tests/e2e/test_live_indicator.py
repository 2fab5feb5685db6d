"""Browser: the navbar's live indicator exists only on pages that follow a socket, and
shows each state: connecting, live, reconnecting after the server went away, and refused
when the reconnecting user lost their role.

Init scripts record, from the document's creation on, every socket the page opens (and
whether it opened and closed) and every state the indicator took, so the tests assert the
indicator over a socket's whole life, not one look at it."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import uvicorn
from django.contrib.auth.models import Group

from portal.asgi import application
from tests.conftest import AsgiServer, browser_login, wait_for
from tests.e2e.sockets import socket_recorder, sockets

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Every state the indicator took, from the document's creation on: each record's old
# value, then the current one, so no state is lost when several changes come in one batch.
STATES = """
(() => {
  window.__liveStates = [];
  const note = (state) => {
    const states = window.__liveStates;
    if (state !== null && states[states.length - 1] !== state) states.push(state);
  };
  new MutationObserver((records) => {
    let el = null;
    for (const record of records) {
      if (record.target.id !== "live-status") continue;
      el = record.target;
      if (record.attributeName === "data-state") note(record.oldValue);
      if (record.attributeName === "hidden" && !el.hidden) note("shown");
    }
    if (el !== null) note(el.dataset.state || null);
  }).observe(document, { subtree: true, attributes: true, attributeOldValue: true,
                         attributeFilter: ["data-state", "hidden"] });
})();
"""


def record(page: Any) -> None:
    page.add_init_script(socket_recorder())
    page.add_init_script(STATES)


def _serve_on(port: int) -> tuple[uvicorn.Server, threading.Thread]:
    """The portal started again on `port`: a new process would have a channel layer of its
    own, and the old server's loop may still hold a receive on this one."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, timeout=15, what="uvicorn to start again")
    return server, thread


def _header_socket_live(page: Any) -> bool:
    """The header's quiet socket is open and has delivered its first message: the page's
    scripts (live.js, header.js) have run."""
    opened = any(s["opened"] and not s["closed"] for s in sockets(page, "/ws/header/"))
    return opened and page.locator("#alert-badge[data-live='1']").count() == 1


def test_pages_without_a_socket_never_show_the_indicator(asgi_server: Any, page: Any, admin_user: Any) -> None:
    record(page)
    browser_login(page, asgi_server.url, admin_user.username)
    for path in ("/teams/", "/routing/", "/benchmarks/", "/lanes/new/", "/users/", "/api/docs"):
        page.goto(f"{asgi_server.url}{path}")
        wait_for(lambda: _header_socket_live(page), timeout=30, what=f"the header socket on {path}")
        assert page.locator("#live-status").count() == 1
        assert not page.is_visible("#live-status"), path
        assert page.evaluate("window.__liveStates") == [], path
        assert [s["path"] for s in page.evaluate("window.__sockets")] == ["/ws/header/"], path

    # The header's socket drops and retries: still nothing to show on a page without its own.
    asgi_server.stop()
    wait_for(lambda: len(sockets(page, "/ws/header/")) >= 2 and all(s["closed"] for s in sockets(page, "/ws/header/")),
             timeout=30, what="the header socket to drop and a retry to fail")
    assert not page.is_visible("#live-status")
    assert page.evaluate("window.__liveStates") == []


def test_the_indicator_shows_live_reconnecting_and_refused(page: Any, viewer_user: Any) -> None:
    record(page)
    server = AsgiServer().start()
    second: uvicorn.Server | None = None
    try:
        browser_login(page, server.url, viewer_user.username)
        page.wait_for_url(f"{server.url}/")
        # The nodes list follows one socket of its own (the dashboard opens two, whose
        # retries interleave): each state it shows is that socket's.
        page.goto(f"{server.url}/nodes/")
        page.wait_for_selector("#live-status[data-state=open]")
        assert page.inner_text("#live-status") == "● live"
        assert [(s["opened"], s["closed"]) for s in sockets(page, "/ws/dashboard/")] == [(True, False)]
        page.evaluate("window.__notReloaded = true")

        server.stop()  # the socket drops: the page says so and keeps trying
        page.wait_for_selector("#live-status[data-state=closed]")
        assert page.inner_text("#live-status") == "● reconnecting…"
        assert sockets(page, "/ws/dashboard/")[0]["closed"]

        viewer_user.groups.remove(*Group.objects.all())  # meanwhile an admin took the role away
        second, thread = _serve_on(server.port)
        page.wait_for_selector("#live-status[data-state=refused]", timeout=20_000)
        assert page.inner_text("#live-status") == "● not allowed"
        assert page.evaluate("window.__notReloaded") is True
        # Every state in order, each once: no "live" while the server was gone, none after refusal.
        assert page.evaluate("window.__liveStates") == ["shown", "connecting", "open", "closed", "refused"]
        assert not any(s["opened"] for s in sockets(page, "/ws/dashboard/")[1:])
    finally:
        if second is not None:
            second.should_exit = True
            thread.join(timeout=10)
        else:
            server.stop()
