"""Answering the portal's confirmation dialog (templates/portal/_confirm_dialog.html) in a
browser test, as a person would: read it, then confirm, or dismiss it with Escape or Cancel."""

from __future__ import annotations

from typing import Any, Literal


def answer(page: Any, how: Literal["confirm", "escape", "cancel"]) -> str:
    """Wait for the dialog, answer it, wait for it to close; returns its title and text."""
    page.wait_for_selector("#confirm-dialog.show", state="visible")
    page.wait_for_function("document.activeElement && document.activeElement.id === 'confirm-dialog-cancel'")
    asked = page.inner_text("#confirm-dialog-title") + " " + page.inner_text("#confirm-dialog-text")
    if how == "confirm":
        page.click("#confirm-dialog-ok")
    elif how == "cancel":
        page.click("#confirm-dialog-cancel")
    else:
        page.keyboard.press("Escape")
    page.wait_for_selector("#confirm-dialog", state="hidden")
    return asked
