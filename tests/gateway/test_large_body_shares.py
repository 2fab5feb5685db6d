"""The large-body bounds shared per key, or team (gateway.large_pool.admits), through the
real gateway (uvicorn) in front of a sparksim engine: a key that floods the worker pool, or
the held bytes, with its large bodies is refused (503 `server_busy`, never sent to the lane)
before it takes the last place, so another key's one body is let in and answered; a team's
keys share as one; and two keys holding some are each held to an equal share. The bodies
stay in the pool as long as a test needs (HeldInspections), holding their bytes too."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest
from django.contrib.auth.models import User

from gateway import large_pool
from gateway.large_pool import POOL
from gateway.models import ApiKey
from gateway.team_services import team_create
from sparksim.standalone import EngineHandle
from tests.conftest import wait_for
from tests.gateway.conftest import SIM_SERVED, Gateway, create_key, engine_received

LARGE = 1024  # PORTAL_GATEWAY_LARGE_BODY_BYTES in these tests: every padded body is a large one
PAD = "p" * 2048


@pytest.fixture
def large_bodies(settings: Any) -> None:
    settings.GATEWAY_LARGE_BODY_BYTES = LARGE


@pytest.fixture
def senders() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(8) as pool:
        yield pool


HOLD = "hold "  # a body whose first message starts with it stays in the pool until told


class HeldInspections:
    """A stand-in for the worker processes: a body marked HOLD waits in its own thread until
    `go_on` is set (as behind a slow worker), keeping its place and its bytes; any other is
    inspected at once, in the caller (the real inspection, in process)."""

    def __init__(self) -> None:
        self.go_on = threading.Event()

    def submit(self, function: Any, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        if f'"content":"{HOLD}'.encode() not in self.body(*args):
            future.set_result(function(*args))
            return future

        def later() -> None:
            self.go_on.wait(60)
            future.set_result(function(*args))

        threading.Thread(target=later, daemon=True).start()
        return future

    @staticmethod
    def body(raw: bytes | str, *args: Any) -> bytes:
        """The body's bytes, pickled (bytes) or in its shared-memory file (path, size)."""
        if isinstance(raw, bytes):
            return raw
        with open(raw, "rb") as file:
            return file.read(args[0])


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[HeldInspections]:
    inspections = HeldInspections()
    monkeypatch.setattr(POOL, "_executor_for", lambda workers, niceness: inspections)
    yield inspections
    inspections.go_on.set()  # a failed test's held bodies end too


def large_body(tag: str, pad: str = PAD) -> bytes:
    return orjson.dumps({"model": SIM_SERVED, "max_tokens": 4, "x_pad": pad,
                         "messages": [{"role": "user", "content": tag}]})


def send(gateway: Gateway, secret: str, raw: bytes, *, chunked: bool = False) -> httpx.Response:
    def pieces() -> Iterator[bytes]:  # no content-length: a body that grows as it comes
        for start in range(0, len(raw), 16_384):
            yield raw[start:start + 16_384]

    return httpx.post(f"{gateway.url}/v1/chat/completions", content=pieces() if chunked else raw, timeout=60,
                      headers={**gateway.headers(secret), "content-type": "application/json"})


def flood(senders: ThreadPoolExecutor, gateway: Gateway, bodies: list[tuple[str, bytes]],
          chunked: bool = False) -> list[Future[httpx.Response]]:
    """Each body in turn, the next once the last is in the pool (held) or answered."""
    sent: list[Future[httpx.Response]] = []
    for secret, raw in bodies:
        pending = POOL.pending
        sent.append(senders.submit(send, gateway, secret, raw, chunked=chunked))
        wait_for(lambda count=pending: POOL.pending > count or sent[-1].done(),  # type: ignore[misc]
                 what="the body held or answered")
    return sent


def assert_busy(response: httpx.Response) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "server_busy" and response.headers["retry-after"] == "1"


def tags_received(engine: EngineHandle) -> list[str]:
    return sorted(body["messages"][0]["content"] for body in engine_received(engine))


@pytest.mark.parametrize("flooder", ["one key", "two keys of one team"])
def test_a_key_that_floods_the_pool_leaves_a_place_for_another_keys_body(
    gateway: Gateway, qwen_engine: EngineHandle, key_owner: User, large_bodies: None, settings: Any,
    held: HeldInspections, senders: ThreadPoolExecutor, flooder: str,
) -> None:
    settings.GATEWAY_LARGE_BODY_WORKERS, settings.GATEWAY_LARGE_BODY_QUEUE = 1, 2  # three places
    team = team_create(actor=key_owner, name="flooders")
    first, first_id = create_key(key_owner, name="B")
    second, second_id = create_key(key_owner, name="B2")
    ApiKey.objects.filter(pk__in=[first_id, second_id]).update(team=team)
    keys = [first] * 3 if flooder == "one key" else [first, first, second]  # the teammate's first is B's third
    sent = flood(senders, gateway, [(secret, large_body(f"{HOLD}B{n}")) for n, secret in enumerate(keys)])
    answer = send(gateway, gateway.secret, large_body("A"))  # A holds none: the last place is its
    assert answer.status_code == 200, answer.text
    assert POOL.pending == 2 and sent[0].running() and sent[1].running()  # B's first two, held
    assert_busy(sent[2].result())  # B's third: it would have taken the last place
    assert_busy(send(gateway, first, large_body("B-again")))  # B is still at its bound
    assert tags_received(qwen_engine) == ["A"]
    held.go_on.set()
    assert [f.result().status_code for f in sent[:2]] == [200, 200]
    assert tags_received(qwen_engine) == ["A", f"{HOLD}B0", f"{HOLD}B1"]  # never a refused one


def test_two_keys_holding_pool_places_are_each_held_to_an_equal_share(
    gateway: Gateway, qwen_engine: EngineHandle, key_owner: User, large_bodies: None, settings: Any,
    held: HeldInspections, senders: ThreadPoolExecutor,
) -> None:
    settings.GATEWAY_LARGE_BODY_WORKERS, settings.GATEWAY_LARGE_BODY_QUEUE = 1, 4  # five: four and the reserve
    flooder, _ = create_key(key_owner, name="B")
    agent = gateway.secret
    sent = flood(senders, gateway, [(flooder, large_body(f"{HOLD}B0")), (flooder, large_body(f"{HOLD}B1")),
                                    (agent, large_body(f"{HOLD}A0")),
                                    (flooder, large_body(f"{HOLD}B2")), (flooder, large_body(f"{HOLD}B3"))])
    # Two keys hold some: each may hold 4 / 2. A, under its share, is let in.
    answer = send(gateway, agent, large_body("A1"))
    assert answer.status_code == 200, answer.text
    assert POOL.pending == 3
    assert_busy(sent[3].result())  # B at its share
    assert_busy(sent[4].result())
    held.go_on.set()
    assert [f.result().status_code for f in sent[:3]] == [200, 200, 200]
    assert tags_received(qwen_engine) == ["A1", f"{HOLD}A0", f"{HOLD}B0", f"{HOLD}B1"]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_key_that_floods_the_held_bytes_leaves_room_for_another_keys_body(
    gateway: Gateway, qwen_engine: EngineHandle, key_owner: User, large_bodies: None, settings: Any,
    held: HeldInspections, senders: ThreadPoolExecutor, framing: str,
) -> None:
    """Bodies of 900 KB, at most 1 MB each (the reserve), 3 MB held at most (the pool is no
    bound here): two of B's, held in the pool, and B's third is refused (announced: before a
    byte of it is read; chunked: as it grows past the rest), so A's is let in."""
    settings.GATEWAY_LARGE_BODY_WORKERS, settings.GATEWAY_LARGE_BODY_QUEUE = 1, 8
    settings.GATEWAY_MAX_BODY_BYTES = 1_000_000
    settings.GATEWAY_LARGE_BODY_HELD_MAX_BYTES = 3_000_000
    settings.GATEWAY_LARGE_BODY_BYTES_PER_S = 0
    flooder, _ = create_key(key_owner, name="B")
    chunked = framing == "chunked"
    blob = "x" * 900_000
    sent = flood(senders, gateway, [(flooder, large_body(f"{HOLD}B{n}", blob)) for n in range(3)], chunked)
    answer = send(gateway, gateway.secret, large_body("A", blob), chunked=chunked)  # the reserve is A's
    assert answer.status_code == 200, answer.text
    held_two = 2 * len(large_body(f"{HOLD}B0", blob))  # B's first two, held (A's given back)
    wait_for(lambda: large_pool.HELD.held == held_two, what="B's two bodies held")
    assert_busy(sent[2].result())  # B's third would have passed 3 MB less one largest body
    assert_busy(send(gateway, flooder, large_body("B-again", blob), chunked=chunked))
    assert tags_received(qwen_engine) == ["A"]
    held.go_on.set()
    assert [f.result().status_code for f in sent[:2]] == [200, 200]
    assert tags_received(qwen_engine) == ["A", f"{HOLD}B0", f"{HOLD}B1"]
    assert large_pool.HELD.held == 0
