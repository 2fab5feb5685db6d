"""The hot path's pipelined Redis connection (gateway.scripts) against the real
Redis: replies reach their own callers, the script cache is refilled after a flush, a
lost connection fails only the calls on it and is reopened, and a call that could not
reach Redis says so (NotSent: safe to retry)."""

from __future__ import annotations

import asyncio

import pytest
import redis
from django.conf import settings

from gateway.scripts import NotSent, Script, ScriptError, ScriptPipe, pack
from tests.conftest import free_port
from tests.gateway.conftest import FreezableProxy, run_async

ECHO = "return {ARGV[1], redis.call('INCR', KEYS[1])}"


@pytest.fixture
def counter_key() -> str:
    key = f"{settings.REDIS_PREFIX}:gw:test-scripts:counter"
    redis.Redis.from_url(settings.REDIS_URL).delete(key)
    return key


def test_a_command_is_packed_as_a_resp_array_of_bulk_strings() -> None:
    assert pack(b"EVALSHA", "é", 2, 0.5) == b"*4\r\n$7\r\nEVALSHA\r\n$2\r\n\xc3\xa9\r\n$1\r\n2\r\n$3\r\n0.5\r\n"


def test_concurrent_calls_each_get_their_own_reply_in_the_urls_database(counter_key: str) -> None:
    async def scenario() -> list[list[object]]:
        pipe = ScriptPipe(settings.REDIS_URL)
        script = Script(pipe, ECHO)
        try:
            return await asyncio.gather(*(script(keys=[counter_key], args=[f"call-{n}"]) for n in range(300)))
        finally:
            pipe.close()

    replies = run_async(scenario)
    assert [reply[0] for reply in replies] == [f"call-{n}".encode() for n in range(300)]
    assert sorted(reply[1] for reply in replies) == list(range(1, 301))  # type: ignore[type-var]
    # Written in the database the URL names (the suite's Redis URL names one), not db 0.
    assert redis.Redis.from_url(settings.REDIS_URL).get(counter_key) == b"300"


def test_a_lingering_call_leaves_with_the_next_urgent_write_in_order_or_alone_after_its_linger(
    counter_key: str,
) -> None:
    async def scenario() -> tuple[list[object], list[object], int]:
        pipe = ScriptPipe(settings.REDIS_URL)
        script = Script(pipe, ECHO)
        try:
            await script(keys=[counter_key], args=["connect"])  # 1
            protocol = pipe._protocol
            assert protocol is not None
            writes = 0
            write = protocol.transport.write  # type: ignore[union-attr]

            def counted(data: bytes) -> None:
                nonlocal writes
                writes += 1
                write(data)

            protocol.transport.write = counted  # type: ignore[union-attr,method-assign]
            lingering = asyncio.ensure_future(script(keys=[counter_key], args=["later"], linger=30.0))
            await asyncio.sleep(0)  # its turn: queued, not written
            assert writes == 0 and not lingering.done()
            urgent = await script(keys=[counter_key], args=["now"])
            both = [await lingering, urgent]  # one write, the lingering call first
            alone = await script(keys=[counter_key], args=["alone"], linger=0.01)  # its linger ends
            return both, alone, writes
        finally:
            pipe.close()

    both, alone, writes = run_async(scenario)
    assert both == [[b"later", 2], [b"now", 3]] and alone == [b"alone", 4] and writes == 2


def test_a_flushed_script_cache_is_refilled_and_a_script_error_is_raised(counter_key: str) -> None:
    async def scenario() -> tuple[object, object]:
        pipe = ScriptPipe(settings.REDIS_URL)
        script = Script(pipe, ECHO)
        try:
            first = await script(keys=[counter_key], args=["a"])
            redis.Redis.from_url(settings.REDIS_URL).script_flush()  # as after a Redis restart
            second = await script(keys=[counter_key], args=["b"])
            with pytest.raises(ScriptError, match="WRONGTYPE|wrong kind"):
                redis.Redis.from_url(settings.REDIS_URL).set(counter_key + ":list", "x")
                await Script(pipe, "return redis.call('LPUSH', KEYS[1], 'y')")(keys=[counter_key + ":list"], args=[])
            return first, second
        finally:
            pipe.close()

    assert run_async(scenario) == ([b"a", 1], [b"b", 2])


def test_a_lost_connection_fails_the_calls_on_it_and_the_next_call_reconnects(counter_key: str) -> None:
    async def scenario() -> object:
        pipe = ScriptPipe(settings.REDIS_URL)
        script = Script(pipe, ECHO)
        try:
            await script(keys=[counter_key], args=["warm"])
            client = redis.Redis.from_url(settings.REDIS_URL)
            mine = [c for c in client.client_list() if c.get("cmd") in ("evalsha", "eval")]
            assert mine, "the pipe's connection is listed"
            in_flight = asyncio.ensure_future(script(keys=[counter_key], args=["during"]))
            for entry in mine:
                client.client_kill_filter(_id=entry["id"])
            try:
                await in_flight  # answered, or failed by the kill: never hangs
            except NotSent:
                assert client.get(counter_key) == b"1"  # "not sent" means it did not run
            except ConnectionError:
                pass  # written: it may have run
            await asyncio.sleep(0.05)
            return await script(keys=[counter_key], args=["after"])
        finally:
            pipe.close()

    reply = run_async(scenario)
    assert isinstance(reply, list) and reply[0] == b"after"
    assert reply[1] == int(redis.Redis.from_url(settings.REDIS_URL).get(counter_key) or 0)  # reconnected, ran once


def test_a_redis_that_cannot_be_reached_is_reported_as_not_sent() -> None:
    async def scenario() -> None:
        pipe = ScriptPipe(f"redis://127.0.0.1:{free_port()}/0", connect_timeout=2)
        with pytest.raises(NotSent, match="could not connect to Redis"):
            await Script(pipe, ECHO)(keys=["k"], args=["x"])

    run_async(scenario)


def test_a_wrong_password_is_reported_as_not_sent() -> None:
    host_port = settings.REDIS_URL.split("//", 1)[1].split("/", 1)[0]

    async def scenario() -> None:
        pipe = ScriptPipe(f"redis://nobody:wrong@{host_port}/0")
        with pytest.raises(NotSent, match="refused the connection's set-up"):
            await Script(pipe, ECHO)(keys=["k"], args=["x"])

    run_async(scenario)


def test_calls_still_queued_when_the_connection_drops_are_reported_as_not_sent(counter_key: str) -> None:
    async def scenario() -> tuple[type[BaseException], type[BaseException]]:
        pipe = ScriptPipe(settings.REDIS_URL)
        script = Script(pipe, ECHO)
        try:
            await script(keys=[counter_key], args=["warm"])
            protocol = pipe._protocol
            assert protocol is not None and protocol.transport is not None
            queued = [asyncio.ensure_future(script(keys=[counter_key], args=[n])) for n in ("a", "b")]
            await asyncio.sleep(0)  # both are queued for the next write, none is written yet
            assert len(protocol.outgoing) == 2
            protocol.transport.abort()  # connection_lost runs before the write would
            errors = await asyncio.gather(*queued, return_exceptions=True)
            return type(errors[0]), type(errors[1])
        finally:
            pipe.close()

    assert run_async(scenario) == (NotSent, NotSent)
    assert redis.Redis.from_url(settings.REDIS_URL).get(counter_key) == b"1"  # neither ran


def test_a_redis_that_stops_answering_fails_the_waiting_calls_in_bounded_time_and_is_reconnected(
    counter_key: str,
) -> None:
    """A stalled Redis must not hold every request of the gateway: past the call timeout the
    calls on the stalled connection fail (ConnectionError, not NotSent: Redis has the command,
    so it may have run), and the next call opens a new connection."""

    async def scenario() -> tuple[list[BaseException | object], float, object, int, int]:
        proxy = FreezableProxy(settings.REDIS_URL)
        port = await proxy.start()
        database = settings.REDIS_URL.rsplit("/", 1)[1]
        pipe = ScriptPipe(f"redis://127.0.0.1:{port}/{database}", call_timeout=0.5)
        script = Script(pipe, ECHO)
        try:
            await script(keys=[counter_key], args=["warm"])
            proxy.frozen = True
            started = asyncio.get_running_loop().time()
            stalled = await asyncio.gather(*(script(keys=[counter_key], args=[n]) for n in ("a", "b", "c")),
                                           return_exceptions=True)
            waited = asyncio.get_running_loop().time() - started
            proxy.frozen = False
            after = await script(keys=[counter_key], args=["after"])
            for _ in range(100):  # the proxy sees the abandoned connection's end soon after
                if proxy.closed_by_client:
                    break
                await asyncio.sleep(0.02)
            return stalled, waited, after, proxy.connections, proxy.closed_by_client
        finally:
            pipe.close()
            proxy.close()

    stalled, waited, after, connections, closed = run_async(scenario)
    assert all(type(error) is ConnectionError and "did not answer within 0.5 s" in str(error) for error in stalled)
    assert waited < 3.0  # one timeout for all of them, not one after another, and not forever
    # Redis ran the stalled calls (only their answers were lost): "may have run" was right.
    assert isinstance(after, list) and after[0] == b"after" and after[1] == 5
    assert connections == 2 and closed == 1  # the stalled connection was closed and a new one opened
