"""The flush after each transactional test (transactional_db, django_db(transaction=True)),
made cheaper. Django's empties the database with one TRUNCATE of every table (about 80): on
PostgreSQL that costs each table new files, 1-3 s per test on a busy machine, most of such a
test's teardown. This one deletes the rows of the tables that hold any (a handful per test) in
one transaction, and leaves the content types and permissions post_migrate made (Django's
deletes and makes them again) unless the test changed them. What a test sees afterwards is the
same: every table empty but those two, which hold what post_migrate makes."""

from __future__ import annotations

from typing import Any

from django.core.management.sql import emit_post_migrate_signal
from django.db import connections, transaction
from django.test.testcases import TransactionTestCase

# What post_migrate makes. Kept when a test left them as they were (rows counted), so the
# signal (a few queries per app) only runs when a test added or removed some.
MADE_BY_POST_MIGRATE = ("django_content_type", "auth_permission")
_made: dict[str, tuple[int, ...]] = {}


def _counts(cursor: Any, quote: Any) -> tuple[int, ...]:
    cursor.execute(" UNION ALL ".join(f"SELECT count(*) FROM {quote(table)}" for table in MADE_BY_POST_MIGRATE))
    return tuple(row[0] for row in cursor.fetchall())


def flush_tables_with_rows(database: str) -> list[str]:
    """Empties the tables of `database` that hold rows, as Django's flush does; returns the
    names of the tables it emptied."""
    connection = connections[database]
    tables = sorted(connection.introspection.django_table_names(only_existing=True, include_views=False))
    if not tables:
        return []
    quote = connection.ops.quote_name
    with transaction.atomic(using=database), connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(
            f"SELECT %s WHERE EXISTS (SELECT 1 FROM {quote(table)})" for table in tables), tables)
        holding = [row[0] for row in cursor.fetchall()]
        remake = _made.get(database) != _counts(cursor, quote)
        emptied = [table for table in holding if remake or table not in MADE_BY_POST_MIGRATE]
        # The foreign keys Django makes are deferred: checked at commit, when every row is gone.
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        for table in emptied:
            cursor.execute(f"DELETE FROM {quote(table)}")
    if remake:
        emit_post_migrate_signal(verbosity=0, interactive=False, db=database)
        with connection.cursor() as cursor:
            _made[database] = _counts(cursor, quote)
    return emptied


_django_fixture_teardown = TransactionTestCase._fixture_teardown


def _fixture_teardown(self: Any) -> None:
    if self.available_apps is not None or self.serialized_rollback or self.reset_sequences:
        _django_fixture_teardown(self)  # the cases this shortcut does not cover: Django's own
        return
    for database in self._databases_names(include_mirrors=False):
        flush_tables_with_rows(database)


def install() -> None:
    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[method-assign]
