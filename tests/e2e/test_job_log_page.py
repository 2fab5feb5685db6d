"""Browser: the job log offers "Load earlier lines" only when there is something earlier,
and searches the whole log, not only the lines on screen."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs.logsink import LogSink
from jobs.models import Job, JobLogLine
from tests.conftest import browser_login, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _write_lines(job_id: int, count: int) -> None:
    """As the runner does (save, then publish), from another thread: Playwright's loop runs in this one."""
    def run() -> None:
        try:
            sink = LogSink(job_id)
            for i in range(1, count + 1):
                sink.append("spark3", "stdout", f"probe line {i}")
            sink.flush()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def test_a_job_that_starts_empty_offers_no_earlier_lines(asgi_server: Any, page: Any, viewer_user: Any) -> None:
    job = Job.objects.create(kind="status", state="running", params={"nodes": ["spark3"]})
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("#live-status[data-state=open]")
    wait_for(lambda: page.evaluate("window.jobLog") is not None, what="the log script")
    page.wait_for_timeout(300)  # the socket has asked to resume from seq 0
    _write_lines(job.pk, 30)
    wait_for(lambda: page.evaluate("window.jobLog.lastSeq()") == 30, timeout=15, what="the live lines")
    page.wait_for_selector("#job-log div[data-seq='30']")
    assert page.locator("#job-log div[data-seq='1']").count() == 1
    assert not page.is_visible("#log-earlier")


def test_search_finds_lines_outside_the_window_on_screen(asgi_server: Any, page: Any, viewer_user: Any) -> None:
    job = Job.objects.create(kind="status", state="succeeded", params={"nodes": ["spark3"]}, last_seq=5000)
    now = timezone.now()
    JobLogLine.objects.bulk_create(
        JobLogLine(job=job, seq=i, created_at=now, node="spark3",
                   text=f"line {i}" + (" NCCL WARN NET/IB : Got async event" if i in (17, 4990) else ""))
        for i in range(1, 5001))
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("#job-log div[data-seq='5000']")
    assert page.locator("#job-log div[data-seq='17']").count() == 0  # not on screen
    assert page.is_visible("#log-earlier")
    page.fill("#log-search-q", "nccl warn")
    page.press("#log-search-q", "Enter")
    page.wait_for_selector("#log-matches:not([hidden])")
    assert page.inner_text("#log-matches-count") == "2 lines contain “nccl warn”"
    found = page.locator("#log-matches-lines div").all_inner_texts()
    assert [text.split(" ")[0] for text in found] == ["#17", "#4990"]
    assert page.locator("#log-matches-lines mark").first.inner_text() == "NCCL WARN"
    assert page.locator("#job-log div.match").count() == 1  # the line on screen is highlighted too
    page.click("#log-matches-close")
    assert not page.is_visible("#log-matches") and page.locator("#job-log div.match").count() == 0


def test_a_failed_login_keeps_the_user_name(asgi_server: Any, page: Any, viewer_user: Any) -> None:
    browser_login(page, asgi_server.url, viewer_user.username, password="wrong")
    page.wait_for_selector(".alert-danger")
    assert page.input_value("#id_username") == viewer_user.username
    assert page.evaluate("document.activeElement.id") == "id_password"
