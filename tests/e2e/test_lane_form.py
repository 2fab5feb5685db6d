"""Browser: the lane form in three groups, nodes picked from the registered ones in rank
order (tensor-parallel size following), and a rule's message on the field it names."""

from __future__ import annotations

from typing import Any

import pytest

from lanes.models import Lane, Node
from tests.conftest import browser_login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_admin_defines_a_lane_picking_and_ranking_nodes(asgi_server: Any, page: Any, admin_user: Any) -> None:
    for i, name in enumerate(["spark1", "spark2", "spark3"], start=1):
        Node.objects.create(name=name, address=f"127.0.0.{10 + i}", transport="local", state="online")
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/lanes/new/")
    assert page.locator("#lane-form .card").count() == 3
    assert not page.is_visible("#id_api_port")  # advanced settings start folded
    page.fill("#id_name", "deepseek")
    page.fill("#id_model_id", "deepseek-ai/DeepSeek-V4-Flash-0731")
    page.fill("#id_image", "img@sha256:" + "b" * 64)
    page.fill("#id_max_model_len", "65536")
    page.fill("#id_gpu_memory_utilization", "0.5")
    page.fill("#id_weights_gib", "40")
    page.click("#nodes-available [data-node=spark2]")
    page.click("#nodes-available [data-node=spark1]")
    assert page.locator("#nodes-chosen li").all_inner_texts()[0].startswith("spark2")
    assert not page.is_visible("#nodes-available [data-node=spark2]")  # chosen: no longer offered
    assert page.input_value("#id_tensor_parallel_size") == "2"
    page.click("#nodes-chosen li[data-node=spark1] button[title^='move up']")
    assert page.input_value("#id_nodes") == "spark1, spark2"
    assert "head" in page.inner_text("#nodes-chosen li[data-node=spark1]")
    page.fill("#id_gpu_memory_utilization", "0.87")  # a refused value: the page says why, on the field
    page.click("#lane-form button[type=submit]")
    page.wait_for_selector("#field-gpu_memory_utilization .rule-error")
    assert "froze" in page.inner_text("#field-gpu_memory_utilization .rule-error")
    assert page.input_value("#id_nodes") == "spark1, spark2"  # the pick survives the refusal
    page.wait_for_selector("#nodes-chosen li[data-node=spark2] .fw-semibold")  # the picker has drawn it again
    assert [li.split("\n")[0].strip() for li in page.locator("#nodes-chosen li .fw-semibold").all_inner_texts()] == [
        "spark1", "spark2"]
    page.fill("#id_gpu_memory_utilization", "0.5")
    page.click("#lane-form button[type=submit]")
    page.wait_for_url(f"{asgi_server.url}/lanes/deepseek/")
    lane = Lane.objects.get(name="deepseek")
    assert [n.name for n in lane.ranked_nodes()] == ["spark1", "spark2"] and lane.tensor_parallel_size == 2
