"""The hot path's two Redis calls — the admission script before a request goes upstream,
the release script after its answer — pipelined over one connection of the gateway's own.

Why not redis-py for these two: measured with perf/gateway_overhead.py's set-up (one
uvicorn worker, c=1 and c=16), redis-py's asyncio client spent ~0.45 ms of the gateway's
~1.5 ms of CPU per request on them — its connection pool (an asyncio.Condition per
checkout), retry wrapper, asyncio streams and command packing, once per call. Here a call
is a packed command queued for the loop turn's one write and a future resolved by the
protocol's `data_received`, with hiredis (the parser redis-py itself uses) reading the
replies. Everything else that talks to Redis (breakers and in-flight counts, the router,
pub/sub) keeps redis-py.

Failure semantics the callers rely on: `NotSent` when no byte of the call can have reached
Redis (no connection could be opened, or the connection was already known to be lost), so
it may be retried; any other ConnectionError means the script may have run. That includes
a Redis that takes the call and does not answer within the call timeout (a hung server, a
network path that drops packets without a reset): the connection is then abandoned, every
call still waiting on it fails at once, and the next call opens a new one, so one stall
costs the requests of that moment a bounded wait, never an unbounded one."""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from typing import Any

import hiredis
from redis.connection import SSLConnection, parse_url

CONNECT_TIMEOUT_S = 5.0
CALL_TIMEOUT_S = 5.0


class NotSent(ConnectionError):
    """Nothing of this call reached Redis: retrying it cannot run it twice."""


class ScriptError(RuntimeError):
    """Redis answered the call with an error (a bug in a script, a wrong type under a key)."""


def pack(*parts: bytes | str | int | float) -> bytes:
    """One command in RESP: an array of bulk strings (numbers as their decimal text, as
    redis-py sends them)."""
    out = [b"*%d\r\n" % len(parts)]
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


class _Protocol(asyncio.Protocol):
    """Replies come back in the order the commands were written: each resolves the oldest
    waiting future. A caller that stopped waiting (cancelled) still has its reply consumed."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: deque[asyncio.Future[Any]] = deque()
        self.transport: asyncio.Transport | None = None
        self.outgoing: list[bytes] = []
        self.lost = False
        self.flush_soon = False  # a flush is due at the loop's next turn
        self.flush_later: asyncio.TimerHandle | None = None  # a lingering call's latest flush

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        unsent = len(self.outgoing)  # the newest waiting calls, still queued for the next write
        self.outgoing = []
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                error = NotSent if len(self.waiting) < unsent else ConnectionError
                future.set_exception(error(f"Redis closed the connection ({exc or 'closed'})"))

    def send(self, command: bytes, linger: float = 0.0) -> asyncio.Future[Any]:
        """Queue a command; the commands of one loop turn leave together in one write (at 16
        clients and more that is several per write: fewer syscalls and fewer wake-ups of
        Redis, which shares the machine's cores). A command that may `linger` (seconds)
        waits for the next write of a command that may not, or that long at most."""
        if self.lost or self.transport is None or self.transport.is_closing():
            raise NotSent("the connection to Redis is closed")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append(future)
        self.outgoing.append(command)
        if linger <= 0:
            if not self.flush_soon:
                self.flush_soon = True
                loop.call_soon(self.flush)
        elif not self.flush_soon and self.flush_later is None:
            self.flush_later = loop.call_later(linger, self.flush)
        return future

    def abandon(self) -> None:
        """Give the connection up now (Redis stopped answering): no command is written on it
        any more, and connection_lost fails the calls still waiting."""
        self.lost = True
        if self.transport is not None:
            self.transport.abort()

    def flush(self) -> None:
        self.flush_soon = False
        if self.flush_later is not None:
            self.flush_later.cancel()
            self.flush_later = None
        if self.lost or self.transport is None or self.transport.is_closing() or not self.outgoing:
            return  # connection_lost reports what is still queued as never sent
        commands, self.outgoing = self.outgoing, []
        self.transport.write(b"".join(commands))


class ScriptPipe:
    """One lazily opened, self-healing connection to the Redis of `url` (redis://, rediss://,
    unix://, with password and database), for EVALSHA calls."""

    def __init__(self, url: str, *, connect_timeout: float = CONNECT_TIMEOUT_S,
                 call_timeout: float = CALL_TIMEOUT_S) -> None:
        self.params = parse_url(url)
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self._protocol: _Protocol | None = None
        self._lock = asyncio.Lock()

    async def call(self, script: Script, keys: list[str], args: list[Any], linger: float = 0.0) -> Any:
        protocol = self._protocol
        if protocol is None or protocol.lost:
            protocol = await self._connect()
        try:
            async with asyncio.timeout(self.call_timeout):
                reply = await protocol.send(pack(b"EVALSHA", script.sha, len(keys), *keys, *args), linger)
                if isinstance(reply, hiredis.ReplyError) and str(reply).startswith("NOSCRIPT"):
                    # Redis restarted or its script cache was flushed: EVAL loads it again.
                    reply = await protocol.send(pack(b"EVAL", script.source, len(keys), *keys, *args))
        except TimeoutError:
            protocol.abandon()
            if self._protocol is protocol:
                self._protocol = None
            raise ConnectionError(f"Redis did not answer within {self.call_timeout:g} s") from None
        if isinstance(reply, hiredis.ReplyError):
            raise ScriptError(str(reply))
        return reply

    async def _connect(self) -> _Protocol:
        async with self._lock:
            if self._protocol is not None and not self._protocol.lost:
                return self._protocol  # another call connected while this one waited
            loop = asyncio.get_running_loop()
            params = self.params
            transport: asyncio.BaseTransport | None = None
            try:
                async with asyncio.timeout(self.connect_timeout):
                    if "path" in params:
                        transport, protocol = await loop.create_unix_connection(_Protocol, params["path"])
                    else:
                        context = ssl.create_default_context() if params.get("connection_class") is SSLConnection \
                            else None
                        transport, protocol = await loop.create_connection(
                            _Protocol, params.get("host", "localhost"), params.get("port", 6379), ssl=context)
                    if params.get("password"):
                        auth = [params["username"], params["password"]] if params.get("username") \
                            else [params["password"]]
                        await self._handshake(protocol, pack(b"AUTH", *auth))
                    if params.get("db"):
                        await self._handshake(protocol, pack(b"SELECT", params["db"]))
            except (OSError, TimeoutError, ConnectionError) as error:
                if transport is not None:
                    transport.close()
                raise NotSent(f"could not connect to Redis: {error or type(error).__name__}") from error
            self._protocol = protocol
            return protocol

    @staticmethod
    async def _handshake(protocol: _Protocol, command: bytes) -> None:
        reply = await protocol.send(command)
        if isinstance(reply, hiredis.ReplyError):
            raise NotSent(f"Redis refused the connection's set-up: {reply}")

    def close(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None


class Script:
    """A Lua script called by its SHA1 over a ScriptPipe; `await script(keys=..., args=...)`
    as with redis-py's registered scripts."""

    def __init__(self, pipe: ScriptPipe, source: str) -> None:
        self.pipe = pipe
        self.source = source
        self.sha = hashlib.sha1(source.encode()).hexdigest()

    async def __call__(self, *, keys: list[str], args: list[Any], linger: float = 0.0) -> Any:
        return await self.pipe.call(self, keys, args, linger)
