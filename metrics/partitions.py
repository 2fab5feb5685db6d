"""Daily range partitions on PostgreSQL: created ahead by beat, dropped whole for retention
(a DROP of one day's table instead of a DELETE of millions of rows). SQLite keeps plain
tables; `partitioned()` says which path a connection takes."""

from __future__ import annotations

import re
from datetime import date, timedelta

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Model

SUFFIX = re.compile(r"_p(\d{8})$")


def partitioned(conn: BaseDatabaseWrapper | None = None) -> bool:
    return (conn or connection).vendor == "postgresql"


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def create_partitioned_table(schema_editor: BaseDatabaseSchemaEditor, model: type[Model], *, column: str = "ts") -> None:
    """The model's own CREATE TABLE (its primary key includes the partition column, as
    PostgreSQL requires), partitioned by range of `column`; elsewhere a plain table."""
    if not partitioned(schema_editor.connection):
        schema_editor.create_model(model)
        return
    sql, params = schema_editor.table_sql(model)
    quoted = schema_editor.quote_name(column)
    schema_editor.execute(f"{sql} PARTITION BY RANGE ({quoted})", params or None)
    for statement in schema_editor.deferred_sql:
        schema_editor.execute(statement)
    schema_editor.deferred_sql.clear()


def ensure_partitions(table: str, *, first: date, last: date) -> list[str]:
    """Create the daily partitions from `first` to `last` (inclusive) that are missing."""
    if not partitioned():
        return []
    existing = set(partition_days(table))
    created = []
    with connection.cursor() as cursor:
        day = first
        while day <= last:
            if day not in existing:
                name = partition_name(table, day)
                cursor.execute(
                    f'CREATE TABLE IF NOT EXISTS "{name}" PARTITION OF "{table}" '
                    f"FOR VALUES FROM ('{day.isoformat()}T00:00:00+00:00') TO ('{(day + timedelta(days=1)).isoformat()}T00:00:00+00:00')"
                )
                created.append(name)
            day += timedelta(days=1)
    return created


def partition_days(table: str) -> dict[date, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s",
            [table],
        )
        names = [row[0] for row in cursor.fetchall()]
    days = {}
    for name in names:
        match = SUFFIX.search(name)
        if match:
            raw = match.group(1)
            days[date(int(raw[:4]), int(raw[4:6]), int(raw[6:]))] = name
    return days


def drop_partitions_before(table: str, cutoff: date) -> list[str]:
    """Drop every partition whose whole day is before `cutoff`. Each DROP holds the parent's
    lock only for the catalog change (no rows are read)."""
    if not partitioned():
        return []
    dropped = []
    with connection.cursor() as cursor:
        for day, name in sorted(partition_days(table).items()):
            if day < cutoff:
                cursor.execute(f'DROP TABLE IF EXISTS "{name}"')
                dropped.append(name)
    return dropped
