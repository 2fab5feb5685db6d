"""Browser: the job log follows its socket live (after replaying what the page missed),
offers "Load earlier lines" only when there is something earlier, and searches the whole
log, not only the lines on screen."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from jobs.logsink import LogSink
from jobs.models import Job, JobLogLine
from tests.conftest import browser_login, wait_for
from tests.e2e.sockets import socket_recorder, sockets

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _write_lines(job_id: int, first: int, last: int) -> None:
    """As the runner does (save, then publish), from another thread: Playwright's loop runs in this one."""
    def run() -> None:
        try:
            sink = LogSink(job_id, start_seq=first - 1)
            for i in range(first, last + 1):
                sink.append("spark3", "stdout", f"probe line {i}")
            sink.flush()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()


def _log_messages(page: Any, job_id: int) -> list[tuple[str, bool, list[int]]]:
    """(event, replayed, seqs) of each message the job's sockets received (none before one opens),
    the job's current state sent after each resume aside (a snapshot: tests/portal/test_dashboard_socket.py)."""
    return [(m["event"], bool(m["data"].get("replay")), [line[0] for line in m["data"].get("lines", [])])
            for socket in sockets(page, f"/ws/jobs/{job_id}/") for m in socket["messages"] if not m.get("snapshot")]


def _shown_seqs(page: Any) -> list[int]:
    return [int(seq) for seq in page.eval_on_selector_all("#job-log div[data-seq]", "els => els.map(e => e.dataset.seq)")]


def test_lines_written_while_the_page_is_open_arrive_live_after_the_replay(
    asgi_server: Any, page: Any, viewer_user: Any
) -> None:
    """Lines 1-5 come with the page (the API), 6-10 are written while its socket waits to
    resume (the server replays them), 11-40 after it resumed: they arrive as live batches on
    the same socket, without a reload, each line once."""
    job = Job.objects.create(kind="status", state="running", params={"nodes": ["spark3"]})
    _write_lines(job.pk, 1, 5)
    page.add_init_script(socket_recorder(record="/ws/jobs/", hold="/ws/jobs/"))
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    page.wait_for_selector("#live-status[data-state=open]")
    page.evaluate("window.__notReloaded = true")
    wait_for(lambda: [s["held"] for s in sockets(page, f"/ws/jobs/{job.pk}/")] == [1], what="the page's resume, held")
    assert _shown_seqs(page) == [1, 2, 3, 4, 5]

    _write_lines(job.pk, 6, 10)  # published while the socket has not resumed: not forwarded
    page.evaluate("window.__releaseSends()")
    wait_for(lambda: ("job.resumed", False, []) in _log_messages(page, job.pk), what="the server's resume")
    assert _log_messages(page, job.pk) == [("job.log", True, [6, 7, 8, 9, 10]), ("job.resumed", False, [])]

    _write_lines(job.pk, 11, 25)
    _write_lines(job.pk, 26, 40)
    page.wait_for_selector("#job-log div[data-seq='40']")
    live = [seqs for event, replayed, seqs in _log_messages(page, job.pk)[2:] if event == "job.log" and not replayed]
    assert [seq for seqs in live for seq in seqs] == list(range(11, 41))
    assert all(replayed is False for _, replayed, _ in _log_messages(page, job.pk)[2:])
    assert _shown_seqs(page) == list(range(1, 41))
    assert page.evaluate("window.jobLog.lastSeq()") == 40
    assert page.evaluate("window.__notReloaded") is True
    assert len(sockets(page, f"/ws/jobs/{job.pk}/")) == 1  # the same socket all along


def test_a_job_that_starts_empty_offers_no_earlier_lines(asgi_server: Any, page: Any, viewer_user: Any) -> None:
    job = Job.objects.create(kind="status", state="running", params={"nodes": ["spark3"]})
    page.add_init_script(socket_recorder(record="/ws/jobs/"))
    browser_login(page, asgi_server.url, viewer_user.username)
    page.goto(f"{asgi_server.url}/jobs/{job.pk}/")
    # The server has taken the page's resume (from seq 0): every line from now on is live.
    wait_for(lambda: _log_messages(page, job.pk) == [("job.resumed", False, [])], what="the server's resume")
    assert _shown_seqs(page) == []
    _write_lines(job.pk, 1, 30)
    wait_for(lambda: page.evaluate("window.jobLog.lastSeq()") == 30, timeout=30, what="the live lines")
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
    # autofocus applies at the page's first rendering, which a loaded machine may not have reached yet
    page.wait_for_function("document.activeElement && document.activeElement.id === 'id_password'", timeout=10_000)
