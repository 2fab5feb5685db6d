import pytest

pytestmark = pytest.mark.django_db


def test_healthz_ok_when_database_and_redis_answer(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


def test_healthz_503_when_redis_is_unreachable(client, settings, admin_client, viewer_client):
    """D11: anonymous callers (and every role but admin) learn which check failed, not its
    error text (host, port, database user); a signed-in admin gets the detail."""
    from tests.conftest import free_port

    port = free_port()
    settings.REDIS_URL = f"redis://127.0.0.1:{port}/0"  # nothing listens there
    for caller in (client, viewer_client):
        response = caller.get("/healthz")
        assert response.status_code == 503
        assert response.json() == {"status": "unavailable", "checks": {"database": "ok", "redis": "unavailable"}}
        assert str(port) not in response.content.decode() and "127.0.0.1" not in response.content.decode()
    detail = admin_client.get("/healthz").json()["checks"]["redis"]
    assert detail.startswith("redis unreachable: ConnectionError") and str(port) in detail


def test_healthz_503_when_the_database_is_down(client, admin_client, monkeypatch):
    from django.db import connection

    def broken_cursor(*args, **kwargs):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(connection, "cursor", broken_cursor)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"] == "unavailable"
    assert "connection refused" not in response.content.decode()
    # a signed-in admin's session cannot be read without the database: a 503, never a 500
    assert admin_client.get("/healthz").status_code == 503
