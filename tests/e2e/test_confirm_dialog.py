"""Browser: every destructive or costly action asks in the portal's one dialog — what will
happen, the action named on its button — and a dismissed dialog (Escape, Cancel) changes
nothing while a confirmed one acts. On the users page with the keyboard only, and on the
prototypes page at a phone's width (390 px), where the dialog fits."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from routing.models import Prototype
from tests.conftest import browser_login, make_user, wait_for
from tests.e2e.confirm import answer

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_deactivating_a_user_asks_and_a_dismissed_dialog_keeps_them(asgi_server: Any, page: Any, admin_user: Any) -> None:
    make_user("dana", None)
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/users/")
    button = page.locator("[data-deactivate=dana]")
    button.click()
    asked = answer(page, "escape")
    assert asked.startswith("Deactivate dana?") and "signed out" in asked
    button.click()
    answer(page, "cancel")
    assert User.objects.get(username="dana").is_active  # twice dismissed: nothing sent
    # Focus back where it was (once the dialog's closing transition has ended).
    page.wait_for_function("document.activeElement && document.activeElement.dataset.deactivate === 'dana'")
    # without a mouse: Enter opens it, focus starts on Cancel, Tab reaches the action
    page.keyboard.press("Enter")
    page.wait_for_selector("#confirm-dialog.show")
    page.wait_for_function("document.activeElement.id === 'confirm-dialog-cancel'")
    assert page.inner_text("#confirm-dialog-ok") == "Deactivate"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "confirm-dialog-ok"
    page.keyboard.press("Enter")
    wait_for(lambda: not User.objects.get(username="dana").is_active, timeout=30, what="the deactivation")


def test_deleting_a_prototype_on_a_phone_asks_first(asgi_server: Any, page: Any, lead_user: Any) -> None:
    keep = Prototype.objects.create(text="Summarise this diff in one line.", label="code_review")
    page.set_viewport_size({"width": 390, "height": 844})
    browser_login(page, asgi_server.url, lead_user.username)
    page.goto(f"{asgi_server.url}/routing/")
    delete = page.locator("#prototypes button:has-text('Delete')")
    delete.click()
    page.wait_for_selector("#confirm-dialog.show")
    assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    box = page.locator("#confirm-dialog .modal-content").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
    asked = answer(page, "cancel")
    assert asked.startswith("Delete this code_review prototype?") and "published versions keep their copy" in asked
    assert Prototype.objects.filter(pk=keep.pk).exists()
    delete.click()
    assert page.inner_text("#confirm-dialog-ok") == "Delete"
    answer(page, "confirm")
    page.wait_for_selector("#prototypes:has-text('No prototype matches.')")
    assert not Prototype.objects.filter(pk=keep.pk).exists()
