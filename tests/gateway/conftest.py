"""Gateway fixtures: sparksim engines for the happy paths, the hand-written counting upstream
(tests/gateway/upstreams.py) for the faults sparksim cannot make, lanes pointing at them, API
keys, and the real ASGI app under uvicorn (tests.conftest.asgi_server) in front."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
import redis
from django.conf import settings
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families

from gateway import shared_files as shared
from gateway.large_pool import HELD, POOL
from gateway.pace import PACE
from gateway.services import api_key_create
from lanes.models import Lane, LaneNode, Node
from sparksim.standalone import EngineHandle, start_engine
from tests.conftest import SIM_QWEN, AsgiServer, free_port, wait_for
from tests.gateway.redis_server import RedisServer
from tests.gateway.upstreams import CountingUpstream

T = TypeVar("T")


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on its own event loop in its own thread. Async test functions are
    avoided here: the session's Playwright browser (tests/e2e) keeps an event loop running
    in the main thread, and pytest-asyncio cannot start one after it in the same worker."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(make())
        except BaseException as exc:  # re-raised in the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def clean_gateway_redis() -> Iterator[None]:
    """Limits, idempotency records and revocation markers are keyed by key id, which a
    fresh test database reuses: start every test from an empty namespace."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    for key in client.scan_iter(f"{settings.REDIS_PREFIX}:gw:*"):
        client.delete(key)
    yield


def shared_files() -> list[str]:
    """The shared-memory body files of this process (gateway.shared_files), by name."""
    with contextlib.suppress(FileNotFoundError):  # a test may point SHARED_DIR at nothing
        return [name for name in os.listdir(shared.SHARED_DIR)
                if name.startswith(f"{shared.SHARED_PREFIX}{os.getpid()}-")]
    return []


@dataclass
class LargeBodyState:
    """This process's large-body singletons as a test finds them: the pool's bound, the
    held bytes and the pace fresh, and idle shared-memory files of its own (`files`)."""

    files: shared.SharedFiles
    simulated: int = 0  # bodies the test pretends are in the pool

    def simulate_pending(self, count: int) -> None:
        """As if `count` large bodies besides the test's own were being inspected."""
        POOL.pending += count - self.simulated
        self.simulated = count


@pytest.fixture(autouse=True)
def large_body_state() -> Iterator[LargeBodyState]:
    """gateway.large_pool's HELD and POOL (with what each key holds of them),
    gateway.shared_files' SHARED_FILES and gateway.pace's PACE are per process, shared by
    every test of a pytest worker: each test starts from a fresh state, and afterwards
    everything its bodies took must have been given back (the requests have ended: the
    server fixtures stop first), then the state is reset for the next. The pool's worker
    processes stay (they keep nothing between bodies, and take a while to spawn)."""
    POOL.pending, HELD.held, PACE.paid_until = 0, 0, 0.0
    POOL.flows.clear()
    HELD.flows.clear()
    files_before = set(shared_files())
    original, shared.SHARED_FILES = shared.SHARED_FILES, shared.SharedFiles()
    state = LargeBodyState(shared.SHARED_FILES)
    try:
        yield state
        wait_for(lambda: POOL.pending == state.simulated, timeout=30, what="the pool's bodies to finish")
        wait_for(lambda: HELD.held == 0, timeout=30, what="every large body's held bytes to be given back")
        assert not POOL.flows.held and not HELD.flows.held  # and every key's share of them
        # Bodies still referenced (a mirror replay ending, a caught error's traceback) come
        # back to `files` later, a cycle's at a collection: closed, it removes them as they do.
        # The collection only when some are left: with the whole suite imported it costs
        # 0.3-1 s, and most tests leave none.
        state.files.close()
        if not set(shared_files()) <= files_before:
            gc.collect()
        wait_for(lambda: set(shared_files()) <= files_before, timeout=30, what="the test's shared files removed")
    finally:
        state.files.close()
        shared.SHARED_FILES = original
        POOL.pending, HELD.held, PACE.paid_until = 0, 0, 0.0
        POOL.flows.clear()
        HELD.flows.clear()


@pytest.fixture
def upstream() -> Iterator[CountingUpstream]:
    server = CountingUpstream(model="qwen-test").start()
    yield server
    server.stop()


@pytest.fixture
def second_upstream() -> Iterator[CountingUpstream]:
    server = CountingUpstream(model="deepseek-test").start()
    yield server
    server.stop()


_node_count = 0


def make_lane(name: str, port: int, *, served: str = "", state: str = "serving", fallback: Lane | None = None,
              max_model_len: int = 4096, degraded_limit: int | None = None) -> Lane:
    global _node_count
    _node_count += 1
    node = Node.objects.create(name=f"sim-{name}-{_node_count}", address="127.0.0.1", transport="local")
    lane = Lane.objects.create(
        name=name, model_id=f"org/{name}", served_model_name=served, image="vllm/vllm-openai@sha256:" + "0" * 64,
        api_port=port, max_model_len=max_model_len, observed_state=state, desired_state="serving",
        fallback=fallback, degraded_context_limit=degraded_limit,
    )
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    return lane


def unused_port() -> int:
    """A port nothing listens on: connecting to it is refused."""
    return free_port()


@dataclass
class Gateway:
    server: AsgiServer
    secret: str
    key_id: int

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def base_url(self) -> str:
        return f"{self.server.url}/v1"

    def headers(self, secret: str | None = None) -> dict[str, str]:
        return {"authorization": f"Bearer {secret or self.secret}"}


@pytest.fixture
def key_owner(transactional_db: None) -> User:
    from core.roles import Role
    from tests.conftest import make_user

    return make_user("gw-admin", Role.ADMIN)


def create_key(owner: User, **kwargs: Any) -> tuple[str, int]:
    created = api_key_create(actor=owner, name=kwargs.pop("name", "agent"), **kwargs)
    return created.secret, created.key.pk


SIM_SERVED = "qwen-test"


@pytest.fixture
def qwen_engine(engine_factory: Callable[..., EngineHandle]) -> EngineHandle:
    """A sparksim Qwen engine (a real process over HTTP) serving the lane's served name."""
    return engine_factory(SIM_QWEN, "--served-model-name", SIM_SERVED, time_scale=0.001)


def engine_completed(engine: EngineHandle) -> int:
    """Generation requests the engine finished, from vLLM's request_success counter."""
    text = httpx.get(f"{engine.url}/metrics").text
    return int(sum(sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples if sample.name == "vllm:request_success_total"))


GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")


def engine_received(engine: EngineHandle, paths: tuple[str, ...] = GENERATION_PATHS) -> list[Any]:
    """The bodies of the requests that reached the engine on `paths`, oldest first, counted on
    arrival (a request the engine then failed, delayed or cut counts too)."""
    return [item["body"] for item in httpx.get(f"{engine.url}/_sim/requests").json() if item["path"] in paths]


def gateway_in_front_of(server: AsgiServer, owner: User, port: int, settings: Any, **lane: Any) -> Gateway:
    """The default lane `qwen` on the upstream at `port`, and a key of `owner`'s for it."""
    settings.GATEWAY_DEFAULT_LANE = "qwen"
    make_lane("qwen", port, served=SIM_SERVED, **lane)
    secret, key_id = create_key(owner)
    return Gateway(server=server, secret=secret, key_id=key_id)


@pytest.fixture
def gateway(asgi_server: AsgiServer, key_owner: User, qwen_engine: EngineHandle, settings: Any) -> Gateway:
    """The gateway in front of a sparksim engine."""
    return gateway_in_front_of(asgi_server, key_owner, qwen_engine.port, settings, max_model_len=32768)


@pytest.fixture(scope="module")
def unreached_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineHandle]:
    """One sparksim engine for a module's cases that must never reach it (bad input is
    refused at the gateway): starting one was most of such a case's time, and since none
    may reach it, each case still finds an engine that nothing has reached."""
    handle = start_engine(SIM_QWEN, tmp_path_factory.mktemp("unreached") / "engine.log",
                          "--served-model-name", SIM_SERVED, time_scale=0.001)
    yield handle
    handle.stop()


@pytest.fixture
def unreached_gateway(asgi_server: AsgiServer, key_owner: User, unreached_engine: EngineHandle,
                      settings: Any) -> Gateway:
    """`gateway`, in front of the module's unreached_engine."""
    return gateway_in_front_of(asgi_server, key_owner, unreached_engine.port, settings, max_model_len=32768)


@pytest.fixture
def fault_gateway(asgi_server: AsgiServer, key_owner: User, upstream: CountingUpstream, settings: Any) -> Gateway:
    """The gateway in front of the hand-written upstream: the faults sparksim cannot make."""
    return gateway_in_front_of(asgi_server, key_owner, upstream.port, settings)


def set_engine_faults(engine: EngineHandle, **faults: object) -> None:
    httpx.post(f"{engine.url}/_sim/faults", json=faults).raise_for_status()


@pytest.fixture
def second_engine(engine_factory: Callable[..., EngineHandle]) -> EngineHandle:
    """Another sparksim engine, for a fallback lane."""
    return engine_factory(SIM_QWEN, "--served-model-name", "deepseek-test", time_scale=0.001)


class FreezableProxy:
    """A TCP relay in front of the real Redis that can stop passing Redis's replies on: a
    Redis (or a network path) that takes calls and stops answering, without a reset."""

    def __init__(self, target: str) -> None:
        host_port = target.split("//", 1)[1].split("/", 1)[0]
        self.host, port = host_port.rsplit(":", 1)
        self.port = int(port)
        self.frozen = False
        self.connections = 0
        self.swallowed = 0  # replies dropped while frozen: a caller is waiting on one
        self.closed_by_client = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        redis_reader, redis_writer = await asyncio.open_connection(self.host, self.port)

        async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: bool) -> None:
            with contextlib.suppress(ConnectionError, OSError):
                while data := await reader.read(65536):
                    if replies and self.frozen:
                        self.swallowed += 1
                        continue  # swallowed: the caller waits for an answer that never comes
                    writer.write(data)
                    await writer.drain()

        from_client = asyncio.ensure_future(pipe(client_reader, redis_writer, False))
        from_redis = asyncio.ensure_future(pipe(redis_reader, client_writer, True))
        await asyncio.wait([from_client, from_redis], return_when=asyncio.FIRST_COMPLETED)
        if from_client.done():
            self.closed_by_client += 1
        from_client.cancel()
        from_redis.cancel()
        client_writer.close()
        redis_writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@pytest.fixture
def own_redis(tmp_path: Any, settings: Any) -> Iterator[RedisServer]:
    """The gateway (and everything else in this process) on a redis-server of the test's
    own; ask for it before the gateway fixtures, so the gateway connects to it."""
    server = RedisServer(tmp_path).start()
    settings.REDIS_URL = server.url
    yield server
    server.stop()
