"""One rule per field, the same everywhere: each bad value below is refused with the same
message by the service (the Django shell), the management API (422 naming the field) and
the Django admin, and never saved. Plus the edges that used to be 500s: NUL in a path,
huge query numbers, oversized bodies, bad socket messages and unknown socket paths, and a
403 logged as one line."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client

from core.consumers import CLOSE_INVALID_PAYLOAD, CLOSE_NOT_FOUND, CLOSE_UNSUPPORTED_DATA
from gateway.models import ApiKey
from gateway.services import api_key_create
from lanes.lane_services import lane_create
from lanes.models import Lane, Node
from lanes.node_services import node_create
from portal.asgi import application
from tests.conftest import make_superuser
from tests.lanes.rule_cases import GIB, lane_data

NODE = {"name": "spark9", "address": "10.0.0.9", "transport": "local", "memory_gib": 128.0, "os_reserve_gib": 8.0}

# (field, bad value, a phrase of the one message)
NODE_CASES: list[tuple[str, Any, str]] = [
    ("ssh_port", 0, "Enter a port from 1 to 65,535."),
    ("ssh_port", 70000, "Enter a port from 1 to 65,535."),
    ("memory_gib", -1.0, "Enter a number above 0"),
    ("memory_gib", 1e308, "Enter a number above 0"),
    ("memory_gib", float("nan"), "Enter a number above 0"),
    ("os_reserve_gib", 500.0, "The OS reserve must be less than the node's memory."),
    ("ssh_user", "spa\x00rk", "Remove the NUL or control characters."),
    ("labels", ["rack\x00a"], "Remove NUL characters"),
]

LANE_CASES: list[tuple[str, Any, str]] = [
    ("kv_cache_memory_bytes", -5, "Enter a whole number from 1 to"),
    ("max_num_seqs", 0, "Enter a whole number from 1 to"),
    ("api_port", 0, "Enter a port from 1 to 65,535."),
    ("max_model_len", -5, "max_model_len must be a whole number of tokens of at least 1."),
    ("max_model_len", 2**40, "Enter a whole number from 1 to 2,147,483,647."),
    ("gpu_memory_utilization", float("nan"), "Enter a number above 0 and at most 1."),
    ("model_id", "org/\x00model", "Remove the NUL or control characters."),
    ("container_env", {"A": "b\x00"}, "Remove NUL characters"),
]


@pytest.fixture
def nodes(db: None) -> dict[str, Node]:
    return {"spark1": Node.objects.create(name="spark1", address="127.0.0.11", transport="local")}


def body(data: dict[str, Any]) -> str:
    return json.dumps(data, allow_nan=True)


@pytest.mark.parametrize("field, value, message", NODE_CASES, ids=[f"{c[0]}={c[1]!r}" for c in NODE_CASES])
def test_a_bad_node_value_gets_the_same_message_from_shell_api_and_admin(
    admin_user: User, admin_client: Client, field: str, value: Any, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        node_create(actor=admin_user, data={**NODE, field: value})
    assert any(message in m for m in caught.value.message_dict[field])
    response = admin_client.post("/api/nodes", data=body({**NODE, field: value}), content_type="application/json")
    assert response.status_code == 422, response.content
    assert any(e["loc"] == ["body", field] and message in e["msg"] for e in response.json()["detail"])
    form = {**NODE, "ssh_port": 22, "ssh_user": "spark", "runtime_command": "docker", "state": "unknown",
            "labels": "[]", "network_report": "{}", field: json.dumps(value) if field == "labels" else value}
    site_admin = Client()
    site_admin.force_login(make_superuser("root"))
    page = site_admin.post("/admin/lanes/node/add/", form)
    # The Django admin is read-only for nodes: changes go through the services (pages, API).
    assert page.status_code == 403
    assert not Node.objects.filter(name="spark9").exists()


@pytest.mark.parametrize("field, value, message", LANE_CASES, ids=[f"{c[0]}={c[1]!r}" for c in LANE_CASES])
def test_a_bad_lane_value_gets_the_same_message_from_shell_and_api(
    nodes: dict[str, Node], admin_user: User, admin_client: Client, field: str, value: Any, message: str
) -> None:
    data = lane_data(**{field: value})
    with pytest.raises(ValidationError) as caught:
        lane_create(actor=admin_user, data=data, nodes=["spark1"])
    assert any(message in m for m in caught.value.message_dict[field]), caught.value.message_dict
    response = admin_client.post("/api/lanes", data=body({**data, "nodes": ["spark1"]}),
                                 content_type="application/json")
    assert response.status_code == 422, response.content
    assert any(e["loc"] == ["body", field] and message in e["msg"] for e in response.json()["detail"])
    assert not Lane.objects.filter(name="newlane").exists()


def test_utilization_stays_in_range_even_with_the_kv_size_fixed(nodes: dict[str, Node], admin_user: User) -> None:
    with pytest.raises(ValidationError) as caught:
        lane_create(actor=admin_user, data=lane_data(kv_cache_memory_bytes=2 * GIB, gpu_memory_utilization=7),
                    nodes=["spark1"])
    assert "at most 1" in " ".join(caught.value.message_dict["gpu_memory_utilization"])


@pytest.mark.parametrize("field, value", [("rpm_limit", 10**30), ("tpm_limit", 2**31), ("max_parallel", 0),
                                          ("name", "k" * 101), ("name", "a\x00b")])
def test_a_bad_key_value_is_refused_by_shell_api_and_form(
    admin_user: User, admin_client: Client, field: str, value: Any
) -> None:
    fields = {"name": "agent", field: value}
    with pytest.raises(ValidationError) as caught:
        api_key_create(actor=admin_user, **fields)
    assert field in caught.value.message_dict
    response = admin_client.post("/api/gateway/keys", data=body(fields), content_type="application/json")
    assert response.status_code == 422, response.content
    assert any(e["loc"][-1] == field for e in response.json()["detail"])
    page = admin_client.get("/gateway/")
    token = page.content.decode().split('name="form_token" value="', 1)[1].split('"', 1)[0]
    form = admin_client.post("/gateway/", {"name": "agent", "default_route": "auto", "form_token": token,
                                           field: value})
    assert form.status_code == 200
    assert not ApiKey.objects.exists()


def test_query_numbers_and_paths_that_used_to_be_500s_are_4xx(admin_client: Client) -> None:
    assert admin_client.get("/api/jobs?offset=9286920158724896063488").status_code == 422
    assert admin_client.get("/api/jobs?limit=-5").status_code == 422
    assert admin_client.get("/api/jobs?limit=501").status_code == 422
    assert admin_client.get("/api/jobs?limit=500&offset=0").status_code == 200
    nul = admin_client.get("/api/lanes/%00")
    assert nul.status_code == 400 and "control character" in nul.json()["detail"]
    assert admin_client.get("/api/jobs?lane=%00").status_code == 400
    assert admin_client.get("/api/jobs/99999999999999999999999").status_code == 404
    unknown = admin_client.get("/api/jobs/abc")
    assert unknown.status_code == 404 and unknown.json() == {"detail": "Not found."}


def test_an_api_body_over_the_limit_is_413(admin_client: Client, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = admin_client.post("/api/nodes", data=body({**NODE, "sim_dir": "x" * 20_000}),
                                 content_type="application/json")
    assert response.status_code == 413 and "larger than the limit" in response.json()["detail"]


def test_the_openapi_schema_documents_each_operations_4xx(admin_client: Client) -> None:
    schema = admin_client.get("/api/openapi.json").json()
    patch = schema["paths"]["/api/lanes/{name}"]["patch"]["responses"]
    assert {"200", "400", "401", "403", "404", "413", "422"} <= set(patch)
    assert patch["422"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorOut"}
    assert set(schema["paths"]["/api/me"]["get"]["responses"]) == {"200", "401", "403"}
    assert "409" in schema["paths"]["/api/jobs/lanes/{name}/{action}"]["post"]["responses"]


def test_a_403_is_logged_as_one_line(viewer_client: Client, caplog: pytest.LogCaptureFixture) -> None:
    from core.logfilters import ForbiddenOneLine

    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert viewer_client.get("/nodes/new/").status_code == 403
    records = [r for r in caplog.records if getattr(r, "status_code", None) == 403]
    assert records
    for record in records:
        ForbiddenOneLine().filter(record)
        assert record.exc_info is None and "\n" not in record.getMessage()


async def _socket(user: User, path: str) -> WebsocketCommunicator:
    def login() -> str:
        client = Client()
        client.force_login(user)
        return client.cookies["sessionid"].value

    cookie = await database_sync_to_async(login)()
    headers = [(b"origin", b"http://localhost"), (b"host", b"localhost"), (b"cookie", f"sessionid={cookie}".encode())]
    return WebsocketCommunicator(application, path, headers=headers)


@pytest.mark.django_db(transaction=True)
async def test_an_unknown_socket_path_is_refused_with_a_code(viewer_user: User) -> None:
    ws = await _socket(viewer_user, "/ws/lanes/x/")
    connected, code = await ws.connect(timeout=30)
    assert not connected and code == CLOSE_NOT_FOUND
    # As a browser does: the consumer (subscribed to the channel layer) ends on the disconnect,
    # instead of being cancelled mid-receive when the test's event loop closes (a 600 s hang once).
    await ws.disconnect(timeout=30)


@pytest.mark.django_db(transaction=True)
async def test_a_socket_closes_with_a_code_on_a_message_that_is_not_json(viewer_user: User) -> None:
    ws = await _socket(viewer_user, "/ws/dashboard/")
    connected, _ = await ws.connect(timeout=30)
    assert connected
    await ws.receive_json_from(timeout=30)  # hello
    await ws.send_to(text_data="not json {")
    assert (await ws.receive_output(timeout=30)) == {"type": "websocket.close", "code": CLOSE_INVALID_PAYLOAD}
    await ws.disconnect(timeout=30)
    ws = await _socket(viewer_user, "/ws/dashboard/")
    await ws.connect(timeout=30)
    await ws.receive_json_from(timeout=30)
    await ws.send_to(bytes_data=b"\x00\x01")
    assert (await ws.receive_output(timeout=30)) == {"type": "websocket.close", "code": CLOSE_UNSUPPORTED_DATA}
    await ws.disconnect(timeout=30)


def test_the_request_log_and_metrics_operations_document_their_parameters(admin_client: Client) -> None:
    """The request log API's filters are the page's (route and a time range included), and
    metrics' JSON answers with the same documented errors as every operation."""
    paths = admin_client.get("/api/openapi.json").json()["paths"]
    params = {p["name"]: p for p in paths["/api/gateway/requests"]["get"]["parameters"]}
    assert {"key", "lane", "status", "route", "since", "until", "before", "limit"} <= set(params)
    assert "`error` (400 and above)" in params["status"]["description"]
    series = paths["/api/metrics/series/{kind}/{name}"]["get"]["responses"]
    assert {"200", "401", "403", "404", "422"} <= set(series)
    assert series["422"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorOut"}
    assert "/api/gateway/totals/{by}" in paths
