"""Single sign-on's settings and pages without a provider: the group map checked at start-up
with a clear error, the login page's button only when configured, the flow's URLs 404 while
it is off, local passwords for break-glass superusers only when the admin says so, and the
provider-made role denied what the role is denied."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from core.env import env_json_object
from core.models import ExternalIdentity
from core.oidc_map import parse_group_map
from core.roles import Role
from tests.conftest import PASSWORD, make_superuser, make_user

ROOT = Path(__file__).resolve().parents[2]


def test_the_group_map_gives_the_strongest_role_and_every_mapped_team():
    group_map = parse_group_map({"roles": {"a": "viewer", "b": "admin", "c": "team lead"},
                                 "teams": {"a": "Search", "c": ["Agents", "Search"]}})
    assert group_map.role_for(["a", "c"]) is Role.TEAM_LEAD
    assert group_map.role_for(["c", "b", "a"]) is Role.ADMIN
    assert group_map.role_for(["zzz"]) is None and group_map.role_for([]) is None
    assert group_map.teams_for(["a", "c"]) == {"Search", "Agents"}
    assert group_map.managed_teams == {"Search", "Agents"}


@pytest.mark.parametrize(("raw", "message"), [
    ({"roles": {"ops": "boss"}}, "roles.ops: must be one of 'admin', 'team lead', 'viewer'; got 'boss'"),
    ({"roles": ["ops"]}, "roles: must be an object of group name to role"),
    ({"teams": {"ops": []}}, "teams.ops: must be a team name or a list of team names"),
    ({"teams": {"ops": [3]}}, "teams.ops: must be a team name or a list of team names"),
    ({"groups": {}}, "unknown key(s) groups"),
])
def test_a_bad_group_map_names_the_entry_and_the_rule(raw, message):
    with pytest.raises(ImproperlyConfigured, match="PORTAL_OIDC_GROUP_MAP") as caught:
        parse_group_map(raw)
    assert message in str(caught.value)


def test_the_group_map_comes_inline_or_from_a_file_not_both(monkeypatch, tmp_path):
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"roles": {"ops": "admin"}}))
    monkeypatch.setenv("PORTAL_OIDC_GROUP_MAP_FILE", str(path))
    assert env_json_object("PORTAL_OIDC_GROUP_MAP", "PORTAL_OIDC_GROUP_MAP_FILE") == {"roles": {"ops": "admin"}}
    monkeypatch.setenv("PORTAL_OIDC_GROUP_MAP", "{}")
    with pytest.raises(ImproperlyConfigured, match="set one of them, not both"):
        env_json_object("PORTAL_OIDC_GROUP_MAP", "PORTAL_OIDC_GROUP_MAP_FILE")
    monkeypatch.delenv("PORTAL_OIDC_GROUP_MAP_FILE")
    monkeypatch.setenv("PORTAL_OIDC_GROUP_MAP", "{roles:")
    with pytest.raises(ImproperlyConfigured, match="PORTAL_OIDC_GROUP_MAP: must be a JSON object; not JSON"):
        env_json_object("PORTAL_OIDC_GROUP_MAP", "PORTAL_OIDC_GROUP_MAP_FILE")
    monkeypatch.setenv("PORTAL_OIDC_GROUP_MAP", "[1]")
    with pytest.raises(ImproperlyConfigured, match="must be a JSON object; got a list"):
        env_json_object("PORTAL_OIDC_GROUP_MAP", "PORTAL_OIDC_GROUP_MAP_FILE")


def test_a_bad_group_map_stops_the_portal_at_start_up():
    env = dict(os.environ, PORTAL_OIDC_GROUP_MAP=json.dumps({"roles": {"ops": "root"}}))
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert "PORTAL_OIDC_GROUP_MAP: roles.ops: must be one of" in result.stderr


@pytest.mark.django_db
def test_the_login_page_offers_the_provider_only_when_configured(settings):
    assert "oidc-sign-in" not in Client().get("/accounts/login/").content.decode()
    settings.OIDC_ENABLED, settings.OIDC_PROVIDER_NAME = True, "Contoso Entra ID"
    page = Client().get("/accounts/login/?next=/lanes/").content.decode()
    assert "Sign in with Contoso Entra ID" in page
    assert 'href="/oidc/authenticate/?next=/lanes/"' in page
    assert 'id="id_password"' in page  # local accounts stay


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/oidc/authenticate/", "/oidc/callback/?code=x&state=y"])
def test_the_flow_is_not_found_while_single_sign_on_is_off(path):
    assert Client().get(path).status_code == 404


@pytest.mark.django_db
def test_local_passwords_for_superusers_only_when_the_admin_says_so(settings):
    make_user("local-viewer", Role.VIEWER)
    make_superuser("break-glass")

    def logs_in(username: str) -> bool:
        client = Client()
        client.post("/accounts/login/", {"username": username, "password": PASSWORD})
        return "_auth_user_id" in client.session

    assert logs_in("local-viewer") and logs_in("break-glass")
    settings.OIDC_ENABLED, settings.OIDC_LOCAL_LOGIN_SUPERUSERS_ONLY = True, True
    assert not logs_in("local-viewer")
    assert logs_in("break-glass")
    assert "break-glass admins only" in Client().get("/accounts/login/").content.decode()


@pytest.mark.django_db
def test_a_provider_made_viewer_is_denied_what_viewers_are_denied():
    user = make_user("sso-viewer", Role.VIEWER)
    ExternalIdentity.objects.create(user=user, issuer="https://idp.example.com", subject="42")
    client = Client()
    client.force_login(user)
    assert client.get("/").status_code == 200
    assert client.get("/users/").status_code == 403


def test_single_sign_on_without_its_endpoints_stops_the_portal_at_start_up():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTAL_OIDC_")}
    env.update(PORTAL_OIDC_CLIENT_ID="spark-portal", PORTAL_OIDC_CLIENT_SECRET="s")
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert "PORTAL_OIDC_ISSUER: required when PORTAL_OIDC_CLIENT_ID is set" in result.stderr


@pytest.mark.django_db
def test_the_users_page_marks_provider_accounts_and_gives_them_no_invite_link(admin_client):
    from django.contrib.auth.models import User

    user = User.objects.create_user("sso-person")  # as a first sign-in makes it: no password
    ExternalIdentity.objects.create(user=user, issuer="https://idp.example.com", subject="7")
    page = admin_client.get("/users/").content.decode()
    assert 'data-provider-account="sso-person"' in page
    assert f"/users/{user.pk}/invite/" not in page
    response = admin_client.post(f"/users/{user.pk}/invite/", follow=True)
    assert "signs in through the identity provider" in response.content.decode()
    assert "/accounts/set-password/" not in response.content.decode()
