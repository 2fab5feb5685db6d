"""Browser: the job log's filter box narrows the tail on screen while the log keeps following
a job that keeps writing (text or regex, "n of m lines match", matches highlighted); a regex
that could freeze the page is refused with a message; clearing the box shows every line,
those that arrived while it was filtered included."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from jobs.logsink import LogSink
from jobs.models import Job
from tests.conftest import browser_login, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


class Writer:
    """A job that keeps writing: "alpha N" and "beta N" lines in turn, a batch every 50 ms,
    from another thread (Playwright's loop runs in this one), until stopped."""

    def __init__(self, job_id: int) -> None:
        self.job_id, self.written, self.stop = job_id, 0, threading.Event()
        self.extra: list[str] = []  # lines to write once, with the next batch
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            sink = LogSink(self.job_id, start_seq=0)
            while not self.stop.is_set():
                for _ in range(2):
                    self.written += 1
                    sink.append("spark3", "stdout", f"{'alpha' if self.written % 2 else 'beta'} {self.written}")
                while self.extra:
                    self.written += 1
                    sink.append("spark3", "stdout", self.extra.pop())
                sink.flush()
                self.stop.wait(0.05)  # the writer's pace; ends at once on stop
        finally:
            connection.close()


@pytest.fixture
def writer() -> Iterator[Any]:
    writers: list[Writer] = []

    def start(job_id: int) -> Writer:
        w = Writer(job_id)
        writers.append(w)
        w.thread.start()
        return w

    yield start
    for w in writers:
        w.stop.set()
        w.thread.join(timeout=10)


def _rows(page: Any) -> list[dict[str, Any]]:
    return page.eval_on_selector_all(
        "#job-log div[data-seq]",
        "els => els.map(e => ({seq: Number(e.dataset.seq), text: e.textContent, shown: e.offsetParent !== null,"
        " marks: Array.from(e.querySelectorAll('mark')).map(m => m.textContent)}))",
    )


def _last_seq(page: Any) -> int:
    return int(page.evaluate("window.jobLog.lastSeq()"))


def test_the_filter_narrows_the_tail_without_stopping_the_follow(
    asgi_server: Any, page: Any, viewer_user: Any, writer: Any
) -> None:
    job = Job.objects.create(kind="status", state="running", params={"nodes": ["spark3"]})
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("#live-status[data-state=open]")
    page.evaluate("window.__notReloaded = true")
    log = writer(job.pk)
    wait_for(lambda: _last_seq(page) >= 20, what="the first lines")

    page.fill("#log-filter", "BETA")  # text: case-insensitive
    filtered_from = _last_seq(page)
    wait_for(lambda: _last_seq(page) >= filtered_from + 20, what="lines that arrive while filtered")
    rows = _rows(page)
    shown = [r for r in rows if r["shown"]]
    assert shown and all("beta" in r["text"] for r in shown)
    assert all(r["marks"] == ["beta"] for r in shown)
    assert not any(r["shown"] for r in rows if "alpha" in r["text"])
    assert any(r["seq"] > filtered_from for r in shown)  # new lines are filtered as they come
    wait_for(lambda: page.text_content("#log-filter-count").endswith("lines match"), what="the count")
    hits, total = _counted(page)
    assert 0 < hits < total

    _regex_cases(page, log)
    page.uncheck("#log-filter-regex")

    page.fill("#log-filter", "beta")
    wait_for(lambda: not any(r["shown"] for r in _rows(page) if "alpha" in r["text"]), what="the filter again")
    during = _last_seq(page)
    wait_for(lambda: _last_seq(page) >= during + 10, what="more lines while filtered")
    page.fill("#log-filter", "")
    rows = _rows(page)
    assert all(r["shown"] and not r["marks"] for r in rows)  # every line, those that came meanwhile too
    assert [r["seq"] for r in rows] == list(range(rows[0]["seq"], rows[-1]["seq"] + 1))
    assert rows[-1]["seq"] >= during + 10
    assert page.text_content("#log-filter-count") == ""
    assert page.is_checked("#log-follow")  # the follow never stopped
    wait_for(lambda: _last_seq(page) >= rows[-1]["seq"] + 4, what="the follow after clearing")
    assert page.evaluate("window.__notReloaded") is True


def _counted(page: Any) -> tuple[int, int]:
    """The count the page states ("12 of 40 lines match") and the lines it shows, read at once."""
    text, shown, total = page.evaluate(
        "() => [document.getElementById('log-filter-count').textContent,"
        " Array.from(document.querySelectorAll('#job-log div[data-seq]')).filter(e => e.offsetParent !== null).length,"
        " document.querySelectorAll('#job-log div[data-seq]').length]")
    hits, _, stated_total = text.split()[:3]
    assert (int(hits.replace(",", "")), int(stated_total.replace(",", ""))) == (shown, total)
    return shown, total


def _regex_cases(page: Any, log: Writer) -> None:
    """A regex filters and marks; one that could freeze the page is refused by its shape, or
    (adjacent open repeats on a long line) ended by the worker's budget."""
    page.check("#log-filter-regex")
    page.fill("#log-filter", r"^\[spark3\] beta \d*0$")  # beta lines whose number ends in 0
    wait_for(lambda: any(r["shown"] for r in _rows(page)), what="a regex match")
    shown = [r for r in _rows(page) if r["shown"]]
    assert all(r["text"].startswith("[spark3] beta ") and r["text"].endswith("0") for r in shown)
    assert all(r["marks"] == [r["text"]] for r in shown)

    page.fill("#log-filter", "(a+)+$")
    wait_for(lambda: "repeats a group" in page.text_content("#log-filter-count"), what="the refusal")
    assert all(r["shown"] for r in _rows(page))  # refused: nothing hidden, nothing frozen
    assert page.get_attribute("#log-filter", "aria-invalid") == "true"
    page.fill("#log-filter", "beta (")
    wait_for(lambda: "Not a valid regex" in page.text_content("#log-filter-count"), what="the syntax error")

    # Adjacent open repeats pass the shape check but backtrack for ever on a long line: the
    # worker running the regex is ended after its budget, the page never stops.
    log.extra.append("a" * 5000)
    wait_for(lambda: any(len(r["text"]) > 5000 for r in _rows(page)), what="the long line")
    page.fill("#log-filter", "a*a*a*a*a*a*a*a*a*b")
    wait_for(lambda: "took over 3 s" in page.text_content("#log-filter-count"), what="the budget's end")
    stalled_at = _last_seq(page)
    wait_for(lambda: _last_seq(page) >= stalled_at + 4, what="the follow, going on")
    assert all(r["shown"] for r in _rows(page))  # switched off: every line shown
