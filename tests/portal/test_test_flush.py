"""The suite's flush between transactional tests (tests/dbflush.py) leaves what Django's flush
leaves: every table empty, content types and permissions made again."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.utils import timezone

from jobs.models import Job, JobKind, JobLogLine
from lanes.models import Lane, LaneNode, Node
from tests.dbflush import flush_tables_with_rows

AFTER_FLUSH = {"django_content_type", "auth_permission"}


def tables_with_rows() -> set[str]:
    tables = connection.introspection.django_table_names(only_existing=True, include_views=False)
    with connection.cursor() as cursor:
        holding = set()
        for table in tables:
            cursor.execute(f"SELECT EXISTS (SELECT 1 FROM {connection.ops.quote_name(table)})")
            if cursor.fetchone()[0]:
                holding.add(table)
    return holding


@pytest.mark.django_db(transaction=True)
def test_the_flush_empties_every_table_that_held_rows_and_remakes_content_types(admin_user: User) -> None:
    node = Node.objects.create(name="spark1", address="127.0.0.11", transport="local")
    lane = Lane.objects.create(name="qwen", model_id="Qwen/Qwen3.8-27B-FP8", image="img@sha256:" + "a" * 64,
                               max_model_len=32768)
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    job = Job.objects.create(kind=JobKind.STATUS, lane=lane, created_by=admin_user, params={})
    JobLogLine.objects.create(job=job, seq=1, text="hello", created_at=timezone.now())
    before = tables_with_rows()
    assert {"auth_user", "lanes_lane", "lanes_lanenode", "jobs_job", "jobs_joblogline"} <= before

    emptied = set(flush_tables_with_rows("default"))

    assert before - AFTER_FLUSH <= emptied  # rows referencing rows (job -> lane -> node) went in one go
    assert tables_with_rows() == AFTER_FLUSH
    assert ContentType.objects.filter(app_label="lanes", model="lane").exists()
    assert Permission.objects.filter(codename="add_lane").exists()


@pytest.mark.django_db(transaction=True)
def test_content_types_and_permissions_a_test_changed_are_made_again() -> None:
    flush_tables_with_rows("default")
    made = set(Permission.objects.values_list("content_type__app_label", "codename"))
    Permission.objects.filter(codename="add_lane").delete()
    ContentType.objects.create(app_label="nowhere", model="ghost")
    Permission.objects.create(codename="haunt", name="Can haunt", content_type=ContentType.objects.get(model="ghost"))

    flush_tables_with_rows("default")

    assert set(Permission.objects.values_list("content_type__app_label", "codename")) == made
    assert not ContentType.objects.filter(app_label="nowhere").exists()
