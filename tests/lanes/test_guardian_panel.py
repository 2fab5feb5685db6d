"""The lane page's guardian panel (liveness, memory floor, restart policy) and the policy's
form: admins change it (validated: field and rule), everyone else is refused."""

from __future__ import annotations

import re
import time

import pytest
from django.core.cache import cache

from core.models import AuditEvent
from lanes.models import Lane, LaneNode, Node
from lanes.replica_health import liveness_key, node_memory_key

pytestmark = pytest.mark.django_db


@pytest.fixture
def lane(db: None) -> Lane:
    node = Node.objects.create(name="spark7", address="127.0.0.77", transport="local")
    lane = Lane.objects.create(
        name="qwen",
        model_id="Qwen/Qwen3.8-27B-FP8",
        image="img@sha256:" + "0" * 64,
        max_model_len=32768,
        observed_state="serving",
    )
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    cache.set(
        liveness_key(lane.pk, 0),
        {
            "progress_at": time.time() - 4,
            "running": 2.0,
            "canary": {"ok": False, "detail": "no token within 3 s", "at": time.time()},
        },
    )
    cache.set(node_memory_key(node.pk), {"available_gib": 41.0, "at": time.time()})
    yield lane
    cache.delete(liveness_key(lane.pk, 0))
    cache.delete(node_memory_key(node.pk))


def test_the_lane_page_shows_liveness_memory_and_policy(viewer_client, lane):
    page = viewer_client.get(f"/lanes/{lane.name}/").content.decode()
    assert 'id="lane-guardian"' in page and "no token within 3 s" in page
    assert re.search(r'class="last-progress">(4|5|6|7) s ago<', page)
    assert "Memory floor 8 GiB per node" in page and "41.0 GiB available" in page
    assert "Restart policy: <strong>never</strong>" in page
    assert 'id="restart-policy-form"' not in page  # a viewer reads, does not change


def test_a_viewer_cannot_change_the_policy(viewer_client, lane):
    response = viewer_client.post(f"/lanes/{lane.name}/restart-policy/", {"restart_policy": "on-failure"})
    assert response.status_code == 403
    assert Lane.objects.get(pk=lane.pk).restart_policy == "never"


def test_an_admin_sets_the_policy_and_bad_values_name_the_field(admin_client, lane):
    bad = admin_client.post(
        f"/lanes/{lane.name}/restart-policy/",
        {"restart_policy": "on-failure", "restart_limit": "0", "restart_window_s": "1800", "restart_backoff_s": "x"},
        follow=True,
    ).content.decode()
    assert "restart_limit: must be a whole number from 1 to 20" in bad
    assert "restart_backoff_s: must be a whole number from 0 to 3,600" in bad
    assert Lane.objects.get(pk=lane.pk).restart_policy == "never"  # nothing saved
    admin_client.post(
        f"/lanes/{lane.name}/restart-policy/",
        {"restart_policy": "on-failure", "restart_limit": "3", "restart_window_s": "1800", "restart_backoff_s": "30"},
    )
    saved = Lane.objects.get(pk=lane.pk)
    assert (saved.restart_policy, saved.restart_limit, saved.restart_backoff_s) == ("on-failure", 3, 30)
    assert AuditEvent.objects.filter(action="lane.restart_policy").exists()
    page = admin_client.get(f"/lanes/{lane.name}/").content.decode()
    assert "at most 3 in 1800 s, backoff 30 s" in page


@pytest.mark.parametrize("value", ["9" * 5000, "-1", "1e3", "٣", "\x00", "3; rm -rf /", " " * 3])
def test_hostile_restart_values_are_refused_naming_the_field(admin_client, lane, value):
    answer = admin_client.post(f"/lanes/{lane.name}/restart-policy/",
                               {"restart_policy": "on-failure", "restart_limit": value}, follow=True)
    assert answer.status_code == 200
    assert "restart_limit: must be a whole number from 1 to 20" in answer.content.decode()
    assert Lane.objects.get(pk=lane.pk).restart_policy == "never"


def test_an_unknown_policy_is_refused_naming_the_choices(admin_client, lane):
    page = admin_client.post(f"/lanes/{lane.name}/restart-policy/", {"restart_policy": "<b>always</b>"},
                             follow=True).content.decode()
    assert "restart_policy: must be one of never, on-failure" in page and "<b>always</b>" not in page


def _budget_html(client, lane: Lane) -> str:
    page = client.get(f"/lanes/{lane.name}/").content.decode()
    return page[page.index('id="budget"'):][:6000]


def test_a_budget_the_node_contradicts_is_flagged_on_the_lane_page(viewer_client, lane):
    """The budget counts what the lane's settings say; the node's MemAvailable says what the
    engine took. 41 GiB available of 128 is ~87 GiB in use, far above this lane's budget."""
    Lane.objects.filter(pk=lane.pk).update(kv_cache_memory_bytes=11 * 2**30)  # a budget of ~25 GiB
    html = _budget_html(viewer_client, lane)
    match = re.search(r"budget counts ([\d.]+) GiB", html)
    assert "The budget lies" in html and "spark7 reports 87.0 GiB in use (MemAvailable 41.0 GiB)" in html, html
    assert match and float(match.group(1)) < 87.0 - 4.0


def test_a_budget_the_node_agrees_with_or_a_stale_reading_makes_no_claim(viewer_client, lane):
    node = Node.objects.get(name="spark7")
    cache.set(node_memory_key(node.pk), {"available_gib": 127.5, "at": time.time()})
    html = _budget_html(viewer_client, lane)
    assert "The budget lies" not in html and "within the budget" in html
    cache.set(node_memory_key(node.pk), {"available_gib": 1.0, "at": time.time() - 600})  # old: says nothing
    html = _budget_html(viewer_client, lane)
    assert "The budget lies" not in html and "within the budget" not in html
    Lane.objects.filter(pk=lane.pk).update(observed_state="stopped")  # no engine: nothing to compare
    cache.set(node_memory_key(node.pk), {"available_gib": 1.0, "at": time.time()})
    assert "The budget lies" not in _budget_html(viewer_client, lane)
