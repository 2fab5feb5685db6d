import pytest

pytestmark = pytest.mark.django_db


def test_healthz_ok_when_database_and_redis_answer(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok"}}


def test_healthz_503_when_redis_is_unreachable(client, settings):
    from tests.conftest import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["redis"].startswith("redis unreachable: ConnectionError")


def test_healthz_503_when_the_database_is_down(client, monkeypatch):
    from django.db import connection

    def broken_cursor(*args, **kwargs):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(connection, "cursor", broken_cursor)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["database"].startswith("database unreachable")
