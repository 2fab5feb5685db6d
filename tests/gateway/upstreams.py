"""A counting upstream for gateway tests: a small OpenAI-compatible aiohttp server that
counts every request it receives and can misbehave on demand (reset the connection,
hang, answer 5xx, die mid-stream, put usage on a chunk with choices)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from typing import Any

from aiohttp import web

from tests.conftest import free_port

MODES = {"ok", "reset", "hang", "500", "traceback_500", "die_mid_stream", "usage_on_choices", "slow"}
# What llama.cpp's server answered to a body it could not handle (paths included).
TRACEBACK = ('Traceback (most recent call last):\n  File "/srv/llama/server/handlers.py", line 212, in chat\n'
             '    temperature = float(body["temperature"])\nValueError: could not convert string to float: \'hot\'')


class CountingUpstream:
    def __init__(self, model: str = "qwen-test") -> None:
        self.model = model
        self.port = free_port()
        self.mode = "ok"
        self.hang_s = 30.0
        self.counts: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.tokenize_count: int | None = None  # None = words + 4 per message
        self.sends_usage = True  # False: like llama.cpp, never any usage (include_usage ignored)
        self.has_tokenize = True  # False: /tokenize answers 404, like an engine without it
        self.tokenize_bodies: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
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

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.chat)
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
        body = await request.json()
        self.tokenize_bodies.append(body)
        if self.tokenize_count is not None:
            count = self.tokenize_count
        elif isinstance(body.get("prompt"), str) and "messages" not in body:
            count = len(body["prompt"].split())
        else:
            text = " ".join(str(m.get("content", "")) for m in body.get("messages", [])) or str(body.get("prompt", ""))
            count = len(text.split()) + 4 * len(body.get("messages", []))
        return web.json_response({"count": count, "max_model_len": 4096, "tokens": []})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.counts[request.path] += 1
        body = await request.json()
        self.bodies.append(body)
        mode = self.mode
        if mode == "reset":
            assert request.transport is not None
            request.transport.close()  # the request arrived; the answer never will
            await asyncio.sleep(1)
            return web.Response(status=500)
        if mode == "hang":
            deadline = time.monotonic() + self.hang_s
            while time.monotonic() < deadline:
                if request.transport is None or request.transport.is_closing():
                    self.counts["disconnected"] += 1  # the gateway closed the connection: abort
                    return web.Response(status=499)
                await asyncio.sleep(0.02)
        if mode == "traceback_500":
            return web.json_response({"error": {"code": 500, "message": TRACEBACK, "type": "server_error"}},
                                     status=500)
        if mode == "500":
            return web.json_response({"error": {"message": "engine exploded", "type": "InternalServerError",
                                                "code": 500}}, status=500)
        chat = request.path.endswith("chat/completions")
        if body.get("stream"):
            return await self._stream(request, body, chat, mode)
        whole = self._whole(body, chat)
        if not self.sends_usage:
            del whole["usage"]
        return web.json_response(whole)

    def _choice_text(self, index: int) -> str:
        return f"Hello from {self.model} choice {index}."

    def _whole(self, body: dict[str, Any], chat: bool) -> dict[str, Any]:
        n = int(body.get("n") or 1)
        choices = []
        for i in range(n):
            if chat and body.get("tools"):
                name = body["tools"][0]["function"]["name"]
                message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": '{"city": "Paris"}'}}]}
                choices.append({"index": i, "message": message, "finish_reason": "tool_calls"})
            elif chat:
                choices.append({"index": i, "message": {"role": "assistant", "content": self._choice_text(i)},
                                "finish_reason": "stop"})
            else:
                choices.append({"index": i, "text": self._choice_text(i), "finish_reason": "stop"})
        return {"id": "cmpl-1", "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
                "model": body["model"], "choices": choices,
                "usage": {"prompt_tokens": 11, "completion_tokens": 7 * n, "total_tokens": 11 + 7 * n}}

    async def _stream(self, request: web.Request, body: dict[str, Any], chat: bool, mode: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        include_usage = self.sends_usage and bool((body.get("stream_options") or {}).get("include_usage"))
        n = int(body.get("n") or 1)
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": body["model"]}

        async def emit(payload: dict[str, Any]) -> None:
            if include_usage and "usage" not in payload:
                payload = {**payload, "usage": None}
            await response.write(b"data: " + json.dumps(payload).encode() + b"\n\n")

        pieces: list[tuple[int, dict[str, Any]]] = []
        for i in range(n):
            if chat and body.get("tools"):
                name = body["tools"][0]["function"]["name"]
                pieces.append((i, {"role": "assistant", "tool_calls": [
                    {"index": 0, "id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": ""}}]}))
                for fragment in ['{"ci', 'ty": "Pa', 'ris"}']:
                    pieces.append((i, {"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]}))
            else:
                for word in self._choice_text(i).split(" "):
                    pieces.append((i, {"content": word + " "}))
        for count, (i, delta) in enumerate(pieces):
            if mode == "die_mid_stream" and count == 2:
                assert request.transport is not None
                request.transport.close()
                return response
            if mode == "slow":
                await asyncio.sleep(0.05)
            choice = {"index": i, "delta": delta, "finish_reason": None} if chat else \
                {"index": i, "text": delta.get("content", ""), "finish_reason": None}
            await emit({**base, "choices": [choice]})
        finish = "tool_calls" if chat and body.get("tools") else "stop"
        final_choices = [({"index": i, "delta": {}, "finish_reason": finish} if chat else
                          {"index": i, "text": "", "finish_reason": finish}) for i in range(n)]
        usage = {"prompt_tokens": 11, "completion_tokens": len(pieces), "total_tokens": 11 + len(pieces)}
        if mode == "usage_on_choices":
            await emit({**base, "choices": final_choices, "usage": usage})
        else:
            await emit({**base, "choices": final_choices})
            if include_usage:
                await emit({**base, "choices": [], "usage": usage})
        await response.write(b"data: [DONE]\n\n")
        return response
