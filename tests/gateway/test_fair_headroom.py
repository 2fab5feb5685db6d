"""The fair queue's headroom (gateway.fair_lua): while a light key is active but idle, a
flooder holds at most slots − 1 of a replica, so the light key's next request starts at
once — an engine never evicts a running request to admit a waiting one; with the light key
gone quiet the flooder has every slot. A lane in priority mode gets the gateway's `priority`."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.contrib.auth.models import User

from gateway.fair import BATCH, INTERACTIVE, engine_priority
from lanes.models import Lane
from lanes.replica_health import fair_queue_state
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, WorkerProcesses, wait_for
from tests.gateway.conftest import SIM_SERVED, create_key, engine_received, set_engine_faults
from tests.gateway.test_fair import ask, engine, fair_lane, pool, tags_received, waiting

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["engine", "pool"]  # the fixtures


def test_a_flooder_leaves_a_slot_for_an_active_key_and_takes_all_when_alone(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=4)
    flooder, _ = create_key(key_owner, name="flooder")
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2, env={"PORTAL_GATEWAY_FAIR_ACTIVE_S": "30"})
    # The agent has not been seen: the flooder alone gets all four slots.
    set_engine_faults(engine, hold=True)
    alone = [pool.submit(ask, workers.urls[n % 2], flooder, f"F{n}") for n in range(6)]
    wait_for(lambda: len(tags_received(engine)) == 4 and waiting() == 2, what="four on the lane, two queued")
    set_engine_faults(engine, hold=False)
    assert all(f.result().status_code == 200 for f in alone)

    assert ask(workers.urls[0], agent, "A0").status_code == 200  # the agent is active now, and idle
    set_engine_faults(engine, hold=True)
    flood = [pool.submit(ask, workers.urls[n % 2], flooder, f"B{n}") for n in range(6)]
    wait_for(lambda: waiting() == 3, what="the flooder's requests past three queued")
    assert fair_queue_state("qwen", 0)["held"] == 3
    assert len([tag for tag in tags_received(engine) if tag.startswith("B")]) == 3
    # The kept slot: the agent's next request goes to the engine at once, past the flooder's queue.
    single = pool.submit(ask, workers.urls[1], agent, "A1")
    wait_for(lambda: "A1" in tags_received(engine), what="the agent's request on the lane")
    assert waiting() == 3 and fair_queue_state("qwen", 0)["held"] == 4
    set_engine_faults(engine, hold=False)
    assert all(f.result().status_code == 200 for f in [single, *flood])
    assert sorted(t for t in tags_received(engine) if t.startswith("B")) == [f"B{n}" for n in range(6)]


def ranked_lane(engine_factory: Callable[..., EngineHandle], *, slots: int) -> tuple[EngineHandle, Lane]:
    """A lane of `slots` slots in priority mode, on an engine run with `--scheduling-policy priority`."""
    ranked = engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, "--max-num-seqs", "4",
                            "--scheduling-policy", "priority", time_scale=0.001)
    lane = fair_lane(ranked, slots=slots)
    Lane.objects.filter(pk=lane.pk).update(scheduling_policy="priority")
    return ranked, lane


def test_a_lane_in_priority_mode_gets_the_gateways_priority_a_client_may_only_lower_it(
    engine_factory: Callable[..., EngineHandle], engine: EngineHandle,
    worker_processes: Callable[..., WorkerProcesses], key_owner: User,
) -> None:
    ranked, lane = ranked_lane(engine_factory, slots=4)
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2)
    url = workers.urls[0]
    assert ask(url, agent, "plain").status_code == 200
    assert ask(url, agent, "batch", headers={"x-spark-priority": "batch"}).status_code == 200
    for tag, asked in (("raise", -5), ("lower", 7), ("odd", "high")):
        answer = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {agent}"}, json={
            "model": SIM_SERVED, "max_tokens": 2, "priority": asked, "messages": [{"role": "user", "content": tag}]})
        assert answer.status_code == 200, answer.text
    sent = {body["messages"][0]["content"]: body.get("priority") for body in engine_received(ranked)}
    assert sent == {"plain": 0, "batch": 2, "raise": 0, "lower": 7, "odd": 0}

    # A lane in fcfs mode (vLLM refuses a non-zero priority there): the client's field is not sent.
    Lane.objects.filter(pk=lane.pk).update(scheduling_policy="fcfs", api_port=engine.port)
    workers = worker_processes(1)
    answer = httpx.post(f"{workers.urls[0]}/v1/chat/completions", headers={"authorization": f"Bearer {agent}"},
                        json={"model": SIM_SERVED, "max_tokens": 2, "priority": 3,
                              "messages": [{"role": "user", "content": "fcfs"}]})
    assert answer.status_code == 200, answer.text
    assert [body.get("priority", "absent") for body in engine_received(engine)] == ["absent"]


def test_a_flow_over_its_equal_share_gets_a_worse_engine_priority() -> None:
    assert engine_priority(INTERACTIVE) == 0 and engine_priority(BATCH) == 2
    assert engine_priority(INTERACTIVE, held=3, active=2, slots=4) == 1  # over 4 / 2
    # Within its share while another flow is active: ahead of what a flooder started alone (0).
    assert engine_priority(INTERACTIVE, held=2, active=2, slots=4) == -1
    assert engine_priority(INTERACTIVE, held=1, active=2, slots=4) == -1
    assert engine_priority(INTERACTIVE, held=1, active=1, slots=4) == 0  # alone: 0, as before others came
    assert engine_priority(BATCH, held=1, active=2, slots=4) == 2  # batch never goes ahead of interactive's 0
    assert engine_priority(BATCH, held=4, active=1, slots=4) == 2  # alone: its share is the lane
