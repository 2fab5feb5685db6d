"""A large body (gateway.large: parsed in a worker process, forwarded as the client's bytes)
on a full lane: it waits in the same fair queue as a small one, goes before a flooder's
queue, and reaches a lane in priority mode with the gateway's `priority` written into its
bytes (a client's own may lower it, never raise it) — read from its shared-memory file once,
never parsed nor copied whole in the web process."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from django.contrib.auth.models import User

from lanes.models import Lane
from sparksim.standalone import EngineHandle
from tests.conftest import WorkerProcesses, wait_for
from tests.gateway.conftest import SIM_SERVED, create_key, engine_received, set_engine_faults
from tests.gateway.test_fair import hold_and_flood, pool, tags_received, waiting
from tests.gateway.test_fair_headroom import ranked_lane

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["pool"]  # the fixture

PAD = "p" * (300 * 1024)  # over portal.tuning.GATEWAY_LARGE_BODY_BYTES (256 KiB): the large path


def ask_large(url: str, secret: str, tag: str, *, priority: object = None,
              headers: dict[str, str] | None = None) -> httpx.Response:
    body: dict[str, object] = {"model": SIM_SERVED, "max_tokens": 4, "x_pad": PAD,
                               "messages": [{"role": "user", "content": tag}]}
    if priority is not None:
        body["priority"] = priority
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120,
                      headers={"authorization": f"Bearer {secret}", **(headers or {})})


def test_a_large_body_waits_its_fair_turn_and_is_ranked_like_a_small_one(
    engine_factory: Callable[..., EngineHandle], worker_processes: Callable[..., WorkerProcesses],
    key_owner: User, pool: ThreadPoolExecutor,
) -> None:
    ranked, lane = ranked_lane(engine_factory, slots=1)
    # A context the body's length cannot reach: no /tokenize (held too) before the fair queue.
    Lane.objects.filter(pk=lane.pk).update(max_model_len=4 * 1024 * 1024)
    flooder, _ = create_key(key_owner, name="flooder")
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2)
    first, flood = hold_and_flood(pool, ranked, workers, flooder, queued=3)
    large = pool.submit(ask_large, workers.urls[1], agent, "L", priority=-5)  # asks to be raised
    wait_for(lambda: waiting() == 4, what="the agent's large body queued")
    assert tags_received(ranked) == ["B0"]  # a full lane: the large body waits like any other

    set_engine_faults(ranked, hold=False)
    answers = [first.result(), large.result(), *(f.result() for f in flood)]
    assert all(answer.status_code == 200 for answer in answers), [a.text[:200] for a in answers]
    assert tags_received(ranked)[:2] == ["B0", "L"]  # the single request went next
    received = {body["messages"][0]["content"]: body for body in engine_received(ranked)}
    # The gateway's own priority, not the client's -5: a light key within its share while the
    # flooder is active (gateway.fair.engine_priority); the rest as sent.
    assert received["L"]["priority"] == -1 and received["L"]["x_pad"] == PAD

    # Its class and a client's lower priority, as on the small path.
    assert ask_large(workers.urls[0], agent, "LB", headers={"x-spark-priority": "batch"}).status_code == 200
    assert ask_large(workers.urls[0], agent, "L7", priority=7).status_code == 200
    received = {body["messages"][0]["content"]: body.get("priority") for body in engine_received(ranked)}
    assert (received["LB"], received["L7"]) == (2, 7)
