"""Sign-in with the company's identity provider, against a real OpenID Connect provider
(django-oauth-toolkit, tests/oidc_provider/) in its own process: the authorization-code flow
with PKCE, the ID token checked against the provider's JWKS, and the provider's groups mapped to
roles and teams at every sign-in."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from core.consumers import CLOSE_FORBIDDEN
from core.models import AuditEvent, ExternalIdentity
from core.roles import Role, user_role
from gateway.models import Team
from tests.conftest import make_superuser, make_user
from tests.jobs.test_consumer import in_fresh_loop, socket
from tests.oidc_provider import OVERAGE
from tests.oidc_provider.server import CLIENT_SECRET, Provider

GROUP_MAP = {"roles": {"spark-admins": "admin", "ml-leads": "team lead", "staff": "viewer"},
             "teams": {"search-team": ["Search"], "agents-team": ["Agents"]}}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    started = Provider(Path(tmp_path_factory.mktemp("oidc-provider"))).start()
    yield started
    started.stop()


@pytest.fixture
def sso(provider: Provider, settings) -> Provider:
    for name, value in provider.portal_settings().items():
        setattr(settings, name, value)
    settings.OIDC_GROUP_MAP = GROUP_MAP
    return provider


def start(portal: Client) -> str:
    response = portal.get("/oidc/authenticate/")
    assert response.status_code == 302
    return str(response["Location"])


def sign_in(portal: Client, provider: Provider, username: str):
    """The whole flow, as a browser goes through it; the portal's answer to the callback."""
    back = urlsplit(provider.authorize(start(portal), username))
    return portal.get(back.path, {key: values[0] for key, values in parse_qs(back.query).items()})


@pytest.mark.django_db
def test_the_authorization_request_carries_state_nonce_and_pkce(sso):
    query = parse_qs(urlsplit(start(Client())).query)
    assert query["response_type"] == ["code"] and query["client_id"] == ["spark-portal"]
    assert query["code_challenge_method"] == ["S256"] and len(query["code_challenge"][0]) >= 43
    assert query["state"][0] and query["nonce"][0]
    assert query["scope"] == ["openid email profile"]


@pytest.mark.django_db
def test_a_first_sign_in_creates_the_user_with_the_mapped_role_and_team(sso, caplog):
    caplog.set_level(logging.DEBUG)
    search = Team.objects.create(name="Search")
    Team.objects.create(name="Agents")
    sso.user("nina", groups=["ml-leads", "search-team"], email="nina@example.org")
    portal = Client()
    response = sign_in(portal, sso, "nina")
    assert response.status_code == 302 and response["Location"] == "/"
    user = User.objects.get(username="nina")
    assert user_role(user) is Role.TEAM_LEAD
    assert list(user.teams.all()) == [search]
    assert user.email == "nina@example.org" and not user.has_usable_password()
    assert ExternalIdentity.objects.get(user=user).issuer == sso.issuer
    assert portal.get("/").status_code == 200  # signed in, with the role's pages
    actions = set(AuditEvent.objects.filter(object_id=str(user.pk)).values_list("action", "actor_name"))
    assert {("user.create", "the identity provider"), ("user.link", "the identity provider"),
            ("user.role", "the identity provider")} <= actions
    assert AuditEvent.objects.filter(action="team.update", object_id=str(search.pk)).exists()
    assert caplog.records and CLIENT_SECRET not in caplog.text  # the whole flow, DEBUG included


@pytest.mark.django_db
def test_a_changed_group_changes_role_and_teams_at_the_next_sign_in(sso):
    Team.objects.create(name="Search")
    agents = Team.objects.create(name="Agents")
    sso.user("omar", groups=["staff", "search-team"])
    sign_in(Client(), sso, "omar")
    user = User.objects.get(username="omar")
    assert user_role(user) is Role.VIEWER
    sso.user("omar", groups=["spark-admins", "agents-team"])
    sign_in(Client(), sso, "omar")
    user = User.objects.get(username="omar")
    assert user_role(user) is Role.ADMIN
    assert list(user.teams.all()) == [agents]
    assert not user.is_superuser  # Django admin stays break-glass for local superusers
    change = AuditEvent.objects.filter(action="user.role", object_id=str(user.pk)).first()
    assert change is not None and change.diff["role"] == ["viewer", "admin"]


@pytest.mark.django_db
def test_a_token_without_its_groups_group_overage_is_refused_and_the_role_and_teams_stay(sso, caplog):
    """Entra ID's group overage: no `groups` claim, a reference to fetch them instead. Mapping
    no groups would drop the role and teams without a word: the sign-in is refused instead,
    logged, and the account is left as the last sign-in made it."""
    search = Team.objects.create(name="Search")
    sso.user("yuri", groups=["ml-leads", "search-team"])
    assert sign_in(Client(), sso, "yuri").status_code == 302
    sso.user("yuri", groups=["ml-leads", "search-team", OVERAGE])
    portal = Client()
    response = sign_in(portal, sso, "yuri")
    assert response.status_code == 403
    assert "did not send your groups" in response.content.decode()
    assert "_auth_user_id" not in portal.session
    user = User.objects.get(username="yuri")
    assert user_role(user) is Role.TEAM_LEAD and list(user.teams.all()) == [search]
    assert "sign-in of yuri refused" in caplog.text and "group overage" in caplog.text
    sso.user("newcomer", groups=[OVERAGE])  # a first sign-in: no account made without its groups
    assert sign_in(Client(), sso, "newcomer").status_code == 403
    assert not User.objects.filter(username="newcomer").exists()


@pytest.mark.django_db
def test_a_user_without_a_mapped_group_gets_no_role_and_a_page_that_says_so(sso):
    sso.user("paul", groups=["unmapped-group"])
    portal = Client()
    assert sign_in(portal, sso, "paul").status_code == 302
    assert user_role(User.objects.get(username="paul")) is None
    page = portal.get("/")
    assert page.status_code == 403
    assert "none of your groups there is mapped to a role" in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_a_removed_group_removes_the_role_and_closes_the_open_socket(sso):
    sso.user("rita", groups=["staff"])
    portal = Client()
    sign_in(portal, sso, "rita")
    assert user_role(User.objects.get(username="rita")) is Role.VIEWER
    cookie = portal.cookies["sessionid"].value
    sso.user("rita", groups=[])

    async def scenario() -> int | None:
        ws = socket("/ws/dashboard/", cookie)
        connected, _ = await ws.connect(timeout=30)
        assert connected
        await database_sync_to_async(lambda: sign_in(Client(), sso, "rita"))()  # another browser, next day
        while True:  # past the socket's first snapshot
            message = await ws.receive_output(timeout=30)
            if message["type"] == "websocket.close":
                await asyncio.wait_for(asyncio.shield(ws.future), timeout=5)
                return message.get("code")

    assert in_fresh_loop(scenario)() == CLOSE_FORBIDDEN
    assert user_role(User.objects.get(username="rita")) is None


@pytest.mark.django_db
def test_a_callback_with_a_state_this_browser_never_started_is_refused(sso):
    sso.user("sam", groups=["staff"])
    attacker = Client()
    back = urlsplit(sso.authorize(start(attacker), "sam"))  # a real code and state, for another session
    victim = Client()
    start(victim)  # the victim has states of its own, not this one
    response = victim.get(back.path, {k: v[0] for k, v in parse_qs(back.query).items()})
    assert response.status_code == 400
    assert "could not be verified" in response.content.decode()
    assert "_auth_user_id" not in victim.session and not User.objects.filter(username="sam").exists()


@pytest.mark.django_db
def test_a_replayed_callback_is_refused(sso):
    sso.user("tess", groups=["staff"])
    portal = Client()
    back = urlsplit(sso.authorize(start(portal), "tess"))
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    assert portal.get(back.path, query).status_code == 302
    assert portal.get(back.path, query).status_code == 400  # the state was used up


@pytest.mark.django_db
def test_an_id_token_with_another_nonce_is_refused(sso):
    sso.user("uma", groups=["staff"])
    portal = Client()
    back = urlsplit(sso.authorize(start(portal), "uma"))
    query = {k: v[0] for k, v in parse_qs(back.query).items()}
    session = portal.session
    session["oidc_states"][query["state"]]["nonce"] = "not-the-nonce-the-provider-signed"
    session.save()
    response = portal.get(back.path, query)
    assert response.status_code == 400
    assert not User.objects.filter(username="uma").exists()


@pytest.mark.django_db
def test_a_token_signed_by_another_key_is_refused(sso, settings):
    """The signature is checked against the provider's JWKS: a key the provider does not publish fails."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    sso.user("vera", groups=["staff"])
    settings.OIDC_OP_JWKS_ENDPOINT = ""
    settings.OIDC_RP_IDP_SIGN_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    response = sign_in(Client(), sso, "vera")
    assert response.status_code == 400
    assert not User.objects.filter(username="vera").exists()


@pytest.mark.django_db
def test_the_provider_refusing_shows_a_page_not_a_500(sso):
    response = Client().get("/oidc/callback/", {"error": "access_denied", "state": "x"})
    assert response.status_code == 403
    assert "did not sign you in (access_denied)" in response.content.decode()


@pytest.mark.django_db
def test_a_local_account_with_the_same_name_is_never_taken_over(sso):
    admin = make_superuser("wade")
    admin.email = "wade@example.org"
    admin.save()
    sso.user("wade", groups=["staff"], email="wade@example.org")
    portal = Client()
    response = sign_in(portal, sso, "wade")
    assert response.status_code == 403
    assert "already has a local account named wade" in response.content.decode()
    assert "_auth_user_id" not in portal.session
    assert not ExternalIdentity.objects.exists() and user_role(User.objects.get(username="wade")) is Role.ADMIN


@pytest.mark.django_db
def test_linking_by_verified_email_when_configured_and_never_a_superuser(sso, settings):
    settings.OIDC_LINK_LOCAL_ACCOUNTS = True
    local = make_user("xena", Role.VIEWER)
    local.email = "xena@example.org"
    local.save()
    sso.user("xena", groups=["ml-leads"], email="xena@example.org")
    assert sign_in(Client(), sso, "xena").status_code == 302
    assert ExternalIdentity.objects.get().user == local
    assert user_role(User.objects.get(pk=local.pk)) is Role.TEAM_LEAD
    root = make_superuser("yuri")
    sso.user("yuri", groups=["spark-admins"], email="yuri@example.org")
    assert sign_in(Client(), sso, "yuri").status_code == 403
    assert not ExternalIdentity.objects.filter(user=root).exists()


@pytest.mark.django_db
def test_a_deactivated_account_cannot_sign_in_through_the_provider(sso):
    sso.user("zoe", groups=["staff"])
    sign_in(Client(), sso, "zoe")
    User.objects.filter(username="zoe").update(is_active=False)
    portal = Client()
    response = sign_in(portal, sso, "zoe")
    assert response.status_code == 403 and "deactivated" in response.content.decode()
    assert "_auth_user_id" not in portal.session


@pytest.mark.django_db
def test_a_wrong_client_secret_is_a_page_naming_the_refusal_and_is_never_logged(sso, settings, caplog):
    caplog.set_level(logging.DEBUG)
    sso.user("abel", groups=["staff"])
    settings.OIDC_RP_CLIENT_SECRET = "a-wrong-secret-never-logged"
    portal = Client()
    response = sign_in(portal, sso, "abel")
    assert response.status_code == 502
    assert "Test IdP refused the portal&#x27;s request (HTTP 401)" in response.content.decode()
    assert "_auth_user_id" not in portal.session and not User.objects.filter(username="abel").exists()
    assert "a-wrong-secret-never-logged" not in caplog.text and CLIENT_SECRET not in caplog.text


@pytest.mark.django_db
def test_a_provider_that_does_not_answer_is_a_page_not_a_500(sso, settings):
    from tests.conftest import free_port

    sso.user("bea", groups=["staff"])
    settings.OIDC_OP_TOKEN_ENDPOINT = f"http://127.0.0.1:{free_port()}/token/"  # nothing listens there
    response = sign_in(Client(), sso, "bea")
    assert response.status_code == 502
    assert "Test IdP did not answer" in response.content.decode()


@pytest.mark.django_db
def test_a_name_already_linked_to_another_provider_login_is_refused(sso):
    other = make_user("cleo", Role.ADMIN)
    ExternalIdentity.objects.create(user=other, issuer=sso.issuer, subject="another-subject")
    sso.user("cleo", groups=["staff"])
    portal = Client()
    response = sign_in(portal, sso, "cleo")
    assert response.status_code == 403
    assert "belongs to another Test IdP login" in response.content.decode()
    assert "_auth_user_id" not in portal.session and user_role(User.objects.get(pk=other.pk)) is Role.ADMIN


@pytest.mark.django_db
def test_an_id_token_from_another_issuer_is_refused(sso, settings):
    sso.user("dina", groups=["staff"])
    settings.OIDC_ISSUER = "https://another-idp.example.com/o"
    portal = Client()
    response = sign_in(portal, sso, "dina")
    assert response.status_code == 400
    assert "_auth_user_id" not in portal.session and not User.objects.filter(username="dina").exists()
