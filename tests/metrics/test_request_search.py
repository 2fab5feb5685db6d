"""The request log's search (request id, prompt words of keys that store prompts) and its CSV
export: streamed from a server-side cursor, filtered like the page, formula cells escaped."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from core.responses import csv_safe_cell
from gateway.models import ApiKey, RequestLog

pytestmark = pytest.mark.django_db


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
