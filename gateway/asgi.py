"""The gateway's ASGI entry: /v1/... and /lanes/<lane>/v1/... are dispatched here before
Django sees them.

Why not a Django view: measured on this machine, a bare Django async view serves ~600
requests/s (~1.4 ms per request of middleware, URL resolving and request/response
objects) — that alone is most of the 2 ms the gateway may add. The gateway needs none of
it (no session, CSRF, messages or templates: API keys, not users), so it parses the few
headers it needs from the ASGI scope and answers with raw ASGI messages. Validation is
done by gateway.wire (typed, OpenAI-shaped errors naming the field); Django's ORM
is still the only way to the database, off the hot path (caches, batched writes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson
from django.conf import settings

from gateway.choose import AUTO
from gateway.directory import KeyInfo, LaneInfo, resolve_model
from gateway.feedback import handle_feedback
from gateway.handler import finish, handle_completion
from gateway.http import (
    NO_BODY_LIMIT,
    NO_BODY_RULE,
    Receive,
    Scope,
    Send,
    authenticate,
    check_declared_length,
    read_body,
    send_bytes,
    send_error,
)
from gateway.large_pool import POOL
from gateway.outcome import Outcome, new_request_id
from gateway.runtime import close_runtime, runtime
from gateway.shared_files import SHARED_FILES
from gateway.wire import GatewayError

ENDPOINTS = {"chat/completions": "chat.completions", "completions": "completions"}
CREATED = int(time.time())


def is_gateway_path(path: str) -> bool:
    if path.startswith("/v1/"):
        return True
    if path.startswith("/lanes/"):
        parts = path.split("/", 4)  # ['', 'lanes', name, 'v1', rest]
        return len(parts) >= 4 and parts[3] == "v1"
    return False


def split_path(path: str) -> tuple[str | None, str]:
    """(lane named by the URL or None, the OpenAI path after /v1/)."""
    if path.startswith("/lanes/"):
        _, _, lane, _, rest = (path.split("/", 4) + [""])[:5]
        return lane, rest
    rest = path[len("/v1/"):]
    if rest.startswith("chat/") and rest != "chat/completions":
        # The seed's aliases: POST /v1/chat/<lane>, or /v1/chat/<lane> used as a base URL.
        _, lane, *tail = rest.split("/", 2)
        return lane, tail[0] if tail else "chat/completions"
    return None, rest


def model_card(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": CREATED, "owned_by": "spark-lanes"}


def visible_models(lanes: dict[str, LaneInfo] | Any, key: KeyInfo, path_lane: str | None,
                   answering: Callable[[LaneInfo], bool]) -> list[str]:
    """The models this key can call right now: lanes it may use that are serving with a
    closed circuit (a stopped or failing lane is not offered to clients choosing a model)."""
    names = [lane.public_model_name for lane in lanes.values()
             if key.may_use(lane.name) and (path_lane is None or lane.name == path_lane) and answering(lane)]
    return names if path_lane is not None else [AUTO, *names]


async def handle_models(scope: Scope, receive: Receive, send: Send, *, path_lane: str | None, model_id: str | None) -> None:
    rt = runtime()
    started = time.perf_counter()
    headers = [(b"x-request-id", new_request_id().encode())]
    try:
        key = await authenticate(rt, scope)
        # Read (a stray body must not stay in the socket), but within a small bound: a models
        # request has no body, and a large one here would escape the large bodies' pace and bound.
        check_declared_length(scope, NO_BODY_LIMIT, NO_BODY_RULE)
        await read_body(receive, NO_BODY_LIMIT, rule=NO_BODY_RULE)
        lanes = await rt.lanes.get()
        if path_lane is not None and (path_lane not in lanes or not key.may_use(path_lane)):
            raise GatewayError(404, f"The lane `{path_lane}` does not exist.", code="model_not_found")
        visible = visible_models(lanes, key, path_lane,
                                 lambda lane: lane.serving and any(rt.health.available(lane.name, r) for r in lane.replicas))
        if model_id is None:
            body = {"object": "list", "data": [model_card(name) for name in visible]}
        else:
            lane = resolve_model(model_id, lanes)
            if model_id != AUTO and (lane is None or lane.public_model_name not in visible):
                raise GatewayError(404, f"The model `{model_id}` does not exist.", code="model_not_found", param="model")
            body = model_card(model_id if model_id == AUTO else lane.public_model_name)  # type: ignore[union-attr]
        await send_bytes(send, 200, orjson.dumps(body), headers)
    except GatewayError as error:
        await send_error(send, error, headers)
        if error.status == 401:
            outcome = Outcome(request_id=headers[0][1].decode(), started=started, status=401, error_code=error.code)
            finish(rt, None, None, "models", outcome)


async def gateway_app(scope: Scope, receive: Receive, send: Send) -> None:
    path_lane, rest = split_path(scope["path"])
    method = scope["method"]
    endpoint = ENDPOINTS.get(rest)
    if endpoint is not None and method == "POST":
        await handle_completion(scope, receive, send, endpoint=endpoint, path_lane=path_lane or None)
    elif rest == "feedback" and not path_lane and method == "POST":
        await handle_feedback(scope, receive, send)
    elif (rest == "models" or rest.startswith("models/")) and method == "GET":
        await handle_models(scope, receive, send, path_lane=path_lane or None, model_id=rest[7:] or None)
    elif endpoint is not None or rest in ("models", "feedback") or rest.startswith("models/"):
        error = GatewayError(405, f"{method} is not allowed on {scope['path']}.", code="method_not_allowed")
        await send_error(send, error, [(b"allow", b"POST" if endpoint or rest == "feedback" else b"GET"),
                                       (b"x-request-id", new_request_id().encode())])
    else:
        error = GatewayError(404, f"Unknown endpoint {scope['path']}.", code="unknown_url")
        await send_error(send, error, [(b"x-request-id", new_request_id().encode())])


def with_gateway(django_app: Any) -> Any:
    """Wrap the project's ASGI app: gateway paths go to the gateway, everything else (and
    WebSockets) to Django/Channels unchanged. Lifespan startup starts the large-body
    workers; shutdown flushes the request log and stops those workers and helpers."""

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" and is_gateway_path(scope["path"]):
            await gateway_app(scope, receive, send)
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    POOL.warm(settings.GATEWAY_LARGE_BODY_WORKERS, settings.GATEWAY_LARGE_BODY_NICENESS)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await close_runtime()
                    # Here, not in an exit hook: uvicorn re-raises SIGTERM once the lifespan
                    # has ended, and the process dies without running any.
                    await asyncio.to_thread(POOL.shutdown)
                    await asyncio.to_thread(SHARED_FILES.close)
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        else:
            await django_app(scope, receive, send)

    return application
