"""Browser: an admin creates a user with a role; that user then sees only what the role
allows; an account without a role sees one page saying so."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from core.models import AuditEvent
from core.roles import Role, user_role
from tests.conftest import PASSWORD, browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _nav_links(page: Any) -> list[str]:
    return [link.strip() for link in page.locator("#nav .nav-link").all_inner_texts()]


def test_admin_creates_a_viewer_who_then_sees_only_what_a_viewer_may(
    asgi_server: Any, browser: Any, page: Any, admin_user: Any
) -> None:
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/users/")
    assert "Users" in _nav_links(page) and "Gateway" in _nav_links(page)
    page.fill("#id_username", "vera")
    page.fill("#id_email", "vera@example.org")
    page.select_option("#id_role", "viewer")
    page.fill("#id_password", PASSWORD)
    page.click("#user-create button[type=submit]")
    page.wait_for_selector("#users tr[data-user='vera']")
    assert page.locator("#users tr[data-user='vera'] select[name=role]").input_value() == "viewer"
    assert "user.create vera" in page.inner_text("#user-audit")
    vera = User.objects.get(username="vera")
    assert user_role(vera) is Role.VIEWER

    other = browser.new_context()
    try:
        tab = other.new_page()
        browser_login(tab, asgi_server.url, "vera")
        tab.wait_for_selector("h1:has-text('Dashboard')")
        assert tab.inner_text("#nav-role") == "viewer"
        links = _nav_links(tab)
        assert {"Dashboard", "Nodes", "Lanes", "Jobs", "API"} <= set(links)
        assert "Gateway" not in links and "Users" not in links
        assert tab.locator("a:has-text('Admin')").count() == 0
        response = tab.goto(f"{asgi_server.url}/users/")
        assert response.status == 403
        response = tab.goto(f"{asgi_server.url}/gateway/")
        assert response.status == 403
        tab.goto(f"{asgi_server.url}/lanes/")
        assert tab.locator("#lane-add").count() == 0  # reads lanes, cannot define one

        # the admin makes vera a team lead: her next page shows it
        page.select_option("#users tr[data-user='vera'] select[name=role]", "team lead")
        page.click("#users tr[data-user='vera'] .role-form button")
        page.wait_for_selector(".alert-success:has-text('vera is now team lead')")
        tab.goto(f"{asgi_server.url}/")
        assert tab.inner_text("#nav-role") == "team lead"
    finally:
        other.close()
    assert list(AuditEvent.objects.filter(object_id=str(vera.pk)).values_list("action", flat=True)) == [
        "user.role", "user.create"]


def test_a_user_without_a_role_sees_a_page_saying_so(asgi_server: Any, page: Any, outsider_user: Any) -> None:
    browser_login(page, asgi_server.url, outsider_user.username)
    page.wait_for_selector("#no-role")
    assert "no role yet" in page.inner_text("h1")
    assert _nav_links(page) == []
    assert not page.is_visible("#live-status")
