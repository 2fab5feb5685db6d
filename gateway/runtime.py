"""Per-process (per event loop) gateway state: the pooled upstream client, Redis, the key
and lane caches, replica health (gateway.replicas), the request log writer and background tasks.

Everything here is bound to the event loop that created it, so the state is kept per
loop (uvicorn runs one loop per worker process; tests start one server per test)."""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

import httpx
import redis.asyncio as aioredis
from django.conf import settings

from gateway.budgets import BUDGETS_LUA
from gateway.directory import KeyCache, LaneCache
from gateway.fair import FairQueue
from gateway.limits import ADMIT_LUA
from gateway.logwriter import RequestLogWriter
from gateway.loops import stop_loop
from gateway.replicas import SharedHealth
from gateway.route import RouterRuntime
from gateway.scripts import NotSent, Script, ScriptPipe
from gateway.upstream import upstream_client, upstream_transport
from lanes.replica_health import HEALTH_MESSAGE, invalidation_channel

log = logging.getLogger(__name__)

# Finishing work of one request, in one round trip: free the in-flight slot, count the
# tokens in the current minute and against the key's token budgets, and keep (or forget)
# the idempotency record.
# KEYS: 1 in-flight zset, 2 tpm prefix, 3 idempotency record, 4... the budgets' counts (gateway.budgets)
# ARGV: 1 request id, 2 tokens, 3 mode (keep|forget|none), 4 record, 5 ttl ms, 6 the in-flight record,
#       with budgets: 7 prompt tokens, 8 completion tokens, 9 the counts' ttl (s)
RELEASE_LUA = BUDGETS_LUA + """
redis.call('ZREM', KEYS[1], ARGV[1])
local tokens = tonumber(ARGV[2])
if tokens > 0 then
  local t = redis.call('TIME')
  local slot = math.floor(tonumber(t[1]) / 60)
  local key = KEYS[2] .. ':' .. slot
  redis.call('INCRBY', key, tokens)
  redis.call('EXPIRE', key, 125)
end
if ARGV[3] == 'keep' then
  redis.call('SET', KEYS[3], ARGV[4], 'PX', ARGV[5])
elseif ARGV[3] == 'forget' and redis.call('GET', KEYS[3]) == ARGV[6] then
  redis.call('DEL', KEYS[3])
end
budgets_charge(4, 7)
return 1
"""


RELEASE_ATTEMPTS = 5


class GatewayRuntime:
    def __init__(self) -> None:
        self.transport = upstream_transport()
        self.client: httpx.AsyncClient = upstream_client(self.transport)
        # A blocking pool: under a burst, requests wait a moment for a connection instead of
        # failing (the default pool raises "Too many connections").
        pool = aioredis.BlockingConnectionPool.from_url(settings.REDIS_URL, max_connections=64, timeout=10)
        self.redis: aioredis.Redis = aioredis.Redis(connection_pool=pool)
        # The hot path's two scripts go over a pipelined connection of their own.
        self.scripts = ScriptPipe(settings.REDIS_URL, call_timeout=settings.GATEWAY_REDIS_TIMEOUT_S)
        self.admit_script = Script(self.scripts, ADMIT_LUA)
        self.release_script = Script(self.scripts, RELEASE_LUA)
        self.keys = KeyCache()
        self.lanes = LaneCache()
        # Per replica: circuit breakers and requests in flight, shared with every worker.
        self.health = SharedHealth(self.redis)
        # Per replica: its slots and fair queue, shared with every worker (gateway.fair).
        self.fair = FairQueue(self.scripts, self.health.worker, self.health)
        self.no_tokenize: dict[str, float] = {}  # lane -> when its /tokenize was found missing
        self.ignores_n: dict[str, float] = {}  # lane -> when it answered fewer choices than `n` asked
        self.log_writer = RequestLogWriter()
        self.router = RouterRuntime(self.redis)
        self.background: set[asyncio.Task[Any]] = set()
        self.closed = False
        self._listener = asyncio.create_task(self._listen())

    async def release(self, *, keys: list[str], args: list[Any], linger: float = 0.0) -> None:
        """Give back a request's in-flight slot and count its tokens. When nothing reached
        Redis (no connection could be opened: Redis restarting), it is retried (bounded): a
        lost release would hold the key's slot until its lease runs out. A release that may
        have reached Redis is not repeated: it also counts the request's tokens."""
        for attempt in range(RELEASE_ATTEMPTS):
            try:
                await self.release_script(keys=keys, args=args, linger=linger)
                return
            except NotSent as error:
                if attempt == RELEASE_ATTEMPTS - 1:
                    log.warning("gateway: in-flight slot not released (%s); its lease frees it", error)
                    return
                await asyncio.sleep(0.05 * 2 ** attempt)
            except Exception as error:
                log.warning("gateway: in-flight slot not released (%s); its lease frees it", error)
                return

    def spawn(self, coro: Any) -> None:
        """Fire-and-forget work after the answer (kept referenced until done)."""
        task = asyncio.create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def _listen(self) -> None:
        """Drop cached keys/lanes when the portal says they changed (any process)."""
        while not self.closed:  # as well as the cancellation: see gateway.loops
            try:
                pubsub = self.redis.pubsub()
                await pubsub.subscribe(invalidation_channel(), self.fair.channel)
                async for message in pubsub.listen():
                    if message.get("type") != "message":
                        continue
                    data = message["data"].decode() if isinstance(message["data"], bytes) else str(message["data"])
                    channel = message.get("channel")
                    if (channel.decode() if isinstance(channel, bytes) else channel) == self.fair.channel:
                        self.fair.wake(data)  # a slot for this worker's waiter
                    elif data == "lanes":
                        self.lanes.drop()
                    elif data == HEALTH_MESSAGE:
                        self.health.wake()
                    elif data.startswith("key:"):
                        self.keys.drop(int(data[4:]))
                    else:
                        self.keys.drop()
                        self.lanes.drop()
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis restarting: the TTLs still bound staleness
                log.warning("gateway: invalidation listener lost Redis; retrying", exc_info=True)
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        if self.background:  # first: what runs after an answer may still add log rows
            await asyncio.wait(self.background, timeout=5)
        await self.log_writer.flush()
        self.closed = True
        await stop_loop(self._listener, "invalidation listener")
        await self.fair.close()
        await self.health.close()
        self.router.close()
        self.scripts.close()
        await self.client.aclose()
        await self.redis.aclose()


_runtimes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GatewayRuntime] = weakref.WeakKeyDictionary()


def runtime() -> GatewayRuntime:
    loop = asyncio.get_running_loop()
    current = _runtimes.get(loop)
    if current is None:
        current = _runtimes[loop] = GatewayRuntime()
    return current


async def close_runtime() -> None:
    current = _runtimes.pop(asyncio.get_running_loop(), None)
    if current is not None:
        await current.close()
