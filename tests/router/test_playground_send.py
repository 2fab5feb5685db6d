"""The playground sends a prompt to a lane (a sparksim engine) and streams the answer back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN
from tests.gateway.conftest import engine_received, make_lane, run_async


@pytest.fixture
def qwen(engine_factory: Callable[..., EngineHandle], db: None) -> EngineHandle:
    engine = engine_factory(SIM_QWEN, "--served-model-name", "qwen-test", time_scale=0.001)
    make_lane("qwen", engine.port, served="qwen-test")
    return engine


def body_of(response) -> str:
    async def collect() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return run_async(collect).decode()


def test_a_team_lead_sends_a_prompt_and_reads_the_streamed_answer(qwen, lead_client):
    response = lead_client.post("/routing/playground/send", {"prompt": "Say hello.", "lane": "qwen"})
    assert response.status_code == 200 and response["x-spark-lane"] == "qwen"
    assert len(body_of(response)) > 0
    sent = engine_received(qwen)
    assert len(sent) == 1 and sent[0]["messages"][0]["content"] == "Say hello." and sent[0]["stream"] is True


def test_a_viewer_cannot_send_and_nothing_reaches_the_lane(qwen, viewer_client, outsider_client):
    assert viewer_client.post("/routing/playground/send", {"prompt": "Say hello.", "lane": "qwen"}).status_code == 403
    assert outsider_client.post("/routing/playground/send", {"prompt": "Say hello.", "lane": "qwen"}).status_code == 403
    assert engine_received(qwen) == []


def test_an_unknown_lane_or_an_empty_prompt_is_refused_by_name(qwen, lead_client):
    response = lead_client.post("/routing/playground/send", {"prompt": "Say hello.", "lane": "nowhere"})
    assert response.status_code == 400 and "lane: choose an existing lane" in response.content.decode()
    assert lead_client.post("/routing/playground/send", {"prompt": " ", "lane": "qwen"}).status_code == 400
