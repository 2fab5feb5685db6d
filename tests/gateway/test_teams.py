"""Teams: admins manage them (pages and API, every change audited); a member reads their own
team's keys and usage, never another team's; a team's lanes bound its keys' lanes, at the
gateway too."""

from __future__ import annotations

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from core.models import AuditEvent
from gateway.directory import _load_key, effective_lanes
from gateway.models import ApiKey, Budget, RequestLog, Team
from gateway.services import api_key_create
from gateway.team_services import team_create, team_update
from metrics.storage import usage_rollup
from sparksim.standalone import EngineHandle
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway, create_key, make_lane

MESSAGES = [{"role": "user", "content": "hi"}]


def make_team(actor: User, name: str, *members: User, lanes: list[str] | None = None) -> Team:
    return team_create(actor=actor, name=name, allowed_lanes=lanes or [], members=[m.username for m in members])


def test_a_keys_lanes_are_its_own_within_its_teams() -> None:
    qd, q = frozenset({"qwen", "deepseek"}), frozenset({"qwen"})
    assert effective_lanes(frozenset(), None) is None  # no team, no narrowing: every lane
    assert effective_lanes(q, None) == q
    assert effective_lanes(frozenset(), qd) == qd  # inherits the team's
    assert effective_lanes(q, qd) == q  # narrows them
    assert effective_lanes(frozenset({"deepseek"}), q) == frozenset()  # the team lost the lane: none


def test_the_team_pages_and_api_are_denied_to_accounts_without_a_role(role_clients: dict[str, Client],
                                                                      admin_user: User) -> None:
    team = make_team(admin_user, "agents")
    for url in ("/teams/", f"/teams/{team.pk}/"):
        assert role_clients["outsider"].get(url).status_code == 403
        assert role_clients["anonymous"].get(url).status_code == 302
    for url in ("/api/gateway/teams", f"/api/gateway/teams/{team.pk}"):
        assert role_clients["outsider"].get(url).status_code == 403
        assert role_clients["anonymous"].get(url).status_code == 401


def test_only_admins_create_or_change_teams(role_clients: dict[str, Client], admin_user: User,
                                            lead_user: User, viewer_user: User) -> None:
    team = make_team(admin_user, "agents", lead_user, viewer_user)
    for who in ("lead", "viewer", "outsider"):  # members or not: read only
        client = role_clients[who]
        assert client.post("/api/gateway/teams", {"name": "x"}, content_type="application/json").status_code == 403
        assert client.patch(f"/api/gateway/teams/{team.pk}", {"name": "y"},
                            content_type="application/json").status_code == 403
        assert client.post("/teams/", {"name": "x"}).status_code == 403
        assert client.post(f"/teams/{team.pk}/", {"name": "y"}).status_code == 403
    assert role_clients["anonymous"].post("/api/gateway/teams", {"name": "x"},
                                          content_type="application/json").status_code == 401
    assert list(Team.objects.values_list("name", flat=True)) == ["agents"]
    assert AuditEvent.objects.filter(action__startswith="team.").count() == 1


def test_an_admin_manages_a_team_through_the_api_and_every_change_is_audited(
        admin_client: Client, admin_user: User, lead_user: User, viewer_user: User) -> None:
    make_lane("qwen", 8000)
    make_lane("deepseek", 8001)
    created = admin_client.post("/api/gateway/teams", {"name": "agents", "allowed_lanes": ["qwen"],
                                                       "members": [lead_user.username]},
                                content_type="application/json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["allowed_lanes"] == ["qwen"] and body["members"] == [lead_user.username] and body["keys"] == []
    changed = admin_client.patch(f"/api/gateway/teams/{body['id']}", {"members": [viewer_user.username],
                                                                    "allowed_lanes": ["qwen", "deepseek"]},
                                 content_type="application/json")
    assert changed.status_code == 200 and changed.json()["name"] == "agents"
    assert changed.json()["members"] == [viewer_user.username]
    event = AuditEvent.objects.get(action="team.update", object_id=str(body["id"]))
    assert event.diff["members"] == [[lead_user.username], [viewer_user.username]]
    assert event.diff["allowed_lanes"] == [["qwen"], ["deepseek", "qwen"]]
    assert AuditEvent.objects.filter(action="team.create", object_id=str(body["id"])).exists()


def test_bad_team_input_is_422_naming_the_field_and_changes_nothing(admin_client: Client, admin_user: User) -> None:
    team = make_team(admin_user, "agents")
    cases = [
        ({"name": "Agents"}, "name"),  # names are unique whatever their case
        ({"name": "  "}, "name"),
        ({"name": "new", "allowed_lanes": ["nope"]}, "allowed_lanes"),
        ({"name": "new", "members": ["nobody"]}, "members"),
        ({"name": "new", "colour": "red"}, "colour"),
    ]
    for payload, field in cases:
        answer = admin_client.post("/api/gateway/teams", payload, content_type="application/json")
        assert answer.status_code == 422, (payload, answer.content)
        assert field in str(answer.json()["detail"]), payload
    answer = admin_client.patch(f"/api/gateway/teams/{team.pk}", {"members": ["nobody"]},
                                content_type="application/json")
    assert answer.status_code == 422 and "members" in str(answer.json()["detail"])
    assert admin_client.get("/api/gateway/teams/999999").status_code == 404
    assert list(Team.objects.values_list("name", flat=True)) == ["agents"]


def test_members_see_their_teams_keys_and_usage_and_not_another_teams(
        role_clients: dict[str, Client], admin_user: User, lead_user: User, viewer_user: User) -> None:
    ours = make_team(admin_user, "ours", viewer_user)
    theirs = make_team(admin_user, "theirs", lead_user)
    mine = api_key_create(actor=admin_user, name="our-agent", team=ours.pk).key
    other = api_key_create(actor=admin_user, name="their-agent", team=theirs.pk).key
    now = timezone.now()
    RequestLog.objects.create(created_at=now, request_id="req-1", key=mine, endpoint="chat.completions",
                              lane="qwen", status=200, prompt_tokens=111, completion_tokens=7, latency_ms=5)
    RequestLog.objects.create(created_at=now, request_id="req-2", key=other, endpoint="chat.completions",
                              lane="qwen", status=200, prompt_tokens=999, completion_tokens=9, latency_ms=5)
    usage_rollup(now=now)
    viewer = role_clients["viewer"]
    listed = viewer.get("/api/gateway/teams").json()
    assert [team["name"] for team in listed] == ["ours"]
    assert [key["name"] for key in listed[0]["keys"]] == ["our-agent"] and "secret" not in str(listed)
    page = viewer.get(f"/teams/{ours.pk}/").content.decode()
    assert "our-agent" in page and "111" in page
    assert "their-agent" not in page and "999" not in page
    assert 'id="team-form"' not in page  # read only
    assert viewer.get(f"/teams/{theirs.pk}/").status_code == 403
    assert viewer.get(f"/api/gateway/teams/{theirs.pk}").status_code == 403
    assert "theirs" not in viewer.get("/teams/").content.decode()
    everything = role_clients["admin"].get("/api/gateway/teams").json()
    assert [team["name"] for team in everything] == ["ours", "theirs"]


def test_an_admin_creates_and_changes_a_team_on_its_pages(admin_client: Client, lead_user: User) -> None:
    make_lane("qwen", 8000)
    answer = admin_client.post("/teams/", {"name": "agents", "allowed_lanes": ["qwen"],
                                           "members": [lead_user.username]})
    team = Team.objects.get(name="agents")
    assert answer.status_code == 302 and answer["location"] == f"/teams/{team.pk}/"
    assert admin_client.post(f"/teams/{team.pk}/", {"name": "agents", "members": []}).status_code == 302
    assert list(team.members.all()) == [] and list(team.allowed_lanes.all()) == []
    refused = admin_client.post("/teams/", {"name": "Agents"})
    assert refused.status_code == 400 and "already exists" in refused.content.decode()


def test_a_key_may_narrow_its_teams_lanes_never_widen_them(admin_user: User) -> None:
    make_lane("qwen", 8000)
    make_lane("deepseek", 8001)
    team = make_team(admin_user, "agents", lanes=["qwen"])
    with pytest.raises(ValidationError) as refused:
        api_key_create(actor=admin_user, name="wide", team=team.pk, allowed_lanes=["deepseek"])
    assert "allowed_lanes" in refused.value.message_dict
    with pytest.raises(ValidationError) as refused:
        api_key_create(actor=admin_user, name="pinned", team=team.pk, default_route="deepseek")
    assert "default_route" in refused.value.message_dict
    with pytest.raises(ValidationError) as refused:
        api_key_create(actor=admin_user, name="lost", team=424242)
    assert "team" in refused.value.message_dict
    key = api_key_create(actor=admin_user, name="inherits", team=team.pk).key
    info = _load_key(key.secret_hash)
    assert info is not None and info.allowed_lanes == frozenset({"qwen"}) and info.team_id == team.pk
    assert not ApiKey.objects.exclude(pk=key.pk).exists()


def test_the_gateway_holds_a_key_to_its_teams_lanes_and_follows_a_change_at_once(
        gateway: Gateway, key_owner: User, second_engine: EngineHandle) -> None:
    make_lane("deepseek", second_engine.port, served="deepseek-test")
    team = make_team(key_owner, "agents", lanes=["qwen"])
    secret, _ = create_key(key_owner, name="team-key", team=team.pk)

    def ask(model: str) -> httpx.Response:
        return httpx.post(f"{gateway.base_url}/chat/completions", json={"model": model, "messages": MESSAGES},
                          headers=gateway.headers(secret), timeout=10)

    denied = ask("deepseek")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "lane_not_allowed"
    assert ask("qwen").status_code == 200
    team_update(actor=key_owner, team=team, allowed_lanes=["qwen", "deepseek"])
    wait_for(lambda: ask("deepseek").status_code == 200, what="the team's new lane to reach the gateway")


def test_budgets_are_set_and_reset_by_admins_only_and_members_see_their_teams(
        role_clients: dict[str, Client], admin_user: User, viewer_user: User, lead_user: User) -> None:
    ours = make_team(admin_user, "ours", viewer_user)
    theirs = make_team(admin_user, "theirs", lead_user)
    admin = role_clients["admin"]
    answer = admin.post("/api/gateway/budgets", {"team": ours.pk, "period": "day", "total_tokens": 1000},
                        content_type="application/json")
    assert answer.status_code == 200, answer.content
    budget = answer.json()
    assert budget["used_total_tokens"] == 0 and budget["window"] and budget["used_share"] == 0
    raised = admin.post("/api/gateway/budgets", {"team": ours.pk, "period": "day", "total_tokens": 5000},
                        content_type="application/json").json()
    assert raised["id"] == budget["id"] and raised["total_tokens"] == 5000
    event = AuditEvent.objects.get(action="budget.update", object_id=str(budget["id"]))
    assert event.diff["total_tokens"] == [1000, 5000]
    other = admin.post(f"/teams/{theirs.pk}/budgets", {"target": "team", "period": "month", "prompt_tokens": 7})
    assert other.status_code == 302
    for who in ("lead", "viewer", "outsider"):
        client = role_clients[who]
        assert client.get("/api/gateway/budgets").status_code == 403
        assert client.post("/api/gateway/budgets", {"team": ours.pk, "total_tokens": 1},
                           content_type="application/json").status_code == 403
        assert client.post(f"/api/gateway/budgets/{budget['id']}/reset").status_code == 403
        assert client.post(f"/teams/{ours.pk}/budgets", {"target": "team", "period": "day",
                                                         "total_tokens": 1}).status_code == 403
        assert client.post(f"/teams/{ours.pk}/budgets/{budget['id']}/reset").status_code == 403
    assert role_clients["anonymous"].post("/api/gateway/budgets", {"team": ours.pk, "total_tokens": 1},
                                          content_type="application/json").status_code == 401
    assert Budget.objects.get(pk=budget["id"]).total_tokens == 5000
    viewer = role_clients["viewer"]
    mine = viewer.get(f"/api/gateway/teams/{ours.pk}").json()
    assert [b["total_tokens"] for b in mine["budgets"]] == [5000]
    page = viewer.get(f"/teams/{ours.pk}/").content.decode()
    assert 'id="team-budgets"' in page and "5000" in page and 'id="budget-form"' not in page
    reset = admin.post(f"/api/gateway/budgets/{budget['id']}/reset")
    assert reset.status_code == 200 and AuditEvent.objects.filter(action="budget.reset").count() == 1


def test_bad_budget_input_is_422_naming_the_field(admin_client: Client, admin_user: User) -> None:
    team = make_team(admin_user, "agents")
    key = api_key_create(actor=admin_user, name="k", team=team.pk).key
    cases = [
        ({"team": team.pk}, "total_tokens"),  # no limit at all
        ({"team": team.pk, "key": key.pk, "total_tokens": 5}, "team"),  # both
        ({"total_tokens": 5}, "team"),  # neither
        ({"team": 999999, "total_tokens": 5}, "team"),
        ({"key": 999999, "total_tokens": 5}, "key"),
        ({"team": team.pk, "total_tokens": -5}, "total_tokens"),
        ({"team": team.pk, "total_tokens": 2 ** 70}, "total_tokens"),
        ({"team": team.pk, "period": "week", "total_tokens": 5}, "period"),
    ]
    for payload, field in cases:
        answer = admin_client.post("/api/gateway/budgets", payload, content_type="application/json")
        assert answer.status_code == 422, (payload, answer.content)
        assert field in str(answer.json()["detail"]), (payload, answer.json())
    assert not Budget.objects.exists()
    assert admin_client.post("/api/gateway/budgets/424242/reset").status_code == 404


def test_the_request_log_is_searched_by_team_on_the_page_and_the_api(admin_client: Client, admin_user: User,
                                                                      viewer_client: Client) -> None:
    ours, theirs = make_team(admin_user, "ours"), make_team(admin_user, "theirs")
    mine = api_key_create(actor=admin_user, name="our-agent", team=ours.pk).key
    other = api_key_create(actor=admin_user, name="their-agent", team=theirs.pk).key
    for request_id, key in (("req-ours", mine), ("req-theirs", other), ("req-keyless", None)):
        RequestLog.objects.create(request_id=request_id, key=key, endpoint="chat.completions", lane="qwen",
                                  status=200, latency_ms=5)
    listed = admin_client.get(f"/api/gateway/requests?team={ours.pk}").json()
    assert [row["request_id"] for row in listed] == ["req-ours"]
    page = admin_client.get(f"/monitor/requests/?team={theirs.pk}").content.decode()
    assert "req-theirs" in page and "req-ours" not in page and "req-keyless" not in page
    assert admin_client.get("/api/gateway/requests?team=0").status_code == 422
    assert admin_client.get("/monitor/requests/?team=x").status_code == 400
    assert viewer_client.get(f"/api/gateway/requests?team={ours.pk}").status_code == 403
