"""Request log retention without partitions (SQLite; metrics.storage.storage_maintain calls
it): a million old rows go in bounded batches, each its own short transaction, while the
gateway keeps writing."""

from __future__ import annotations

import threading
from datetime import timedelta

from django.db import connection, connections
from django.utils import timezone

from gateway.models import RequestLog
from gateway.services import request_log_purge

OLD_ROWS = 1_000_000


def insert_rows(count: int, age_days: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {RequestLog._meta.db_table}
                (created_at, request_id, endpoint, requested_model, lane, route_reason, route_label, stream,
                 status, error_code, latency_ms, prompt_text)
                SELECT now() - make_interval(days => %s), 'req-' || g, 'chat.completions', 'auto', 'qwen',
                       'router', '', false, 200, '', 1.0, ''
                FROM generate_series(1, %s) AS g""",
            [age_days, count],
        )


def test_the_purge_deletes_a_million_old_rows_in_short_batches_while_writes_go_on(transactional_db: None) -> None:
    insert_rows(OLD_ROWS, age_days=40)
    insert_rows(1000, age_days=1)
    stop = threading.Event()
    written: list[int] = []
    failures: list[BaseException] = []

    def gateway_writer() -> None:
        try:
            with connections["default"].cursor() as cursor:
                cursor.execute("SET lock_timeout = '2s'")  # a long lock would fail these inserts
            while not stop.is_set():
                RequestLog.objects.create(request_id="req-live", endpoint="chat.completions", status=200, latency_ms=1)
                written.append(1)
                stop.wait(0.01)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)
        finally:
            connections["default"].close()

    writer = threading.Thread(target=gateway_writer)
    writer.start()
    try:
        result = request_log_purge(batch_size=50_000)
    finally:
        stop.set()
        writer.join(30)
    assert failures == []
    assert result.finished and result.deleted == OLD_ROWS
    assert result.batches >= OLD_ROWS // 50_000  # bounded batches, each its own transaction
    assert RequestLog.objects.filter(created_at__lt=timezone.now() - timedelta(days=30)).count() == 0
    assert RequestLog.objects.count() == 1000 + len(written) and len(written) > 0


def test_the_purge_stops_at_its_time_budget_and_the_next_run_continues(transactional_db: None) -> None:
    insert_rows(5000, age_days=40)
    first = request_log_purge(batch_size=100, max_seconds=1e-9)
    assert not first.finished and first.deleted == 0
    second = request_log_purge()
    assert (second.deleted, second.batches, second.finished) == (5000, 1, True)


def test_the_retention_is_a_setting(transactional_db: None, settings: object) -> None:
    insert_rows(10, age_days=10)
    settings.GATEWAY_LOG_RETENTION_DAYS = 7  # type: ignore[attr-defined]
    assert request_log_purge().deleted == 10
