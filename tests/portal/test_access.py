"""Each role's access and denial on the dashboard and the API."""

import pytest

pytestmark = pytest.mark.django_db


def test_anonymous_is_sent_to_login(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize("role", ["admin", "lead", "viewer"])
def test_every_role_sees_the_dashboard(role_clients, role):
    response = role_clients[role].get("/")
    assert response.status_code == 200
    assert b"Dashboard" in response.content
    assert b'data-ws="/ws/dashboard/"' in response.content


def test_outsider_is_denied_the_dashboard(outsider_client):
    assert outsider_client.get("/").status_code == 403


def test_login_page_renders(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="password"' in response.content


def test_login_with_the_form_then_dashboard(client, viewer_user):
    from tests.conftest import PASSWORD

    response = client.post("/accounts/login/", {"username": viewer_user.username, "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/").status_code == 200


@pytest.mark.parametrize(
    ("role", "capabilities"),
    [
        ("admin", ["view_portal", "edit_routing", "operate_cluster"]),
        ("lead", ["view_portal", "edit_routing"]),
        ("viewer", ["view_portal"]),
    ],
)
def test_api_me_reports_each_roles_capabilities(role_clients, role, capabilities):
    response = role_clients[role].get("/api/me")
    assert response.status_code == 200
    assert response.json()["capabilities"] == capabilities


def test_api_denies_outsider_with_403(outsider_client):
    response = outsider_client.get("/api/me")
    assert response.status_code == 403
    assert "may not" in response.json()["detail"]


def test_api_denies_anonymous_with_401(client):
    response = client.get("/api/me")
    assert response.status_code == 401


def test_anonymous_api_writes_answer_401_with_the_error_shape_not_a_csrf_403():
    """D10: authentication is asked before CSRF (README: 401 anonymous)."""
    from django.test import Client

    from lanes.models import Node

    client = Client(enforce_csrf_checks=True)
    for path in ("/api/nodes", "/api/gateway/keys", "/api/jobs/1/cancel"):
        response = client.post(path, {"name": "spark9", "address": "127.0.0.19", "transport": "ssh"},
                               content_type="application/json")
        assert response.status_code == 401, (path, response.content)
        assert response.json() == {"detail": "Log in first (session cookie and CSRF token), or send a live "
                                             "personal access token: Authorization: Bearer pat-…"}
    assert not Node.objects.exists()


def test_api_docs_are_served(viewer_client):
    assert viewer_client.get("/api/docs").status_code == 200
    schema = viewer_client.get("/api/openapi.json").json()
    assert "/api/me" in schema["paths"]


def test_django_admin_is_for_superuser_admins_only(admin_client, viewer_client, admin_user):
    """Break-glass: a superuser holding the admin role (tests/core/test_superusers.py)."""
    assert viewer_client.get("/admin/").status_code == 302  # to the admin login
    assert admin_client.get("/admin/").status_code == 302
    admin_user.is_superuser = True
    admin_user.save()
    admin_client.force_login(admin_user)
    assert admin_client.get("/admin/").status_code == 200


def test_static_assets_are_served_by_the_portal(viewer_client):
    response = viewer_client.get("/static/vendor/bootstrap/css/bootstrap.min.css")
    assert response.status_code == 200
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert b"Bootstrap" in body[:400]


def test_the_nav_marks_the_current_section(viewer_client):
    content = viewer_client.get("/benchmarks/").content.decode()
    assert 'class="nav-link active" href="/benchmarks/"' in content
    assert 'class="nav-link active" href="/jobs/"' not in content


def test_api_writes_need_the_csrf_token(admin_user):
    """Session auth on the API: a logged-in browser session cannot be ridden by another
    site — a POST without the CSRF token is refused and nothing is created."""
    from django.test import Client

    from lanes.models import Node

    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)
    body = {"name": "spark9", "address": "127.0.0.19", "transport": "ssh"}
    refused = client.post("/api/nodes", body, content_type="application/json")
    assert refused.status_code == 403
    assert not Node.objects.filter(name="spark9").exists()

    client.get("/")  # the page sets the CSRF cookie, as in a browser
    token = client.cookies["csrftoken"].value
    accepted = client.post("/api/nodes", body, content_type="application/json", HTTP_X_CSRFTOKEN=token)
    assert accepted.status_code == 201, accepted.content
    assert Node.objects.filter(name="spark9").exists()


def test_the_gateway_link_is_shown_to_those_who_may_open_it(admin_client, viewer_client):
    assert b'href="/gateway/"' in admin_client.get("/").content
    assert b'href="/gateway/"' not in viewer_client.get("/").content


def test_the_one_permission_check_is_user_can():
    """`core.roles.user_can` is the one permission check (an inactive account holds no
    capability, and it reads the role, not Django's `has_perm`, which is always true for a
    superuser): no module asks `has_perm` itself, as /api/me once did."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    packages = ("core", "lanes", "jobs", "routing", "gateway", "metrics", "benchmarks", "portal", "perf")
    callers = sorted(str(path.relative_to(root)) for package in packages for path in (root / package).rglob("*.py")
                     if "has_perm(" in path.read_text())
    assert callers == []
