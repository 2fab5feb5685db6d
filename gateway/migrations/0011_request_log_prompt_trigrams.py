"""PostgreSQL: the request log's prompt search (gateway.selectors.request_log_filtered, each
word `icontains`, i.e. UPPER(prompt_text) LIKE UPPER('%word%')) reads a trigram index instead
of every stored prompt: pg_trgm's GIN index on UPPER(prompt_text), over the rows that have a
prompt only (keys that opted in to prompt storage; the others store ""). On the partitioned
request log the index is created on every day's partition, and on each new one. SQLite (the
embedded default) has neither: the extension and the index are skipped there, the search
reads the rows as before."""

from django.contrib.postgres.operations import TrigramExtension
from django.db import migrations

INDEX = "requestlog_prompt_trgm"


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {INDEX} ON routing_requestlog "
            "USING gin (UPPER(prompt_text) gin_trgm_ops) WHERE prompt_text <> ''"
        )


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ("gateway", "0010_team_fair_weight"),
    ]

    operations = [
        TrigramExtension(),
        migrations.RunPython(create_index, drop_index),
    ]
