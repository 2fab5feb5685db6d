"""The router's management API (/api/router/...): versions, activate, revert, the shadow run
and its judged comparison — the pages' services behind it, the roles (team leads and admins
change, viewers read, outsiders 403, anonymous 401), bearer tokens, and 422 naming the field."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.access_tokens import access_token_create
from core.models import AuditEvent
from core.redis_client import sync_redis
from gateway.models import JudgedComparison, RequestLog
from routing.models import Aggregation, RouterVersion, VersionStatus
from routing.services import (
    prototype_create,
    router_version_create_draft,
    router_version_publish,
    router_version_set_shadow,
    router_version_update,
)
from routing.shadow import shadow_agree_key, shadow_count_key

NEW_PROTOTYPE = "Review the migrations of every app in the monorepo together."


@pytest.fixture
def versions(seed_lanes: Any, admin_user: User) -> dict[int, RouterVersion]:
    """v1 active (the similarity rule: no encoder needed), v2 a draft with one prototype more."""
    prototype_create(actor=admin_user, text="What port does Redis use?", label="short_factual")
    v1 = router_version_create_draft(actor=admin_user)
    router_version_update(actor=admin_user, version=v1, data={"aggregation": Aggregation.MEAN_TOP_K})
    router_version_publish(actor=admin_user, version=v1)
    prototype_create(actor=admin_user, text=NEW_PROTOTYPE, label="codebase_review")
    v2 = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    return {1: RouterVersion.objects.get(number=1), 2: v2}


def bearer(user: User) -> dict[str, str]:
    """A personal access token of the user, as a script sends it: no session, no CSRF token."""
    secret = access_token_create(user=user, name="script").secret
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def active_number() -> int:
    return RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number


def fields_named(answer: Any) -> set[str]:
    return {str(entry["loc"][-1]) for entry in answer.json()["detail"]}


def test_every_role_reads_the_versions_and_outsiders_do_not(versions, role_clients):
    listed = role_clients["viewer"].get("/api/router/versions")
    assert listed.status_code == 200
    assert [(v["number"], v["status"]) for v in listed.json()] == [(2, "draft"), (1, "published")]
    assert listed.json()[0]["prototypes"] == 2 and listed.json()[1]["prototypes"] == 1  # v1's set is frozen
    assert role_clients["viewer"].get("/api/router/versions/1").json()["aggregation"] == "mean_top_k"
    changes = role_clients["viewer"].get("/api/router/versions/2/changes").json()
    assert changes["against"] == 1 and changes["added"] == [{"text": NEW_PROTOTYPE, "label": "codebase_review"}]
    assert role_clients["outsider"].get("/api/router/versions").status_code == 403
    assert role_clients["anonymous"].get("/api/router/versions").status_code == 401
    assert role_clients["viewer"].get("/api/router/versions/99").status_code == 404


def test_a_team_lead_activates_a_draft_with_a_token_and_reverts(versions, lead_user):
    script = Client(enforce_csrf_checks=True)  # a bearer token needs no CSRF token
    activated = script.post("/api/router/versions/2/activate", **bearer(lead_user))
    assert activated.status_code == 200, activated.content
    body = activated.json()
    assert body["version"]["status"] == "published" and body["version"]["published_by"] == "lee-lead"
    assert body["changes"]["against"] == 1 and body["changes"]["added"][0]["text"] == NEW_PROTOTYPE
    assert active_number() == 2 and RouterVersion.objects.get(number=1).status == VersionStatus.RETIRED
    assert AuditEvent.objects.filter(action="router.publish").latest("id").actor == lead_user

    preview = script.get("/api/router/revert", **bearer(lead_user)).json()
    assert (preview["active"], preview["previous"]) == (2, 1)
    assert preview["changes"]["removed"][0]["text"] == NEW_PROTOTYPE  # reverting drops it again
    reverted = script.post("/api/router/revert", **bearer(lead_user))
    assert reverted.status_code == 200 and reverted.json()["version"]["number"] == 1
    assert active_number() == 1 and AuditEvent.objects.filter(action="router.revert").exists()


@pytest.mark.parametrize("role", ["viewer", "outsider", "anonymous"])
def test_only_team_leads_and_admins_activate_or_revert(versions, role_clients, role, viewer_user):
    router_version_publish(actor=None, version=versions[2])  # so a revert would have something to restore
    denied = 401 if role == "anonymous" else 403
    assert role_clients[role].post("/api/router/versions/1/activate").status_code == denied
    assert role_clients[role].post("/api/router/revert").status_code == denied
    assert active_number() == 2
    assert Client().post("/api/router/revert", **bearer(viewer_user)).status_code == 403  # a viewer's token too


def test_activate_and_revert_refusals_are_422_naming_the_field(versions, lead_client):
    again = lead_client.post("/api/router/versions/1/activate")
    assert again.status_code == 422 and fields_named(again) == {"status"} and "already published" in again.content.decode()
    nothing_earlier = lead_client.post("/api/router/revert")
    assert nothing_earlier.status_code == 422 and fields_named(nothing_earlier) == {"status"}
    assert lead_client.post("/api/router/versions/0/activate").status_code == 422  # numbers start at 1
    assert lead_client.post("/api/router/versions/7/activate").status_code == 404
    assert active_number() == 1


def test_the_shadow_run_is_started_read_and_stopped_as_the_page_shows_it(
        versions, lead_client, viewer_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        started = lead_client.post("/api/router/shadow", {
            "version": 2, "shadow_limit": 3, "stop_metric": "agreement", "stop_threshold": 0.8,
            "judge_share": 0.5, "judge_lane": "qwen", "judge_daily_tokens": 1000}, content_type="application/json")
    assert started.status_code == 200, started.content
    assert started.json()["version"] == 2 and started.json()["sampled"] == 0 and not started.json()["stopped"]
    assert RouterVersion.objects.get(number=2).shadow
    # What the gateway processes count (routing.shadow) and log, and what the judge decided.
    redis = sync_redis()
    redis.set(shadow_count_key(2), 3)
    redis.set(shadow_agree_key(2), 2)
    RequestLog.objects.bulk_create([
        RequestLog(request_id=f"req-{i}", endpoint="chat.completions", lane="qwen", status=200, latency_ms=1.0,
                   shadow_version=2, shadow_lane=lane) for i, lane in enumerate(["qwen", "qwen", "deepseek"])])
    for n, verdict in enumerate(["draft", "published", "tie", "budget", "draft"]):
        JudgedComparison.objects.create(request_id=f"req-{n}", router_version=2, published_lane="qwen",
                                        draft_lane="deepseek", judge_lane="qwen", verdict=verdict,
                                        answer_tokens=100, judge_tokens=40)

    status = viewer_client.get("/api/router/shadow").json()
    assert (status["sampled"], status["agreed"], status["stopped"], status["shadow_limit"]) == (3, 2, True, 3)
    assert status["agreement"] == pytest.approx(2 / 3) and len(status["agreement_interval"]) == 2
    assert status["logged_requests"] == 3 and {"published_lane": "qwen", "shadow_lane": "deepseek", "count": 1} in status["pairs"]
    judge = status["judge"]
    assert (judge["wins"], judge["losses"], judge["ties"], judge["skipped_budget"]) == (2, 1, 1, 1)
    assert judge["win_rate"] == pytest.approx(2 / 3) and (judge["answer_tokens"], judge["judge_tokens"]) == (500, 200)
    assert (judge["share"], judge["lane"], judge["daily_tokens"]) == (0.5, "qwen", 1000)
    assert "3 of 3 sampled decisions" in viewer_client.get("/routing/shadow/").content.decode()  # the page's figures

    judged = viewer_client.get("/api/router/shadow/judged?limit=2").json()
    assert [row["verdict"] for row in judged] == ["draft", "budget"]  # newest first
    older = viewer_client.get(f"/api/router/shadow/judged?before={judged[-1]['id']}").json()
    assert [row["verdict"] for row in older] == ["tie", "published", "draft"]

    stopped = lead_client.post("/api/router/shadow/stop")
    assert stopped.status_code == 200 and stopped.json()["version"] is None
    assert not RouterVersion.objects.filter(shadow=True).exists()
    assert len(viewer_client.get("/api/router/shadow/judged?version=2").json()) == 5  # the results stay
    assert AuditEvent.objects.filter(action="router.shadow").count() == 2


@pytest.mark.parametrize("body, field", [
    ({"version": 2, "judge_share": 2}, "judge_share"),
    ({"version": 2, "judge_share": 0.2}, "judge_lane"),  # a judged comparison needs its judge
    ({"version": 2, "judge_lane": "nowhere"}, "judge_lane"),
    ({"version": 2, "stop_metric": "sometimes"}, "stop_metric"),
    ({"version": 2, "stop_confidence": 1.5}, "stop_confidence"),
    ({"version": 2, "shadow_limit": 0}, "shadow_limit"),
    ({"version": 2, "shadow_limit": "many"}, "shadow_limit"),
    ({"version": 2, "judge_daily_tokens": 10**30}, "judge_daily_tokens"),
    ({"version": 2, "stop_threshold": "NaN"}, "stop_threshold"),
    ({"version": 99}, "version"),
    ({"version": 1}, "shadow"),  # the active version is no draft
    ({"version": 2, "shadow_share": 0.5}, "shadow_share"),  # an unknown field, never silently dropped
    ({}, "version"),
])
def test_a_bad_shadow_setting_is_a_422_naming_it_and_changes_nothing(versions, lead_client, body, field):
    answer = lead_client.post("/api/router/shadow", body, content_type="application/json")
    assert answer.status_code == 422, answer.content
    assert field in fields_named(answer)
    assert not RouterVersion.objects.filter(shadow=True).exists()


@pytest.mark.parametrize("role", ["viewer", "outsider", "anonymous"])
def test_only_team_leads_and_admins_start_or_stop_a_shadow(versions, role_clients, role, admin_user):
    denied = 401 if role == "anonymous" else 403
    answer = role_clients[role].post("/api/router/shadow", {"version": 2}, content_type="application/json")
    assert answer.status_code == denied and not RouterVersion.objects.filter(shadow=True).exists()
    router_version_set_shadow(actor=admin_user, version=versions[2])
    assert role_clients[role].post("/api/router/shadow/stop").status_code == denied
    assert RouterVersion.objects.get(number=2).shadow
    assert role_clients["admin"].post("/api/router/shadow/stop").status_code == 200
