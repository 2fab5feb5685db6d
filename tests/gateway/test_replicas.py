"""A lane of several sparksim replicas behind two real uvicorn worker processes: a
conversation stays on one replica whichever worker takes its requests; a replica that dies
loses only its own conversations, to the others, with no request reaching an engine twice;
what one worker (or the health watcher) learns of a replica, every worker knows."""

from __future__ import annotations

import asyncio
import socket
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from django.contrib.auth.models import User
from django.test import Client

from gateway.directory import LaneInfo, ReplicaInfo
from gateway.loops import stop_loop
from gateway.models import RequestLog
from gateway.replicas import SharedHealth, affinity_key
from lanes.models import Lane, LaneNode, LaneReplica, Node
from lanes.replica_health import replica_skipped_until
from lanes.watcher import lanes_watch_tick
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, WorkerProcesses, wait_for
from tests.gateway.conftest import SIM_SERVED, FreezableProxy, create_key, engine_received, run_async, unused_port
from tests.subprocess_settings import subprocess_settings

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = "You are a careful coding assistant working in a large repository."


def make_replicated_lane(name: str, ports: list[int]) -> Lane:
    lane = Lane.objects.create(
        name=name, model_id="Qwen/Qwen3.8-27B-FP8", served_model_name=SIM_SERVED,
        image="vllm/vllm-openai@sha256:" + "0" * 64, api_port=ports[0], max_model_len=32768,
        observed_state="serving", desired_state="serving")
    for index, port in enumerate(ports):
        node = Node.objects.create(name=f"sim-{name}-r{index}", address="127.0.0.1", transport="local")
        LaneReplica.objects.create(lane=lane, index=index, api_port=port, observed_state="serving")
        LaneNode.objects.create(lane=lane, node=node, replica=index, rank=0)
    return lane


class Conversation:
    def __init__(self, number: int) -> None:
        self.number = number
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"Conversation {number}: refactor the billing module, part {number}."}]
        self.replicas: list[int] = []

    def send(self, url: str, secret: str) -> httpx.Response:
        response = httpx.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"},
                              json={"model": SIM_SERVED, "messages": self.messages, "max_tokens": 6}, timeout=60)
        assert response.status_code == 200, response.text
        self.replicas.append(int(response.headers["x-spark-lane-replica"]))
        answer = response.json()["choices"][0]["message"]["content"]
        self.messages += [{"role": "assistant", "content": answer},
                          {"role": "user", "content": f"Continue with step {len(self.replicas)}."}]
        return response

    def owns(self, body: Any) -> bool:
        return isinstance(body, dict) and body.get("messages", [{}, {}])[1].get("content") == self.messages[1]["content"]


@pytest.fixture
def replica_engines(engine_factory: Callable[..., EngineHandle]) -> Callable[[int], list[EngineHandle]]:
    def start(count: int) -> list[EngineHandle]:
        return [engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, time_scale=0.001) for _ in range(count)]

    return start


def owner_counts(engines: list[EngineHandle], conversations: list[Conversation]) -> dict[int, Counter[int]]:
    """Per engine: how many requests of each conversation reached it."""
    counts: dict[int, Counter[int]] = {}
    for index, engine in enumerate(engines):
        counts[index] = Counter(c.number for body in engine_received(engine) for c in conversations if c.owns(body))
    return counts


@pytest.mark.parametrize("replicas", [2, 3])
def test_a_conversation_lands_on_one_replica_whichever_worker_takes_it(
    replicas: int, replica_engines: Callable[[int], list[EngineHandle]], worker_processes: Callable[..., WorkerProcesses],
    key_owner: User,
) -> None:
    engines = replica_engines(replicas)
    make_replicated_lane("qwen", [engine.port for engine in engines])
    secret, _ = create_key(key_owner)
    workers = worker_processes(2)
    conversations = [Conversation(number) for number in range(8)]
    request_ids: dict[str, int] = {}
    for turn in range(3):
        for conversation in conversations:  # each conversation alternates between the two workers
            response = conversation.send(workers.urls[(conversation.number + turn) % 2], secret)
            request_ids[response.headers["x-request-id"]] = conversation.replicas[-1]

    assert all(len(set(c.replicas)) == 1 for c in conversations), [c.replicas for c in conversations]
    assert len({c.replicas[0] for c in conversations}) >= 2  # the conversations are spread over replicas
    # What each engine received: every turn of its own conversations, once, and nothing else.
    counts = owner_counts(engines, conversations)
    for conversation in conversations:
        home = conversation.replicas[0]
        assert counts[home][conversation.number] == 3
        assert all(counts[other][conversation.number] == 0 for other in counts if other != home)
    assert sum(len(engine_received(engine)) for engine in engines) == 24
    # The request log names the replica of each request.
    wait_for(lambda: RequestLog.objects.filter(request_id__in=request_ids).count() == 24, timeout=30,
             what="the workers' request log rows")
    logged = dict(RequestLog.objects.filter(request_id__in=request_ids).values_list("request_id", "replica"))
    assert logged == request_ids
    admin = Client()
    admin.force_login(key_owner)
    listed = {row["request_id"]: row["replica"] for row in admin.get("/api/gateway/requests?limit=100").json()}
    assert {rid: listed[rid] for rid in request_ids if rid in listed} == {
        rid: replica for rid, replica in request_ids.items() if rid in listed} and listed


@pytest.mark.parametrize("replicas", [2, 3])
def test_killing_a_replica_moves_its_conversations_to_the_others_and_nothing_is_sent_twice(
    replicas: int, replica_engines: Callable[[int], list[EngineHandle]], worker_processes: Callable[..., WorkerProcesses],
    key_owner: User,
) -> None:
    engines = replica_engines(replicas)
    make_replicated_lane("qwen", [engine.port for engine in engines])
    secret, _ = create_key(key_owner)
    # The first refused connection opens the replica's breaker, for longer than the test.
    workers = worker_processes(2, env=subprocess_settings(GATEWAY_BREAKER_FAILURES=1, GATEWAY_BREAKER_COOLDOWN_S=600))
    conversations = [Conversation(number) for number in range(8)]
    for conversation in conversations:
        conversation.send(workers.urls[conversation.number % 2], secret)
    killed = conversations[0].replicas[0]
    engines[killed].stop()
    # Hold the dead engine's port (bound, not listening: connections are refused), so no
    # other test's server can start on it meanwhile.
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", engines[killed].port))
    live = [index for index in range(replicas) if index != killed]
    before = {index: len(engine_received(engines[index])) for index in live}

    fresh = [Conversation(number) for number in range(100, 108)]
    sent = 0
    for turn in range(2):
        for conversation in conversations + fresh:
            conversation.send(workers.urls[(conversation.number + turn) % 2], secret)
            sent += 1

    assert all(killed not in c.replicas[-2:] for c in conversations + fresh)
    # A conversation whose replica lives stays there (a consistent hash moves only the dead one's).
    for conversation in conversations:
        if conversation.replicas[0] != killed:
            assert set(conversation.replicas) == {conversation.replicas[0]}
        else:
            assert len(set(conversation.replicas[1:])) == 1  # it moved once, then stayed
    # Every request after the kill reached exactly one live engine, once.
    after = {index: len(engine_received(engines[index])) - before[index] for index in live}
    assert sum(after.values()) == sent
    answered = Counter(c.replicas[-1] for c in conversations + fresh) + Counter(
        c.replicas[-2] for c in conversations + fresh)
    assert {index: answered[index] for index in live} == after
    # The worker that found it dead told every worker (and the page) through Redis.
    assert replica_skipped_until("qwen", killed) is not None
    blocker.close()


def lane_info(states: tuple[str, ...] = ("serving", "serving")) -> LaneInfo:
    return LaneInfo(name="qwen", public_model_name="qwen", observed_state="serving", context_limit=4096,
                    fallback=None, replicas=tuple(ReplicaInfo(index, f"http://127.0.0.1:{9000 + index}", state)
                                                  for index, state in enumerate(states)))


def test_breakers_and_in_flight_counts_are_shared_by_every_worker(settings: Any) -> None:
    settings.GATEWAY_BREAKER_FAILURES = 2
    lane = lane_info()
    key = affinity_key({"messages": [{"role": "user", "content": "hello"}]})

    async def scenario() -> None:
        clients = [aioredis.from_url(settings.REDIS_URL) for _ in range(2)]
        first, second = SharedHealth(clients[0]), SharedHealth(clients[1])
        try:
            for _ in range(3):
                first.acquire("qwen", 0)
            await first.sync()
            await second.sync()
            assert second.load("qwen", 0) == 3 and second.load("qwen", 1) == 0
            first.release("qwen", 0)
            await first.sync()
            await second.sync()
            assert second.load("qwen", 0) == 2

            breaker = first.breaker("qwen", 1)
            breaker.record_failure()
            breaker.record_failure()  # opens: written to Redis for everyone
            await asyncio.gather(*first.background)
            await second.sync()
            assert not second.available("qwen", lane.replicas[1])
            assert [r.index for r in second.order(lane, key)] == [0]
            assert not second.breaker("qwen", 1).allows()

            first.breakers["qwen|1"].opened_at = -1e9  # the cool-down is over: one probe, and it answers
            first.open_until["qwen|1"] = time.time() - 1
            assert breaker.allows()
            breaker.record_success()
            await asyncio.gather(*first.background)
            await second.sync()
            assert second.available("qwen", lane.replicas[1])
        finally:
            await first.close()
            await second.close()
            for client in clients:
                await client.aclose()

    run_async(scenario)


async def eventually(predicate: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll `predicate` on the loop until true; the deadline is for a loaded machine, not a
    measure of speed."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


def test_a_stalled_redis_does_not_stop_the_shared_health_for_good(settings: Any) -> None:
    """A worker's health sync that hangs on a Redis that stopped answering gives up (redis-py's
    socket timeout: 5 s by default in the pinned redis-py) and reconnects: once Redis answers again,
    the worker sees another worker's breaker. Without a bound it would wait on the lost answer
    forever, and every worker's view of the others would freeze (the deadline below, far past the
    timeout, would pass)."""
    settings.GATEWAY_HEALTH_SYNC_S = 0.05
    settings.GATEWAY_BREAKER_FAILURES = 1
    lane = lane_info()

    async def scenario() -> tuple[bool, int, int]:
        proxy = FreezableProxy(settings.REDIS_URL)
        port = await proxy.start()
        database = settings.REDIS_URL.rsplit("/", 1)[1]
        stalled_client = aioredis.from_url(f"redis://127.0.0.1:{port}/{database}")
        direct_client = aioredis.from_url(settings.REDIS_URL)
        watcher, other = SharedHealth(stalled_client), SharedHealth(direct_client)
        try:
            watcher.breaker("qwen", 0)  # starts its sync loop
            await eventually(lambda: watcher.synced_at > 0, "the watcher's first sync through the proxy")
            proxy.frozen = True
            await eventually(lambda: proxy.swallowed > 0, "a sync waiting on an answer that was swallowed")
            connections = proxy.connections
            other.breaker("qwen", 1).record_failure()  # opens, shared through the real Redis
            await asyncio.gather(*other.background)
            seen_while_stalled = not watcher.available("qwen", lane.replicas[1])
            proxy.frozen = False
            await eventually(lambda: not watcher.available("qwen", lane.replicas[1]),
                             "the watcher to see the other worker's breaker once Redis answers")
            return seen_while_stalled, connections, proxy.connections
        finally:
            await watcher.close()
            await other.close()
            await stalled_client.aclose()
            await direct_client.aclose()
            proxy.close()

    seen_while_stalled, connections_when_stalled, connections_after = run_async(scenario)
    assert not seen_while_stalled  # the stall is real: nothing came through it
    assert connections_after > connections_when_stalled  # it gave up the stalled connection


def test_closing_stops_a_health_loop_whose_cancellation_was_swallowed(settings: Any) -> None:
    """A library that turns a CancelledError into an ordinary error while it cleans up (the
    loop catches those to survive Redis restarts) must not leave close() waiting forever:
    the loop also checks a stop flag, and the wait is bounded."""
    settings.GATEWAY_HEALTH_SYNC_S = 0.05

    async def scenario() -> tuple[bool, int]:
        client = aioredis.from_url(settings.REDIS_URL)
        health = SharedHealth(client)
        cancelled = 0

        entered = asyncio.Event()

        async def sync_that_swallows() -> None:
            nonlocal cancelled
            entered.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled += 1
                raise ConnectionError("Connection closed by server.") from None

        health.sync = sync_that_swallows  # type: ignore[method-assign]
        try:
            health.breaker("qwen", 0)  # starts the loop
            await asyncio.wait_for(entered.wait(), timeout=60)  # the loop is inside the sync
            await asyncio.wait_for(health.close(), timeout=20)
            return health._task is not None and health._task.done(), cancelled
        finally:
            await client.aclose()

    done, cancelled = run_async(scenario)
    assert done and cancelled >= 1


def test_stop_loop_cancels_again_until_the_task_ends() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        swallowed = 0

        waiting = asyncio.Event()

        async def stubborn() -> None:
            nonlocal swallowed
            while True:
                waiting.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    swallowed += 1
                    if swallowed < 3:
                        continue  # swallowed twice, then it gives in
                    raise

        task = asyncio.create_task(stubborn())
        await waiting.wait()
        return await stop_loop(task, "test loop", grace_s=5), task.cancelled(), swallowed

    assert run_async(scenario) == (True, True, 3)


def test_the_health_watcher_verdicts_reach_the_gateways(
    replica_engines: Callable[[int], list[EngineHandle]], settings: Any,
) -> None:
    settings.LANES_WATCH_FAILURES = 1
    (engine,) = replica_engines(1)
    dead = unused_port()
    lane = make_replicated_lane("qwen", [engine.port, dead])
    Node.objects.update(state="maintenance")  # only the replicas are probed here
    assert lanes_watch_tick().changes >= 1
    assert replica_skipped_until("qwen", 1) is not None
    assert replica_skipped_until("qwen", 0) is None
    row = LaneReplica.objects.get(lane=lane, index=1)
    assert row.observed_state == "failed" and "refused" in row.state_reason
    lane.refresh_from_db()
    assert lane.observed_state == "serving"  # one replica serving: the lane serves

    async def seen_by_a_worker() -> list[int]:
        client = aioredis.from_url(settings.REDIS_URL)
        health = SharedHealth(client)
        try:
            await health.sync()
            return [r.index for r in health.order(lane_info(), None)]
        finally:
            await health.close()
            await client.aclose()

    assert run_async(seen_by_a_worker) == [0]


def test_each_sparksim_engine_keeps_its_own_prefix_cache(
    replica_engines: Callable[[int], list[EngineHandle]],
) -> None:
    first, second = replica_engines(2)
    body = {"model": SIM_SERVED, "max_tokens": 2, "messages": [{"role": "user", "content": "word " * 400}]}

    def hits(engine: EngineHandle) -> float:
        text = httpx.get(f"{engine.url}/metrics").text
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("vllm:prefix_cache_hits_total"))

    for _ in range(2):
        httpx.post(f"{first.url}/v1/chat/completions", json=body, timeout=30).raise_for_status()
    assert hits(first) > 0
    httpx.post(f"{second.url}/v1/chat/completions", json=body, timeout=30).raise_for_status()
    assert hits(second) == 0
