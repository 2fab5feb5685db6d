"""A database migrated to the head before the gateway became an app of its own (keys, the
request log and mirrored samples were the routing app's models), filled, then upgraded with
`migrate`: every row is kept, with its keys, lanes and owner, and nothing is left to migrate."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from gateway.models import ApiKey, MirrorSample, RequestLog
from lanes.models import Lane, Node
from tests.jobs.conftest import create_lane

# Today's head, as it was before the move: routing at 0007, no gateway app.
PREVIOUS_HEAD = [("routing", "0007_request_log_replica"), ("gateway", None)]


def migrate_to(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor


@pytest.mark.django_db(transaction=True)
def test_a_database_at_the_previous_head_upgrades_with_every_row_kept() -> None:
    owner = User.objects.create_user("keyholder")
    node = Node.objects.create(name="spark3", address="127.0.0.13", transport="local")
    qwen = create_lane("qwen", [node])
    before = migrate_to(PREVIOUS_HEAD)
    state_nodes = [node for node in before.loader.graph.leaf_nodes() if node[0] not in ("routing", "gateway")]
    old = before.loader.project_state([*state_nodes, PREVIOUS_HEAD[0]]).apps
    OldKey = old.get_model("routing", "ApiKey")
    OldLog = old.get_model("routing", "RequestLog")
    OldSample = old.get_model("routing", "ShadowSample")
    assert not [model for model in old.get_models() if model._meta.app_label == "gateway"]
    key = OldKey.objects.create(name="agents", owner_id=owner.pk, prefix="sk-spark-abc", secret_hash="a" * 64,
                                default_lane_id=qwen.pk, rpm_limit=60, log_prompts=True)
    key.allowed_lanes.add(qwen.pk)
    OldLog.objects.create(request_id="req-old", key=key, endpoint="chat.completions", lane="qwen", status=200,
                          latency_ms=12.5, prompt_tokens=7, completion_tokens=3, created_at=timezone.now())
    OldSample.objects.create(request_id="req-old", key=key, lane="qwen", external_model="gpt-external",
                             local_latency_ms=12.5, local_chars=10)

    migrate_to(MigrationExecutor(connection).loader.graph.leaf_nodes())

    upgraded = ApiKey.objects.get(pk=key.pk)
    assert (upgraded.name, upgraded.owner, upgraded.default_lane, upgraded.rpm_limit, upgraded.log_prompts) == (
        "agents", owner, qwen, 60, True)
    assert list(upgraded.allowed_lanes.all()) == [Lane.objects.get(name="qwen")]
    row = RequestLog.objects.get(request_id="req-old")
    assert (row.key, row.lane, row.status, row.prompt_tokens, row.completion_tokens) == (upgraded, "qwen", 200, 7, 3)
    sample = MirrorSample.objects.get(request_id="req-old")
    assert (sample.key, sample.external_model) == (upgraded, "gpt-external")
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()
