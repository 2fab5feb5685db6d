"""Browser: a team lead starts a version's evaluation; the page follows the worker's progress
over its socket (the stage, "k of n" embedded, the bar) and then shows the stored report and
its chart — all without a reload (the issue: the first evaluation blanked the page for
30-50 s). A viewer's page has no button and follows the same progress."""

from __future__ import annotations

import re
from typing import Any

import pytest

from routing import engine
from routing.models import RouterEvaluation, RouterVersion, TextEmbedding
from routing.services import router_version_create_draft, starter_load
from tests.conftest import browser_login
from tests.gateway.conftest import make_lane

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Every text the status line took, from the document's creation on (a reload would empty it).
STATUS_LOG = """
(() => {
  window.__statuses = [];
  new MutationObserver(() => {
    const el = document.getElementById("evaluation-status");
    const last = window.__statuses[window.__statuses.length - 1];
    if (el && el.textContent !== last) window.__statuses.push(el.textContent);
  }).observe(document, { subtree: true, childList: true, characterData: true });
})();
"""


def test_the_page_shows_progress_then_the_report_without_a_reload(
    asgi_server: Any, page: Any, lead_user: Any, admin_user: Any, evaluation_threads: Any,
) -> None:
    make_lane("qwen", 18001)
    make_lane("deepseek", 18002)
    starter_load(actor=admin_user)
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    evaluation_threads.gate.clear()  # the evaluation waits until the page follows it
    page.add_init_script(STATUS_LOG)
    browser_login(page, asgi_server.url, lead_user.username)
    page.goto(f"{asgi_server.url}/routing/versions/{draft.number}/evaluate")
    assert page.inner_text("#evaluation-status") == "Not evaluated yet."
    page.click("#evaluate-run")
    page.wait_for_selector("#live-status[data-state='open']")
    assert page.is_disabled("#evaluate-run")  # a second click starts nothing (and cannot be made)
    page.evaluate("window.__sameDocument = true")
    # As the first evaluation with a new encoder: nothing embedded yet, in the database or in
    # this process (a worker's memo starts empty too).
    TextEmbedding.objects.all().delete()
    engine._memo.clear()
    evaluation_threads.gate.set()
    page.wait_for_selector("#accuracy", timeout=120_000)
    assert page.evaluate("window.__sameDocument") is True  # no reload since the worker began
    assert float(page.inner_text("#accuracy")) >= 0.9
    assert page.evaluate("() => window.thresholdChart.data.datasets.length") >= 3
    statuses = page.evaluate("window.__statuses")
    counts = [tuple(map(int, m.groups())) for s in statuses if (m := re.search(r"embedding .*\((\d+) of (\d+)\)", s))]
    assert any(0 < done < total for done, total in counts), statuses  # seen between the first and last batch
    assert statuses[-1].endswith("done: showing its report.")
    assert not page.is_disabled("#evaluate-run")
    assert RouterEvaluation.objects.count() == 1
    # The report fits a phone: its tables scroll in their box, and the chart (Chart.js resizes its
    # canvas on a ResizeObserver callback, after the new viewport's first layout) follows the width.
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
