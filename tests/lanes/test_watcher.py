"""The lane health watcher against real sparksim engines over HTTP: a dead engine makes a
serving lane `failed` after N failed probes in a row, an engine answering again brings it
back to `serving`, a lane `checking` after a start takes the first probe's verdict, a node
that does not answer goes `unreachable` and so do its lanes; every change is broadcast and
audited."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from core.broadcast import DASHBOARD_GROUP
from core.models import AuditEvent
from lanes.models import Lane, LaneNode, Node
from lanes.watcher import lanes_watch_tick
from tests.conftest import SIM_QWEN, free_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def watcher_settings(settings: Any) -> None:
    settings.LANES_WATCH_FAILURES = 2
    settings.LANES_WATCH_CONNECT_TIMEOUT_S = 0.5
    settings.LANES_WATCH_TIMEOUT_S = 1.0


def sim_node(tmp_path: Path, name: str, address: str = "127.0.0.1") -> Node:
    sim_dir = tmp_path / name
    sim_dir.mkdir()
    (sim_dir / "node.json").write_text(json.dumps({"name": name}))
    return Node.objects.create(name=name, address=address, transport="local", sim_dir=str(sim_dir), state="online")


def serving_lane(name: str, node: Node, port: int, state: str = "serving") -> Lane:
    lane = Lane.objects.create(name=name, model_id=SIM_QWEN, image="img@sha256:" + "a" * 64, api_port=port,
                               max_model_len=32768, served_model_name=name, desired_state="serving",
                               observed_state=state)
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    return lane


def state_of(name: str) -> str:
    return Lane.objects.get(name=name).observed_state


def test_a_dead_engine_fails_its_lane_after_n_probes_and_recovers(tmp_path, engine_factory):
    node = sim_node(tmp_path, "spark3")
    engine = engine_factory(SIM_QWEN, "--served-model-name", "qwen")
    lane = serving_lane("qwen", node, engine.port)

    assert lanes_watch_tick().lanes == 1
    assert state_of("qwen") == "serving"

    engine.process.kill()  # kill -9 of the engine process
    engine.process.wait()
    lanes_watch_tick()
    assert state_of("qwen") == "serving"  # one failed probe is not yet a verdict
    assert Lane.objects.get(pk=lane.pk).health_failures == 1
    lanes_watch_tick()
    lane.refresh_from_db()
    assert lane.observed_state == "failed"
    assert "refused" in lane.state_reason and "2 failed probe(s)" in lane.state_reason
    event = AuditEvent.objects.filter(action="lane.state", object_id=str(lane.pk)).latest("id")
    assert event.diff["observed_state"] == ["serving", "failed"] and event.diff["seen_by"][1] == "health watcher"

    engine_factory(SIM_QWEN, "--served-model-name", "qwen", port=engine.port)
    lanes_watch_tick()
    lane.refresh_from_db()
    assert lane.observed_state == "serving" and "answers again" in lane.state_reason
    assert AuditEvent.objects.filter(action="lane.state", object_id=str(lane.pk)).count() == 2


def test_an_engine_serving_another_name_is_not_healthy(tmp_path, engine_factory):
    node = sim_node(tmp_path, "spark3")
    engine = engine_factory(SIM_QWEN, "--served-model-name", "other")
    serving_lane("qwen", node, engine.port, state="checking")
    lanes_watch_tick()
    lane = Lane.objects.get(name="qwen")
    assert lane.observed_state == "failed" and "not 'qwen'" in lane.state_reason


def test_checking_lanes_take_the_first_probes_verdict_and_it_is_broadcast(tmp_path, engine_factory):
    node = sim_node(tmp_path, "spark3")
    engine = engine_factory(SIM_QWEN, "--served-model-name", "alive")
    serving_lane("alive", node, engine.port, state="checking")
    serving_lane("gone", node, free_port(), state="checking")
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(DASHBOARD_GROUP, channel)
    lanes_watch_tick()
    assert (state_of("alive"), state_of("gone")) == ("serving", "failed")

    async def receive_lane_states() -> dict[str, str]:  # one event loop: the layer buffers per loop
        seen: dict[str, str] = {}
        while len(seen) < 2:
            message = await asyncio.wait_for(layer.receive(channel), 10)
            if message.get("event") == "lane.state":
                seen[message["data"]["name"]] = message["data"]["observed_state"]
        return seen

    seen = async_to_sync(receive_lane_states)()
    assert seen == {"alive": "serving", "gone": "failed"}


def test_a_stopped_or_starting_lane_is_left_to_its_jobs(tmp_path):
    node = sim_node(tmp_path, "spark3")
    serving_lane("stopped", node, free_port(), state="stopped")
    serving_lane("starting", node, free_port(), state="starting")
    failed = serving_lane("failed-stopped", node, free_port(), state="failed")
    Lane.objects.filter(pk=failed.pk).update(desired_state="stopped")
    assert lanes_watch_tick().lanes == 0
    assert [state_of(n) for n in ("stopped", "starting", "failed-stopped")] == ["stopped", "starting", "failed"]


def test_a_node_that_does_not_answer_goes_unreachable_and_so_do_its_lanes(tmp_path):
    node = sim_node(tmp_path, "spark3")
    lane = serving_lane("qwen", node, free_port())
    (Path(node.sim_dir) / "node.json").unlink()  # the simulated Spark is gone
    with socket.socket() as closed:  # an SSH node whose port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    ssh = Node.objects.create(name="spark9", address="127.0.0.1", ssh_port=port, transport="ssh", state="online")
    lanes_watch_tick()
    assert Node.objects.get(pk=node.pk).state == "online"
    lanes_watch_tick()
    assert Node.objects.get(pk=node.pk).state == "unreachable"
    assert Node.objects.get(pk=ssh.pk).state == "unreachable"
    lane.refresh_from_db()
    assert lane.observed_state == "unreachable" and "node spark3 does not answer" in lane.state_reason
    (Path(node.sim_dir) / "node.json").write_text("{}")
    lanes_watch_tick()
    assert Node.objects.get(pk=node.pk).state == "online"


def test_a_node_in_maintenance_is_not_probed(tmp_path):
    node = sim_node(tmp_path, "spark3")
    Node.objects.filter(pk=node.pk).update(state="maintenance")
    (Path(node.sim_dir) / "node.json").unlink()
    for _ in range(3):
        assert lanes_watch_tick().nodes == 0
    assert Node.objects.get(pk=node.pk).state == "maintenance"


def test_two_ticks_never_run_at_once(tmp_path):
    from django.core.cache import cache

    from lanes.watcher import TICK_LOCK

    cache.add(TICK_LOCK, "1", timeout=30)
    try:
        assert lanes_watch_tick().skipped
    finally:
        cache.delete(TICK_LOCK)
    assert not lanes_watch_tick().skipped
