"""Daily range partitions on PostgreSQL: created ahead by beat, dropped whole for retention
(a DROP of one day's table instead of a DELETE of millions of rows). SQLite keeps plain
tables; `partitioned()` says which path a connection takes."""

from __future__ import annotations

import logging
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import Model

SUFFIX = re.compile(r"_p(\d{8})$")
logger = logging.getLogger(__name__)


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
    with schema_editor.connection.cursor() as cursor:
        _create_default(cursor, model._meta.db_table)
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
                try:
                    with transaction.atomic():
                        _create_day(cursor, table, day)
                    created.append(partition_name(table, day))
                except DatabaseError as exc:
                    # The default partition already holds rows of that day: they stay there.
                    logger.warning("%s: no partition for %s (%s)", table, day, exc)
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


def drop_partitions_before(table: str, cutoff: date, *, column: str = "ts") -> list[str]:
    """Drop every partition whose whole day is before `cutoff`. Each DROP holds the parent's
    lock only for the catalog change (no rows are read). Old rows of the default partition
    (normally none) are deleted."""
    if not partitioned():
        return []
    dropped = []
    with connection.cursor() as cursor:
        for day, name in sorted(partition_days(table).items()):
            if day < cutoff:
                cursor.execute(f'DROP TABLE IF EXISTS "{name}"')
                dropped.append(name)
        cursor.execute("SELECT to_regclass(%s)", [f"{table}_default"])
        if cursor.fetchone()[0] is not None:
            cursor.execute(f'DELETE FROM "{table}_default" WHERE "{column}" < %s', [cutoff.isoformat()])
    return dropped


def _indexes_and_foreign_keys(cursor: Any, table: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname <> %s", [table, f"{table}_pkey"]
    )
    indexes = [(name, definition) for name, definition in cursor.fetchall()]
    cursor.execute(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
        [table],
    )
    return indexes, [(name, definition) for name, definition in cursor.fetchall()]


def convert_to_partitioned(schema_editor: BaseDatabaseSchemaEditor, table: str, *, column: str, days_ahead: int = 7) -> None:
    """Turn a plain table with an `id` primary key into one partitioned by day on `column`,
    keeping its rows, index and foreign-key names (later migrations may refer to them).
    The primary key becomes (id, column), as PostgreSQL requires; ids keep coming from a
    sequence (PostgreSQL 15 has no identity columns on partitioned tables). Runs inside the
    migration's transaction, holding the table's lock until it commits."""
    if not partitioned(schema_editor.connection):
        return
    old = f"{table}_unpartitioned"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f'LOCK TABLE "{table}" IN ACCESS EXCLUSIVE MODE')
        indexes, foreign_keys = _indexes_and_foreign_keys(cursor, table)
        cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{old}"')
        for name, _ in indexes:
            cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{name}_old"')
        for name, _ in foreign_keys:
            cursor.execute(f'ALTER TABLE "{old}" RENAME CONSTRAINT "{name}" TO "{name}_old"')
        cursor.execute(f'ALTER TABLE "{old}" RENAME CONSTRAINT "{table}_pkey" TO "{table}_pkey_old"')
        # Its identity sequence (same name) goes; the new table gets a plain one.
        cursor.execute(f'ALTER TABLE "{old}" ALTER COLUMN id DROP IDENTITY IF EXISTS')
        cursor.execute(
            f'CREATE TABLE "{table}" (LIKE "{old}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE ("{column}")'
        )
        cursor.execute(f'CREATE SEQUENCE IF NOT EXISTS "{table}_id_seq"')
        cursor.execute(f'ALTER SEQUENCE "{table}_id_seq" OWNED BY "{table}"."id"')
        cursor.execute(f"ALTER TABLE \"{table}\" ALTER COLUMN id SET DEFAULT nextval('\"{table}_id_seq\"')")
        cursor.execute(f"SELECT setval('\"{table}_id_seq\"', COALESCE((SELECT max(id) FROM \"{old}\"), 0) + 1, false)")
        cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{table}_pkey" PRIMARY KEY (id, "{column}")')
        for _name, definition in indexes:
            cursor.execute(definition.replace(f" ON public.{table} ", f' ON "{table}" ', 1))
        for name, definition in foreign_keys:
            cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}')
        _create_default(cursor, table)
        cursor.execute(f'SELECT min("{column}") FROM "{old}"')
        oldest = cursor.fetchone()[0]
        today = datetime.now(UTC).date()
        day = oldest.date() if oldest else today
        while day <= today + timedelta(days=days_ahead):
            _create_day(cursor, table, day)
            day += timedelta(days=1)
        cursor.execute(f'INSERT INTO "{table}" SELECT * FROM "{old}"')
        cursor.execute(f'DROP TABLE "{old}"')


def convert_to_plain(schema_editor: BaseDatabaseSchemaEditor, table: str) -> None:
    """The reverse: one plain table again, with an `id` primary key and the same indexes."""
    if not partitioned(schema_editor.connection):
        return
    old = f"{table}_partitioned"
    with schema_editor.connection.cursor() as cursor:
        indexes, foreign_keys = _indexes_and_foreign_keys(cursor, table)
        cursor.execute(f'ALTER TABLE "{table}" RENAME TO "{old}"')
        for name, _ in indexes:
            cursor.execute(f'ALTER INDEX "{name}" RENAME TO "{name}_old"')
        for name, _ in foreign_keys:
            cursor.execute(f'ALTER TABLE "{old}" RENAME CONSTRAINT "{name}" TO "{name}_old"')
        cursor.execute(f'ALTER TABLE "{old}" RENAME CONSTRAINT "{table}_pkey" TO "{table}_pkey_old"')
        cursor.execute(f'CREATE TABLE "{table}" (LIKE "{old}" INCLUDING DEFAULTS INCLUDING CONSTRAINTS)')
        cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{table}_pkey" PRIMARY KEY (id)')
        cursor.execute(f'ALTER SEQUENCE "{table}_id_seq" OWNED BY "{table}"."id"')
        for _name, definition in indexes:
            cursor.execute(definition.replace(f" ON ONLY public.{table} ", f' ON "{table}" ', 1)
                           .replace(f" ON public.{table} ", f' ON "{table}" ', 1))
        for name, definition in foreign_keys:
            cursor.execute(f'ALTER TABLE "{table}" ADD CONSTRAINT "{name}" {definition}')
        cursor.execute(f'INSERT INTO "{table}" SELECT * FROM "{old}"')
        cursor.execute(f'DROP TABLE "{old}" CASCADE')


def _create_default(cursor: Any, table: str) -> None:
    """Rows outside every day partition (a backfill, a skewed clock) land here instead of
    failing the insert; retention deletes its old rows."""
    cursor.execute(f'CREATE TABLE IF NOT EXISTS "{table}_default" PARTITION OF "{table}" DEFAULT')


def _create_day(cursor: Any, table: str, day: date) -> None:
    cursor.execute(
        f'CREATE TABLE IF NOT EXISTS "{partition_name(table, day)}" PARTITION OF "{table}" '
        f"FOR VALUES FROM ('{day.isoformat()}T00:00:00+00:00') TO ('{(day + timedelta(days=1)).isoformat()}T00:00:00+00:00')"
    )
