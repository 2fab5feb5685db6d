"""One Chromium for a run of browser tests: consecutive tests of a module that ask for
`browser` share one Playwright and one Chromium (launching them is most of a short browser
test's setup); each test still gets its own contexts, closed after it. Playwright's sync API
keeps an event loop running in this thread while it is active, which would break the async
tests that follow and makes Django take the tests' own (synchronous, safe) ORM calls for
async-unsafe ones: so it is stopped as soon as the next test is in another module or does not
ask for a browser, and the Django guard is lifted only while it runs."""

from __future__ import annotations

import os
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]
UNSAFE = "DJANGO_ALLOW_ASYNC_UNSAFE"


class SharedChromium:
    def __init__(self) -> None:
        self.manager: Any = None
        self.browser: Any = None
        self.module: Any = None
        self.saved_guard: str | None = None
        self.keep = False

    def get(self, module: Any) -> Any:
        if self.browser is not None and (self.module is not module or not self.browser.is_connected()):
            self.stop()
        if self.browser is None:
            from playwright.sync_api import sync_playwright

            self.saved_guard = os.environ.get(UNSAFE)
            os.environ[UNSAFE] = "true"
            self.manager = sync_playwright()
            playwright = self.manager.__enter__()
            self.browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            self.module = module
        return self.browser

    def close_contexts(self) -> None:
        """What a test opened (the `page` fixture's context, or its own) ends with it."""
        if self.browser is not None and self.browser.is_connected():
            for context in list(self.browser.contexts):
                context.close()

    def stop(self) -> None:
        if self.browser is None:
            return
        try:
            if self.browser.is_connected():
                self.browser.close()
        finally:
            self.manager.__exit__(None, None, None)
            self.browser = self.manager = self.module = None
            if self.saved_guard is None:
                os.environ.pop(UNSAFE, None)
            else:
                os.environ[UNSAFE] = self.saved_guard

    def before_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Decided as the test's teardown begins (pytest names the next test only here)."""
        self.keep = nextitem is not None and getattr(nextitem, "module", None) is getattr(item, "module", None) \
            and "browser" in getattr(nextitem, "fixturenames", ())

    def end_test(self) -> None:
        """The `browser` fixture's teardown: this test's contexts end; Chromium stays for the
        module's next test only if it asks for a browser too (before the database flush and
        the session's teardown, which must not find Playwright's sessions open)."""
        self.close_contexts()
        if not self.keep:
            self.stop()


SHARED = SharedChromium()
