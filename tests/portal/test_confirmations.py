"""Every confirmation is the portal's one dialog (templates/portal/_confirm_dialog.html,
static/portal/confirm.js): no template or script calls the browser's confirm() any more
(the issue: 'confirmations mix the browser's confirm() and modals'). In a browser:
tests/e2e/test_confirm_dialog.py."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALL = re.compile(r"(?<![\w.])(?:window\.)?confirm\s*\(")


def test_no_template_or_static_file_calls_confirm():
    files = [path for folder in ("templates", "static") for path in (ROOT / folder).rglob("*")
             if path.is_file() and path.suffix in (".html", ".js", ".txt") and "vendor" not in path.parts]
    assert len(files) > 50
    calls = [f"{path.relative_to(ROOT)}:{number}" for path in files
             for number, line in enumerate(path.read_text().splitlines(), start=1) if CALL.search(line)]
    assert calls == []


def test_the_dialog_is_on_every_signed_in_page(admin_client):
    page = admin_client.get("/").content.decode()
    assert 'id="confirm-dialog"' in page and "portal/confirm.js" in page
