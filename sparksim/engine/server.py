"""The HTTP face of the engine: vLLM's OpenAI routes, /metrics and the /_sim control routes."""

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web

from sparksim.engine.config import EngineConfig, FaultSwitches
from sparksim.engine.log import log
from sparksim.engine.openai_format import (
    SSE_DONE,
    ChatStream,
    CompletionStream,
    chat_response,
    completion_response,
    error_body,
)
from sparksim.engine.planning import (
    ApiError,
    GenerationRequest,
    bad_request,
    plan_chat,
    plan_completion,
)
from sparksim.engine.priority import request_priority
from sparksim.engine.scheduler import ENGINE_DIED, EngineCore, ScheduledRequest
from sparksim.engine.validation import validate_chat, validate_completion, validate_faults, validate_tokenize
from sparksim.tokenizer import chat_prompt_token_ids, completion_prompt_token_ids

VLLM_VERSION = "0.21.1rc1.dev339+g1967a5627"
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Bodies are bounded: a prompt of a whole context is ~4 bytes a token; JSON, tools and
# images leave room up to 16 bytes a token, and never less than 32 MB.
BODY_BYTES_PER_TOKEN = 16
MIN_BODY_BYTES = 32 * 1024 * 1024
# What the gibberish fault makes every token: one token repeated, as stock kernels on sm121
# answered DeepSeek V4 prompts.
GIBBERISH_TOKEN = "!"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_error(error: ApiError) -> web.Response:
    body = error_body(error.message, error.error_type, error.status, error.param)
    return web.Response(status=error.status, text=body, content_type="application/json")


@web.middleware
async def api_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return json_error(error)


class EngineServer:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.core = EngineCore(config)
        self.faults = config.faults
        self.released = asyncio.Event()  # set while no hold is on: held requests wait for it
        if not self.faults.hold:
            self.released.set()
        self.requests_served = 0
        self.tokens_streamed = 0
        # The last requests to the model routes as they arrived (before any fault acts), so
        # a test sees what a client really sent and how often.
        self.received: deque[dict[str, Any]] = deque(maxlen=1000)
        self.on_death: Callable[[], None] = lambda: None
        self.set_listening: Callable[[bool], Awaitable[None]] | None = None
        body_limit = max(MIN_BODY_BYTES, BODY_BYTES_PER_TOKEN * config.max_model_len)
        self.app = web.Application(client_max_size=body_limit, middlewares=[api_errors])
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/ping", self.health)
        self.app.router.add_get("/version", self.version)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_post("/v1/chat/completions", self.guarded(self.chat_completions))
        self.app.router.add_post("/v1/completions", self.guarded(self.completions))
        self.app.router.add_post("/tokenize", self.guarded(self.tokenize))
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/_sim/faults", self.get_faults)
        self.app.router.add_post("/_sim/faults", self.set_faults)
        self.app.router.add_get("/_sim/state", self.state)
        self.app.router.add_get("/_sim/requests", self.requests)

    @property
    def cancels_on_disconnect(self) -> bool:
        """Whether the HTTP server cancels a handler whose client went away (aiohttp's
        handler_cancellation): --sim-abort-on-disconnect immediate. Otherwise (`write`, the
        default) a streaming request notices it only when it next writes (see _stream)."""
        return self.config.abort_on_disconnect == "immediate"

    # --- fault gate -----------------------------------------------------------------------

    def guarded(self, handler: Handler) -> Handler:
        async def gate(request: web.Request) -> web.StreamResponse:
            self.received.append({"path": request.path, "body": await _body_as_sent(request)})
            if self.faults.latency_s:
                await asyncio.sleep(self.faults.latency_s)
            await self.released.wait()
            if self.faults.unavailable:
                return json_error(ApiError(503, "Service Unavailable", "ServiceUnavailableError"))
            if self.core.dead:
                return json_error(self._dead_error())
            return await handler(request)

        return gate

    def _dead_error(self) -> ApiError:
        return ApiError(500, "EngineCore encountered an issue. See stack trace (above) for the "
                        "root cause.", "InternalServerError")

    def die(self, reason: str) -> None:
        if self.core.dead:
            return
        log("ERROR", "core.py", f"EngineCore encountered a fatal error: {reason}")
        log("ERROR", "async_llm.py", "AsyncLLM output_handler failed. EngineDeadError: "
            "EngineCore encountered an issue. See stack trace (above) for the root cause.")
        self.core.kill()
        self.on_death()

    def _count_served(self) -> None:
        self.requests_served += 1
        limit = self.faults.die_after_requests
        if limit is not None and self.requests_served >= limit:
            self.die(f"simulated death after {limit} requests")

    # --- plain routes ---------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:  # noqa: ARG002 (an aiohttp handler)
        if self.core.dead or self.faults.unavailable:
            return web.Response(status=503)
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:  # noqa: ARG002 (an aiohttp handler)
        return web.json_response({"version": VLLM_VERSION})

    async def models(self, request: web.Request) -> web.Response:  # noqa: ARG002 (an aiohttp handler)
        created = int(time.time())
        data: list[dict[str, object]] = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": self.config.model,
                "parent": None,
                "max_model_len": self.config.max_model_len,
                "permission": [],
            }
            for name in self.config.served_model_names
        ]
        return web.json_response({"object": "list", "data": data})

    async def metrics(self, request: web.Request) -> web.Response:  # noqa: ARG002 (an aiohttp handler)
        # Prometheus' text exposition format, as vLLM (prometheus_client) labels it.
        return web.Response(body=self.core.metrics.render().encode(),
                            headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        validate_tokenize(body)
        vocab = self.config.profile.vocab_size
        if "messages" in body:
            ids = chat_prompt_token_ids(body["messages"], vocab, body.get("tools"))
        elif isinstance(body.get("prompt"), str):
            ids = completion_prompt_token_ids(body["prompt"], vocab)
            if body.get("add_special_tokens") is False:
                ids = ids[1:]
        else:
            raise bad_request("prompt or messages is required")
        return web.json_response({"count": len(ids), "max_model_len": self.config.max_model_len,
                                  "tokens": ids, "token_strs": None})

    # --- generation -----------------------------------------------------------------------

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        validate_chat(body, max_num_seqs=self.config.max_num_seqs, max_logprobs=self.config.max_logprobs)
        priority = request_priority(body, self.config.scheduling_policy)
        plan = plan_chat(body, self.config.served_model_names, self.config.max_model_len,
                         self.config.profile.vocab_size, self.config.reasoning_parser is not None)
        return await self._generate(request, plan, chat=True, priority=priority)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await _json_body(request)
        validate_completion(body, max_num_seqs=self.config.max_num_seqs, max_logprobs=self.config.max_logprobs)
        priority = request_priority(body, self.config.scheduling_policy)
        plan = plan_completion(body, self.config.served_model_names, self.config.max_model_len,
                               self.config.profile.vocab_size)
        return await self._generate(request, plan, chat=False, priority=priority)

    async def _generate(
        self, request: web.Request, plan: GenerationRequest, chat: bool, priority: int = 0
    ) -> web.StreamResponse:
        if self.faults.gibberish:
            for choice in plan.plans:  # same length and finish, degenerate text
                choice.tokens = [GIBBERISH_TOKEN] * len(choice.tokens)
        scheduled = self.core.submit(plan.prompt_ids, [len(choice.tokens) for choice in plan.plans], priority)
        try:
            if plan.stream:
                return await self._stream(request, plan, scheduled, chat)
        except BaseException:
            self.core.abort(scheduled)
            raise
        try:
            while not scheduled.done:
                _, position = await scheduled.events.get()
                if position == ENGINE_DIED:
                    return json_error(self._dead_error())
        except BaseException:
            self.core.abort(scheduled)
            raise
        self._finished(plan)
        builder = chat_response if chat else completion_response
        payload = builder(plan.model, int(time.time()), plan.plans, len(plan.prompt_ids))
        return web.json_response(payload)

    async def _stream(self, request: web.Request, plan: GenerationRequest,
                      scheduled: ScheduledRequest, chat: bool) -> web.StreamResponse:
        created = int(time.time())
        stream_type = ChatStream if chat else CompletionStream
        stream = stream_type(plan.model, created, plan.include_usage)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8",
                     "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            return await self._stream_tokens(request, response, stream, plan, scheduled)
        except ConnectionError:
            # The client went away and this write found out (nothing is written while the
            # request waits or prefills, so with --sim-abort-on-disconnect write a request
            # dropped then is prefilled to the end): abort and log one line, as vLLM does.
            self.core.abort(scheduled)
            log("INFO", "async_llm.py", f"Aborted request {stream.id}.")
            return response

    async def _stream_tokens(self, request: web.Request, response: web.StreamResponse,
                             stream: ChatStream | CompletionStream, plan: GenerationRequest,
                             scheduled: ScheduledRequest) -> web.StreamResponse:
        choices = plan.plans
        while not scheduled.done or not scheduled.events.empty():
            batch = [await scheduled.events.get()]
            while not scheduled.events.empty():
                batch.append(scheduled.events.get_nowait())
            payload = b""
            for index, position in batch:
                if position == ENGINE_DIED:
                    await response.write(payload)
                    return self._cut(request, response)
                payload += stream.token_chunks(choices[index], position)
                self.tokens_streamed += 1
                limit = self.faults.die_mid_stream_after_tokens
                if limit is not None and self.tokens_streamed >= limit:
                    await response.write(payload)
                    self.die(f"simulated death mid-stream after {limit} tokens")
                    return self._cut(request, response)
            await response.write(payload)
        tail = b""
        if plan.include_usage:
            completion = sum(len(choice.tokens) for choice in choices)
            tail += stream.usage_chunk(len(plan.prompt_ids), completion)
        await response.write(tail + SSE_DONE)
        await response.write_eof()
        self._finished(plan)
        return response

    def _cut(self, request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
        # The connection drops without [DONE], like a crashed server; close() (not abort())
        # first flushes the tokens already written, as a real crash mid-stream would have.
        if request.transport is not None:
            request.transport.close()
        return response

    def _finished(self, plan: GenerationRequest) -> None:
        self.core.record_finish_reason(
            "length" if plan.plans[0].finish_reason == "length" else "stop")
        self._count_served()

    # --- control --------------------------------------------------------------------------

    async def get_faults(self, request: web.Request) -> web.Response:  # noqa: ARG002 (an aiohttp handler)
        return web.json_response({**asdict(self.faults), "dead": self.core.dead})

    async def set_faults(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        validate_faults(body)
        if body.get("clear"):
            self.faults.__dict__.update(asdict(FaultSwitches()))
            self.core.dead = False
        for key, value in body.items():
            if key in self.faults.__dict__:
                setattr(self.faults, key, value)
        # "Die after N more": a count set now starts now.
        if "die_after_requests" in body:
            self.requests_served = 0
        if "die_mid_stream_after_tokens" in body:
            self.tokens_streamed = 0
        if "hang_after_tokens" in body or body.get("clear"):
            self.core.hang_countdown = self.faults.hang_after_tokens
        self.core.wake.set()  # a hung core re-reads its switch
        if self.faults.hold:
            self.released.clear()
        else:
            self.released.set()  # the held requests go on
        if body.get("die"):
            self.die("simulated death by control request")
        refuse = body.get("refuse_connections_s")
        if refuse and self.set_listening is not None:
            asyncio.get_running_loop().call_later(0.05, self._start_refusing, float(refuse))
        return web.json_response({**asdict(self.faults), "dead": self.core.dead})

    def _start_refusing(self, seconds: float) -> None:
        assert self.set_listening is not None
        asyncio.get_running_loop().create_task(self.refuse_connections_for(seconds))

    async def refuse_connections_for(self, seconds: float) -> None:
        """Close the listener for `seconds` (real seconds, like a restart), then reopen it."""
        assert self.set_listening is not None
        await self.set_listening(False)
        log("WARNING", "sparksim", f"refusing connections for {seconds}s")
        await asyncio.sleep(seconds)
        self.faults.refuse_connections_s = None
        await self.set_listening(True)
        log("WARNING", "sparksim", "accepting connections again")

    async def requests(self, request: web.Request) -> web.Response:  # noqa: ARG002 (an aiohttp handler)
        return web.json_response(list(self.received))

    async def state(self, request: web.Request) -> web.Response:  # noqa: ARG002 (an aiohttp handler)
        core = self.core
        return web.json_response({
            "running": core.active_sequences,
            "waiting": core.metrics.waiting,
            "kv_pool_tokens": self.config.kv_pool_tokens,
            "kv_used": core.kv_used,
            "max_model_len": self.config.max_model_len,
            "max_num_seqs": self.config.max_num_seqs,
            "time_scale": self.config.time_scale,
            "profile": asdict(self.config.profile),
            "dead": core.dead,
        })


async def _body_as_sent(request: web.Request) -> Any:
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return await request.text()


async def _json_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise bad_request(f"JSON decode error: {error}") from error
    if not isinstance(body, dict):
        raise bad_request("request body must be a JSON object")
    return body
