"""PostgreSQL: the gateway's request log becomes a table partitioned by day on created_at
(1,800 rows a minute at seed 000's peak), so retention drops whole days. SQLite keeps the
plain table. Django's model is unchanged: its id still identifies a row."""

from django.db import migrations

from metrics.partitions import convert_to_partitioned, convert_to_plain


def forwards(apps, schema_editor):
    convert_to_partitioned(schema_editor, "routing_requestlog", column="created_at")


def backwards(apps, schema_editor):
    convert_to_plain(schema_editor, "routing_requestlog")


class Migration(migrations.Migration):

    dependencies = [
        ("metrics", "0002_usage_status_route_latency"),
        ("routing", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
