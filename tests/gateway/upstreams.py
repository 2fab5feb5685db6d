"""A hand-written upstream for the faults sparksim cannot make: a connection reset after the
request arrived (no answer at all); usage riding on a final chunk that also has choices
(some OpenAI-compatible servers do it; vLLM never does); and llama.cpp's server's ways — a
500 carrying a Python-style traceback for a body it chokes on, no usage at all
(`include_usage` ignored) and no `/tokenize`; a lane that holds its answer's headers (`hold`,
until `let_go()` or the end of the test); a strict server that answers 500 to a field
set to null (`strict_null`: `"temperature": null` is valid for OpenAI, not for it); a full
lane that runs one request at a time and queues the rest (`one_at_a_time`, words
`word_delay_s` apart). Otherwise it answers like a plain
OpenAI-compatible server, and it counts every request it receives.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from typing import Any

from aiohttp import web

from tests.conftest import free_port

MODES = {"ok", "reset", "usage_on_choices", "traceback_500", "linger_after_done", "hold", "strict_null"}
TEXT = "Hello from the hand-written upstream."
# What llama.cpp's server answered to a body it could not handle (server paths included).
TRACEBACK = ('Traceback (most recent call last):\n  File "/srv/llama/server/handlers.py", line 212, in chat\n'
             '    temperature = float(body["temperature"])\nValueError: could not convert string to float: \'hot\'')


class CountingUpstream:
    def __init__(self, model: str = "qwen-test") -> None:
        self.model = model
        self.port = free_port()
        self.mode = "ok"
        self.counts: Counter[str] = Counter()
        self.sends_usage = True  # False: like llama.cpp, never any usage (include_usage ignored)
        self.has_tokenize = True  # False: /tokenize answers 404, like an engine without it
        self.tokenize_counts = True  # False: /tokenize answers 200 without a count
        self.tokenize_bodies: list[dict[str, Any]] = []
        self.raw_bodies: list[bytes] = []  # the completion requests' bodies, byte for byte
        self.event_end = b"\n\n"  # how its streams end an event (b"\r\n\r\n": some servers' default)
        self.streams: list[bytes] = []  # every stream it sent, byte for byte
        self.text = TEXT  # what a stream says, a word a chunk
        self.one_at_a_time = False
        self.word_delay_s = 0.0
        self._slot = asyncio.Semaphore(1)
        self.usage_nulls = False  # True: `"usage": null` on every chunk when usage was asked, as OpenAI does
        self._loop = asyncio.new_event_loop()
        self._let_go = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def completions(self) -> int:
        return self.counts["/v1/chat/completions"] + self.counts["/v1/completions"]

    def start(self) -> CountingUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def let_go(self) -> None:
        """Held requests may answer now."""
        self._loop.call_soon_threadsafe(self._let_go.set)

    def stop(self) -> None:
        self.let_go()
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_get("/v1/models", self.models)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model"}]})

    async def tokenize(self, request: web.Request) -> web.Response:
        self.counts["/tokenize"] += 1
        if not self.has_tokenize:
            raise web.HTTPNotFound()
        if not self.tokenize_counts:  # like llama.cpp's: an answer, but no count
            return web.json_response({"tokens": []})
        body = await request.json()
        self.tokenize_bodies.append(body)
        if "messages" not in body:  # a text (the gateway counting an answer): its words
            return web.json_response({"count": len(str(body.get("prompt", "")).split()), "tokens": []})
        text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        return web.json_response({"count": len(text.split()) + 4, "max_model_len": 4096, "tokens": []})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.counts[request.path] += 1
        raw = await request.read()
        self.raw_bodies.append(raw)
        body = json.loads(raw)
        if self.mode == "reset":
            assert request.transport is not None
            request.transport.close()  # the request arrived; the answer never will
            await asyncio.sleep(1)
            return web.Response(status=500)
        if self.mode == "hold":  # the request arrived; its headers wait
            await self._let_go.wait()
        if self.mode == "strict_null" and any(value is None for value in body.values()):
            return web.json_response({"error": {"code": 500, "message": "null field", "type": "server_error"}},
                                     status=500)
        if self.one_at_a_time:
            async with self._slot:  # the others wait in its queue, without a byte of answer
                return await self._answer(request, body)
        return await self._answer(request, body)

    async def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if self.mode == "traceback_500":
            return web.json_response({"error": {"code": 500, "message": TRACEBACK, "type": "server_error"}},
                                     status=500)
        if body.get("stream"):
            return await self._stream(request, body)
        whole: dict[str, Any] = {
            "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}]}
        if self.sends_usage:
            whole["usage"] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        return web.json_response(whole)

    async def _stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": body["model"]}

        sent = bytearray()

        async def write(data: bytes) -> None:
            sent.extend(data)
            await response.write(data)

        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def emit(payload: dict[str, Any]) -> None:
            if self.usage_nulls and include_usage and "usage" not in payload:
                payload = {**payload, "usage": None}  # as OpenAI (and vLLM) do when usage was asked
            await write(b"data: " + json.dumps(payload).encode() + self.event_end)

        words = self.text.split(" ")
        for word in words:
            await emit({**base, "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}]})
            await asyncio.sleep(self.word_delay_s)
        final = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
        usage = {"prompt_tokens": 11, "completion_tokens": len(words), "total_tokens": 11 + len(words)}
        if self.mode == "usage_on_choices":
            await emit({**base, "choices": final, "usage": usage})
        else:
            await emit({**base, "choices": final})
            if self.sends_usage and include_usage:
                await emit({**base, "choices": [], "usage": usage})
        await write(b"data: [DONE]" + self.event_end)
        self.streams.append(bytes(sent))
        if self.mode == "linger_after_done":
            # The client has its [DONE] (and may hang up) before the stream closes.
            await asyncio.sleep(1)
        return response
