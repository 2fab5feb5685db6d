"""Fair share of a full lane (gateway.fair), behind two real uvicorn worker processes and a
sparksim lane that holds its requests (the `hold` fault) or has few slots: a key's single
request goes before a flooder's queue, weights share the lane, batch waits for interactive
until it ages in, a full queue sheds honestly (503 + retry-after, nothing sent), and a
client that leaves while queued is never sent."""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from gateway.directory import KeyInfo
from gateway.fair import BATCH, INTERACTIVE, request_class, retry_after_s
from gateway.fair_view import lanes_shedding
from gateway.models import RequestLog
from gateway.wire import GatewayError
from lanes.models import Lane
from lanes.replica_health import fair_queue_state
from metrics.alerts import thresholds_from_settings
from metrics.rules import TargetView, firing_rules
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, WorkerProcesses, wait_for
from tests.gateway.conftest import SIM_SERVED, create_key, engine_received, make_lane, set_engine_faults

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=48) as executor:
        yield executor


@pytest.fixture
def engine(engine_factory: Callable[..., EngineHandle]) -> EngineHandle:
    return engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, "--max-num-seqs", "4", time_scale=0.001)


def fair_lane(engine: EngineHandle, slots: int) -> Lane:
    lane = make_lane("qwen", engine.port, served=SIM_SERVED, max_model_len=32768)
    Lane.objects.filter(pk=lane.pk).update(max_num_seqs=4, gateway_slots=slots)
    return lane


def ask(url: str, secret: str, tag: str, *, headers: dict[str, str] | None = None, max_tokens: int = 4,
        timeout: float = 120, stream: bool = False) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=timeout,
                      headers={"authorization": f"Bearer {secret}", **(headers or {})},
                      json={"model": SIM_SERVED, "max_tokens": max_tokens, "stream": stream,
                            "messages": [{"role": "user", "content": tag}]})


def tags_received(engine: EngineHandle) -> list[str]:
    return [body["messages"][0]["content"] for body in engine_received(engine)]


def waiting(index: int = 0) -> int:
    state = fair_queue_state("qwen", index)
    return state["interactive"] + state["batch"]


def hold_and_flood(pool: ThreadPoolExecutor, engine: EngineHandle, workers: WorkerProcesses, flooder: str, *,
                   queued: int) -> tuple[Future[httpx.Response], list[Future[httpx.Response]]]:
    """The engine holds its requests; the flooder's B0 is on the lane (of one slot) and B1..
    `queued` wait in the fair queue."""
    set_engine_faults(engine, hold=True)
    first = pool.submit(ask, workers.urls[0], flooder, "B0")
    wait_for(lambda: tags_received(engine) == ["B0"], what="the flooder's first request on the lane")
    flood = [pool.submit(ask, workers.urls[n % 2], flooder, f"B{n}") for n in range(1, queued + 1)]
    wait_for(lambda: waiting() == queued, what=f"the flooder's {queued} requests queued")
    return first, flood


def test_a_keys_single_request_goes_before_a_flooders_queue(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=1)
    flooder, _ = create_key(key_owner, name="flooder")
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2)
    first, flood = hold_and_flood(pool, engine, workers, flooder, queued=8)
    single = pool.submit(ask, workers.urls[1], agent, "A1", stream=True)
    wait_for(lambda: waiting() == 9, what="the agent's request queued")
    assert tags_received(engine) == ["B0"]  # a full lane: nothing more was sent to the engine

    set_engine_faults(engine, hold=False)
    answers = [first.result(), single.result(), *(f.result() for f in flood)]
    assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
    order = tags_received(engine)
    assert order[:2] == ["B0", "A1"], order  # the single request went next
    assert sorted(order) == sorted(["A1", *(f"B{n}" for n in range(9))])  # each once
    assert "data: [DONE]" in single.result().text
    # Its wait is in its TTFT and logged apart as queue wait.
    request_id = single.result().headers["x-request-id"]
    wait_for(lambda: RequestLog.objects.filter(request_id=request_id).exists(), what="the agent's log row")
    row = RequestLog.objects.get(request_id=request_id)
    assert row.queue_ms is not None and row.queue_ms > 0 and row.priority == INTERACTIVE
    assert row.ttft_ms is not None and row.ttft_ms >= row.queue_ms


def flood_until(pool: ThreadPoolExecutor, urls: list[str], secrets: dict[str, str], *, per_key: int,
                total: int) -> Counter[str]:
    """Each key keeps `per_key` requests in flight (closed loop) until `total` are answered."""
    done: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def loop(name: str, n: int) -> None:
        with httpx.Client(base_url=urls[n % 2], timeout=120,
                          headers={"authorization": f"Bearer {secrets[name]}"}) as client:  # kept alive
            while not stop.is_set():
                answer = client.post("/v1/chat/completions", json={
                    "model": SIM_SERVED, "max_tokens": 8, "messages": [{"role": "user", "content": f"{name}{n}"}]})
                assert answer.status_code == 200, answer.text
                count(name)

    def count(name: str) -> None:
        with lock:
            if stop.is_set():
                return  # the queue draining after the run, in whatever order is left: not a share
            done[name] += 1
            if sum(done.values()) >= total:
                stop.set()

    loops: list[Future[None]] = [pool.submit(loop, name, n) for name in secrets for n in range(per_key)]
    for future in loops:
        future.result()
    return done


def test_weights_two_to_one_share_a_full_lane_two_to_one(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=2)
    heavy, heavy_id = create_key(key_owner, name="heavy")
    light, _ = create_key(key_owner, name="light")
    from gateway.models import ApiKey

    ApiKey.objects.filter(pk=heavy_id).update(fair_weight=2)
    workers = worker_processes(2)
    # Each request holds its slot a while: the lane, not the test's clients, is the bottleneck.
    # Many requests of each key outstanding: both keys always have some queued, even when this
    # test's own clients are slow to send the next one (a loaded machine).
    set_engine_faults(engine, latency_s=0.12)
    done = flood_until(pool, workers.urls, {"H": heavy, "L": light}, per_key=16, total=240)
    share = done["H"] / done["L"]
    assert 1.8 <= share <= 2.2, done


def test_batch_never_runs_while_interactive_waits(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=1)
    agent, _ = create_key(key_owner, name="agent")
    nightly, nightly_id = create_key(key_owner, name="nightly")
    from gateway.models import ApiKey

    ApiKey.objects.filter(pk=nightly_id).update(priority=BATCH)
    workers = worker_processes(2)
    set_engine_faults(engine, hold=True)
    first = pool.submit(ask, workers.urls[0], agent, "I0")
    wait_for(lambda: tags_received(engine) == ["I0"], what="the first request on the lane")
    batch = [pool.submit(ask, workers.urls[0], nightly, "X1"),
             pool.submit(ask, workers.urls[1], agent, "X2", headers={"x-spark-priority": "batch"})]
    wait_for(lambda: fair_queue_state("qwen", 0)["batch"] == 2, what="two batch requests queued")
    interactive = [pool.submit(ask, workers.urls[n % 2], agent, f"I{n}") for n in range(1, 4)]
    # A batch key cannot raise its class by header: it stays batch.
    interactive.append(pool.submit(ask, workers.urls[1], nightly, "X3", headers={"x-spark-priority": "interactive"}))
    wait_for(lambda: fair_queue_state("qwen", 0) == {"held": 1, "interactive": 3, "batch": 3, "shed": 0},
             what="three interactive and three batch requests queued")
    set_engine_faults(engine, hold=False)
    assert all(f.result().status_code == 200 for f in [first, *batch, *interactive])
    order = tags_received(engine)
    assert set(order[:4]) == {"I0", "I1", "I2", "I3"} and set(order[4:]) == {"X1", "X2", "X3"}, order


def test_a_batch_request_ages_in_ahead_of_interactive(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=1)
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2, env={"PORTAL_GATEWAY_FAIR_BATCH_AGING_S": "1"})
    set_engine_faults(engine, hold=True)
    first = pool.submit(ask, workers.urls[0], agent, "I0")
    wait_for(lambda: tags_received(engine) == ["I0"], what="the first request on the lane")
    old = pool.submit(ask, workers.urls[1], agent, "X1", headers={"x-spark-priority": "batch"})
    wait_for(lambda: fair_queue_state("qwen", 0)["batch"] == 1, what="the batch request queued")
    since = RedisClock.now_ms()
    wait_for(lambda: RedisClock.now_ms() - since > 1500, what="the batch request's aging bound to pass")
    later = [pool.submit(ask, workers.urls[n % 2], agent, f"I{n}") for n in range(1, 3)]
    wait_for(lambda: fair_queue_state("qwen", 0)["interactive"] == 2, what="interactive requests queued")
    set_engine_faults(engine, hold=False)
    assert all(f.result().status_code == 200 for f in [first, old, *later])
    assert tags_received(engine)[:2] == ["I0", "X1"]  # aged: it went before the interactive ones


class RedisClock:
    """Redis's own clock (the scripts' time), so the test waits on the condition they see."""

    @staticmethod
    def now_ms() -> int:
        import redis
        from django.conf import settings

        seconds, micros = redis.Redis.from_url(settings.REDIS_URL).time()
        return int(seconds * 1000 + micros // 1000)


def test_a_full_queue_sheds_with_503_and_retry_after_before_any_upstream_call(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=1)
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2, env={"PORTAL_GATEWAY_FAIR_MAX_QUEUE": "2", "PORTAL_GATEWAY_FAIR_MAX_WAIT_S": "4"})
    set_engine_faults(engine, hold=True)
    first = pool.submit(ask, workers.urls[0], agent, "R0")
    wait_for(lambda: tags_received(engine) == ["R0"], what="the first request on the lane")
    queued = [pool.submit(ask, workers.urls[n % 2], agent, f"Q{n}") for n in range(2)]
    wait_for(lambda: waiting() == 2, what="two requests queued")
    shed = ask(workers.urls[1], agent, "S1")
    assert shed.status_code == 503, shed.text
    error = shed.json()["error"]
    assert error["code"] == "server_busy" and "full" in error["message"]
    assert int(shed.headers["retry-after"]) >= 1
    # The two queued ones wait past the bound: 503 too, and given up, never sent.
    for future in queued:
        answer = future.result()
        assert answer.status_code == 503 and answer.json()["error"]["code"] == "server_busy", answer.text
        assert "waited" in answer.json()["error"]["message"]
    assert waiting() == 0 and fair_queue_state("qwen", 0)["shed"] == 3
    set_engine_faults(engine, hold=False)
    assert first.result().status_code == 200
    after = ask(workers.urls[0], agent, "R1")
    assert after.status_code == 200
    assert tags_received(engine) == ["R0", "R1"]  # nothing of the shed requests reached the engine
    see_the_shedding(key_owner)


def see_the_shedding(admin: User) -> None:
    """The gateway page, the lane page, /metrics and the alerts show what was shed."""
    wait_for(lambda: RequestLog.objects.filter(error_code="server_busy").count() == 3, what="the shed rows")
    client = Client()
    client.force_login(admin)
    page = client.get("/gateway/?lane=qwen").content.decode()
    assert '<tr data-lane="qwen" data-key="agent" data-priority="interactive">' in page
    row = page.split('data-key="agent"', 1)[1].split("</tr>", 1)[0]
    assert '<strong class="text-danger">3</strong>' in row  # shed, in the waits table
    lane_page = client.get("/lanes/qwen/").content.decode()
    assert 'id="lane-fair-queue"' in lane_page and '<strong class="text-danger">3</strong>' in lane_page
    with override_settings(METRICS_TOKEN="t"):
        text = client.get("/metrics", HTTP_AUTHORIZATION="Bearer t").content.decode()
    shed = {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == "spark_gateway_queue_shed_total"}
    assert shed == {(("lane", "qwen"), ("replica", "0")): 3.0}
    assert lanes_shedding() == {"qwen": 3}
    firing = firing_rules([TargetView(kind="lane", name="qwen", figures={}, consecutive_failures=0, shed=3)],
                          thresholds_from_settings())
    assert [f.rule for f in firing] == ["lane_shedding"]


def test_a_client_that_leaves_while_queued_is_never_sent(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=1)
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2)
    set_engine_faults(engine, hold=True)
    first = pool.submit(ask, workers.urls[0], agent, "R0")
    wait_for(lambda: tags_received(engine) == ["R0"], what="the first request on the lane")

    leavers = [send_raw(workers.urls[1], agent, "L1", stream=True), send_raw(workers.urls[0], agent, "L2", stream=False)]
    wait_for(lambda: waiting() == 2, what="two requests queued")
    for connection in leavers:
        connection.close()  # before any answer: the client is gone
    wait_for(lambda: waiting() == 0, what="the leavers' places given back")
    set_engine_faults(engine, hold=False)
    assert first.result().status_code == 200
    assert ask(workers.urls[1], agent, "R1").status_code == 200
    assert tags_received(engine) == ["R0", "R1"]
    wait_for(lambda: RequestLog.objects.filter(status=499).count() == 2, what="the leavers' log rows")
    assert set(RequestLog.objects.filter(status=499).values_list("error_code", flat=True)) == {"client_disconnected"}


def send_raw(url: str, secret: str, tag: str, *, stream: bool) -> socket.socket:
    """A request written on a socket of the test's own, so the test decides when the client leaves."""
    body = json.dumps({"model": SIM_SERVED, "max_tokens": 4, "stream": stream,
                       "messages": [{"role": "user", "content": tag}]}).encode()
    host, port = url.removeprefix("http://").split(":")
    connection = socket.create_connection((host, int(port)))
    connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: " + host.encode() + b"\r\n"
                       b"authorization: Bearer " + secret.encode() + b"\r\ncontent-type: application/json\r\n"
                       b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    return connection


def test_a_lane_far_from_full_still_counts_every_slot(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    """Under half of many slots, a request does not wait for Redis; its slot is counted there all the same."""
    fair_lane(engine, slots=8)
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2)
    set_engine_faults(engine, hold=True)
    held = [pool.submit(ask, workers.urls[n % 2], agent, f"R{n}") for n in range(3)]
    wait_for(lambda: len(tags_received(engine)) == 3, what="three requests on the lane")
    wait_for(lambda: fair_queue_state("qwen", 0)["held"] == 3, what="their slots counted in Redis")
    set_engine_faults(engine, hold=False)
    assert all(f.result().status_code == 200 for f in held)
    wait_for(lambda: fair_queue_state("qwen", 0)["held"] == 0, what="their slots given back")


def test_affinity_picks_the_replica_and_its_queue_holds_the_conversation(
    engine_factory: Callable[..., EngineHandle], worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    from tests.gateway.test_replicas import make_replicated_lane

    engines = [engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, time_scale=0.001) for _ in range(2)]
    make_replicated_lane("qwen", [e.port for e in engines])
    Lane.objects.filter(name="qwen").update(gateway_slots=1)
    agent, _ = create_key(key_owner, name="agent")
    workers = worker_processes(2)
    for e in engines:
        set_engine_faults(e, hold=True)
    first = pool.submit(ask, workers.urls[0], agent, "conversation X")
    wait_for(lambda: sum(len(engine_received(e)) for e in engines) == 1, what="the first turn on a replica")
    home = next(index for index, e in enumerate(engines) if engine_received(e))
    # The same conversation again: within the load bound its replica keeps it, so it waits there.
    second = pool.submit(ask, workers.urls[1], agent, "conversation X")
    wait_for(lambda: fair_queue_state("qwen", home)["interactive"] == 1, what="the second turn queued at home")
    assert fair_queue_state("qwen", 1 - home) == {"held": 0, "interactive": 0, "batch": 0, "shed": 0}
    for e in engines:
        set_engine_faults(e, hold=False)
    assert first.result().status_code == 200 and second.result().status_code == 200
    assert int(second.result().headers["x-spark-lane-replica"]) == home
    assert len(engine_received(engines[home])) == 2 and not engine_received(engines[1 - home])


def key(priority: str = INTERACTIVE) -> KeyInfo:
    return KeyInfo(id=1, name="k", secret_hash="h", allowed_lanes=None, default_lane=None, rpm=0, tpm=0,
                   max_parallel=0, log_prompts=False, expires_at=None, revoked=False,
                   priority=priority)


def test_a_request_may_lower_its_class_never_raise_it() -> None:
    assert request_class(key(), None) == INTERACTIVE
    assert request_class(key(), b"batch") == BATCH
    assert request_class(key(BATCH), b"interactive") == BATCH
    assert request_class(key(BATCH), None) == BATCH
    with pytest.raises(GatewayError) as caught:
        request_class(key(), b"urgent")
    assert caught.value.status == 400 and caught.value.param == "x-spark-priority"


def test_retry_after_comes_from_the_queue() -> None:
    assert retry_after_s(waiting=40, slots=4, mean_slot_ms=6000) == 60  # 10 rounds of a 6 s slot
    assert retry_after_s(waiting=1, slots=4, mean_slot_ms=0) == 1  # nothing known yet: a second
    assert retry_after_s(waiting=10_000, slots=1, mean_slot_ms=60_000) == 300  # bounded
