"""The request log's search (request id, prompt words of keys that store prompts) and its CSV
export: streamed from a server-side cursor, filtered like the page, formula cells escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.responses import csv_safe_cell
from gateway.models import ApiKey, RequestLog
from gateway.selectors import LogFilters, request_log_list

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def logged(db: None) -> dict[str, ApiKey]:
    opted = ApiKey.objects.create(name="opted", prefix="sk-spark-o1", secret_hash="o" * 64, log_prompts=True)
    quiet = ApiKey.objects.create(name="quiet", prefix="sk-spark-q1", secret_hash="q" * 64, log_prompts=False)
    now = timezone.now()
    rows = [("req-aaa1", opted, "Refactor the billing module please"), ("req-aaa2", opted, "Write a haiku"),
            # Stored before the key opted out: not searched any more.
            ("req-bbb1", quiet, "Refactor the billing module secretly")]
    for i, (request_id, key, text) in enumerate(rows):
        RequestLog.objects.create(created_at=now - timedelta(seconds=i), request_id=request_id, key=key,
                                  endpoint="chat.completions", lane="qwen", status=200, latency_ms=10.0,
                                  prompt_text=text)
    return {"opted": opted, "quiet": quiet}


def ids(answer) -> list[str]:
    return [row["request_id"] for row in answer.json()]


def test_search_by_request_id_and_by_prompt_words_of_opted_in_keys_only(admin_client: Client, logged) -> None:
    assert ids(admin_client.get("/api/gateway/requests?request_id=req-aaa2")) == ["req-aaa2"]
    assert ids(admin_client.get("/api/gateway/requests?text=BILLING refactor")) == ["req-aaa1"]
    assert ids(admin_client.get("/api/gateway/requests?text=secretly")) == []  # the key did not opt in
    page = admin_client.get("/monitor/requests/?text=billing").content.decode()
    assert "req-aaa1" in page and "req-bbb1" not in page and "req-aaa2" not in page
    page = admin_client.get("/monitor/requests/?request_id=req-bbb1").content.decode()
    assert "req-bbb1" in page and "req-aaa1" not in page


@pytest.mark.parametrize(("query", "field"), [("request_id=req%20one", "request_id"), ("request_id=" + "a" * 41, "request_id"),
                                              ("text=x", "text"), ("text=%20x%20%20", "text"), ("text=" + "a" * 201, "text"), ("status=teapot", "status")])
def test_bad_search_values_are_refused_naming_the_field(admin_client: Client, logged, query: str, field: str) -> None:
    page = admin_client.get(f"/monitor/requests/?{query}")
    assert page.status_code == 400 and f"{field}:" in page.content.decode()
    csv = admin_client.get(f"/monitor/requests.csv?{query}")
    assert csv.status_code == 400
    answer = admin_client.get(f"/api/gateway/requests?{query}")
    assert answer.status_code in (400, 422) and field in json.dumps(answer.json()["detail"])


def test_the_request_log_export_is_for_admins(role_clients: dict[str, Client], logged) -> None:
    assert role_clients["admin"].get("/monitor/requests.csv").status_code == 200
    for who in ("lead", "viewer", "outsider"):
        assert role_clients[who].get("/monitor/requests.csv").status_code == 403
    assert role_clients["anonymous"].get("/monitor/requests.csv").status_code == 302


def test_the_export_is_filtered_like_the_page_and_escapes_formula_cells(admin_client: Client, logged) -> None:
    RequestLog.objects.create(request_id="req-evil", key=logged["opted"], endpoint="chat.completions",
                              lane="qwen", status=200, latency_ms=1.0, prompt_text='=HYPERLINK("http://x","y")')
    response = admin_client.get(f"/monitor/requests.csv?key={logged['opted'].pk}")
    assert response.streaming and response["Content-Disposition"] == 'attachment; filename="requests.csv"'
    text = b"".join(response.streaming_content).decode()
    lines = text.splitlines()
    assert lines[0].startswith("created_at,request_id,key,")
    assert [line.split(",")[1] for line in lines[1:]] == ["req-evil", "req-aaa2", "req-aaa1"]  # newest first
    assert lines[1].endswith(',"\'=HYPERLINK(""http://x"",""y"")"')
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert csv_safe_cell(start + "1") == "'" + start + "1"
    assert csv_safe_cell(-5) == -5 and csv_safe_cell("a=b") == "a=b"


def test_the_export_streams_rows_from_a_server_side_cursor(admin_client: Client, logged) -> None:
    """Rows arrive while the query is still open (a named cursor on PostgreSQL): the export is
    never built in memory, whatever its size."""
    key = logged["opted"]
    now = timezone.now()
    RequestLog.objects.bulk_create(
        RequestLog(created_at=now - timedelta(minutes=1, seconds=i), request_id=f"req-bulk{i}", key=key,
                   endpoint="chat.completions", lane="qwen", status=200, latency_ms=5.0) for i in range(5000))
    response = admin_client.get("/monitor/requests.csv")
    chunks = iter(response.streaming_content)
    assert next(chunks).startswith(b"created_at,")
    assert next(chunks).startswith(b"20")  # the first row
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_cursors")
        assert cursor.fetchone()[0] >= 1  # the export's cursor is open: rows still to come
    rest = list(chunks)
    assert len(rest) == 5003 - 2 + 1  # 5,003 rows and the header, in one chunk a line
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_cursors")
        assert cursor.fetchone()[0] == 0


def test_the_prompt_search_reads_the_trigram_index_not_every_stored_prompt(logged) -> None:
    """PostgreSQL: each word is looked up in the GIN trigram index on the stored prompts
    (gateway migration 0011) — the query's form must match the index's expression and
    predicate, or the search reads every prompt again."""
    now = timezone.now()
    RequestLog.objects.bulk_create(
        RequestLog(created_at=now - timedelta(minutes=1, seconds=i), request_id=f"req-many{i}", key=logged["opted"],
                   endpoint="chat.completions", lane="qwen", status=200, latency_ms=5.0,
                   prompt_text=f"explain module {i % 50} and its tests, case {i}") for i in range(3000))
    RequestLog.objects.create(request_id="req-k8s", key=logged["opted"], endpoint="chat.completions", lane="qwen",
                              status=200, latency_ms=5.0, prompt_text="Deploy it on Kubernetes")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE routing_requestlog")
        cursor.execute("SELECT indexname FROM pg_indexes WHERE indexdef LIKE '%%gin_trgm_ops%%'")
        trigram_indexes = {name for (name,) in cursor.fetchall()}
    assert "requestlog_prompt_trgm" in trigram_indexes and len(trigram_indexes) > 1  # the parent's and each day's
    search = request_log_list(filters=LogFilters(text="kubernetes DEPLOY"), limit=51)
    assert [row.request_id for row in search] == ["req-k8s"]
    with transaction.atomic(), connection.cursor() as cursor:
        # A test's few thousand rows are cheaper read whole or through the key's index: plan
        # with neither (the key's indexes dropped, rolled back), so the trigram index is used if the query's form allows.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_indexscan = off")
        cursor.execute("SELECT string_agg(indexname, ', ') FROM pg_indexes WHERE tablename = 'routing_requestlog'"
                       " AND indexdef LIKE '%%(key_id%%'")
        cursor.execute(f"DROP INDEX {cursor.fetchone()[0]}")
        plan = search.explain()
        transaction.set_rollback(True)
    assert any(f"Bitmap Index Scan on {name}" in plan for name in trigram_indexes), plan


def test_the_prompt_search_and_the_6_hour_rollup_work_on_sqlite(tmp_path: Path) -> None:
    """The embedded default: the migrations (the trigram extension and index are PostgreSQL's
    only) and the queries that differ by database — the prompt search and the 6-hour tier's
    grouping — on a fresh SQLite database, in a process of its own."""
    env = {name: value for name, value in os.environ.items() if name not in {"DATABASE_URL", "PYTEST_XDIST_WORKER"}}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'portal.sqlite3'}", PORTAL_VAR_DIR=str(tmp_path))
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=600)
    script = """
from datetime import UTC, datetime, timedelta
from gateway.models import ApiKey, RequestLog
from gateway.selectors import LogFilters, request_log_list
from metrics.models import UsageSixHours
from metrics.storage import usage_rollup
from metrics.usage import UsageQuery, usage_series
key = ApiKey.objects.create(name="opted", prefix="sk-spark-o1", secret_hash="o" * 64, log_prompts=True)
now = datetime(2026, 3, 4, 12, 30, tzinfo=UTC)
for i, text in enumerate(("Refactor the billing module", "Write a haiku", "")):
    RequestLog.objects.create(created_at=now - timedelta(hours=4 * i + 1), request_id=f"req-{i}", key=key,
                              endpoint="chat.completions", lane="qwen", status=200, latency_ms=10.0, prompt_text=text)
usage_rollup(now=now, hours_back=12)
print([row.request_id for row in request_log_list(filters=LogFilters(text="BILLING refactor"))])
print(sorted((row.start.hour, row.requests) for row in UsageSixHours.objects.all()))
print(usage_series(UsageQuery(bucket="6h", by="key", days=1), now=now)["series"][0]["requests"])
"""
    done = subprocess.run([sys.executable, "manage.py", "shell", "-v0", "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["['req-0']", "[(0, 1), (6, 2)]", "[0, 1, 2, 0]"], done.stdout


def test_a_prompt_search_page_from_the_newest_day_is_the_whole_logs_page(logged) -> None:
    """Two days of matching prompts, written in order as the log writer does: the first page
    and the next (keyset) are read from one day's rows and are exactly the pages of the whole
    log; a word the last day lacks falls back to the whole log."""
    now = timezone.now()
    RequestLog.objects.bulk_create(
        RequestLog(created_at=now - timedelta(hours=48) + timedelta(minutes=20 * i), request_id=f"req-day{i}",
                   key=logged["opted"], endpoint="chat.completions", lane="qwen", status=200, latency_ms=5.0,
                   prompt_text=f"billing {'old' if i < 72 else 'new'} case {i}") for i in range(144))

    def whole_log(text: str, before: int | None = None) -> list[str]:
        rows = RequestLog.objects.filter(key=logged["opted"], prompt_text__icontains=text).order_by("-id")
        return list((rows if before is None else rows.filter(id__lt=before)).values_list("request_id", flat=True)[:51])

    def searched(text: str, before: int | None = None) -> tuple[list[RequestLog], str]:
        with CaptureQueriesContext(connection) as queries:
            rows = list(request_log_list(filters=LogFilters(text=text), limit=51, before_id=before))
        return rows, queries.captured_queries[-1]["sql"]

    first, sql = searched("BILLING")
    assert [row.request_id for row in first] == whole_log("billing") and len(first) == 51
    assert '"created_at" >=' in sql  # the newest day's rows only
    second, sql = searched("billing", before=first[-1].pk)
    assert [row.request_id for row in second] == whole_log("billing", first[-1].pk)
    assert '"created_at" >=' in sql
    old, sql = searched("old")  # none in the last day: the whole log
    assert [row.request_id for row in old] == whole_log("old") and len(old) == 51
    assert '"created_at" >=' not in sql
